"""ament_python build of rip_control (also installs the rip_learner package)."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = 'rip_control'

setup(
    name=PACKAGE,
    version='0.1.0',
    # rip_bench (the benchmarks) runs from a source checkout only: not installed.
    packages=find_packages(
        exclude=['test', 'test.*', 'bench', 'bench.*', 'rip_bench', 'rip_bench.*']
    ),
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + PACKAGE]),
        ('share/' + PACKAGE, ['package.xml']),
        ('share/' + PACKAGE + '/launch', glob('launch/*.launch.py')),
        ('share/' + PACKAGE + '/config', glob('config/*.yaml')),
        # Pre-trained policies (rip_learner.pretrain): actor, critics, training record.
        *[
            ('share/' + PACKAGE + '/' + folder, glob(folder + '/*'))
            for folder in sorted(glob('policies/*'))
        ],
    ],
    install_requires=['setuptools'],
    zip_safe=True,
    maintainer='rip_control maintainers',
    maintainer_email='rip-control@example.com',
    description='Rate-exact SAC fine-tuning on a rotary inverted pendulum (ROS 2).',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'control_node = rip_control.ros.control_node:main',
            'learner_node = rip_learner.learner_node:main',
            'finetune = rip_control.finetune:main',
            'adapt = rip_control.adapt:main',
            'finetune_supervisor = rip_control.run.supervisor:main',
            'evaluate = rip_control.evaluate:main',
            'record = rip_control.record:main',
            'rig_emulator = rip_control.rig.emulator:main',
            'rig_check = rip_control.rig_check:main',
            'pretrain = rip_learner.pretrain:main',
            'identify = rip_learner.identify:main',
        ],
    },
)
