"""The launch file and the standalone runner start the same processes with the same parameters."""

import ast
from pathlib import Path

import pytest
import yaml

from rip_control.run import finetune, launching
from rip_control.run.launching import (
    CONTROL,
    LAUNCH_ARGUMENTS,
    LEARNER,
    node_parameters,
    param_text,
)

REPO = Path(__file__).resolve().parent.parent
LAUNCH = REPO / 'launch' / 'finetune.launch.py'
REQUIRED = {
    'rate',
    'serial_port',
    'run_name',
    'episodes',
    'episode_seconds',
    'gradient_steps',
    'resume_buffer',
    'policy',
    'params_file',
}


def test_the_launch_file_declares_every_required_argument_from_the_shared_table():
    names = {a.name for a in LAUNCH_ARGUMENTS}
    assert REQUIRED <= names
    assert 'LAUNCH_ARGUMENTS' in _launch_file_imports('rip_control.run.launching')


def _launch_file_imports(module):
    """Names the launch file imports from ``module``."""
    tree = ast.parse(LAUNCH.read_text())
    return {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == module
        for alias in node.names
    }


def _launch_executables():
    tree = ast.parse(LAUNCH.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == 'executable':
            found.add(node.value.value)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith('/lib/rip_control/'):
                found.add(node.value.rsplit('/', 1)[1])
    return found


def test_runner_plan_has_the_launch_files_executables_and_parameters():
    args = {'rate': '50', 'episodes': '3', 'gradient_steps': '2', 'run_name': '2024'}
    specs, _ = finetune.plan(args, pid=1)
    # The launch file starts the plan's executables, and the supervisor that drives them.
    assert {s.executable for s in specs} | {'finetune_supervisor'} == _launch_executables()
    by = {s.label: s for s in specs}
    params = node_parameters(args)
    for key, value in params[CONTROL].items():
        if key not in ('serial_port', 'policy'):
            assert by['control'].params[key] == value
    # Typed by the table, whatever the spelling: rate:=50 is the double the nodes declare.
    assert by['control'].params['rate_hz'] == 50.0 and by['learner'].params['rate_hz'] == 50.0
    assert isinstance(by['control'].params['rate_hz'], float)
    assert by['control'].params['episodes'] == 3
    assert by['learner'].params['gradient_steps'] == 2
    assert by['control'].params['serial_port'] == '/tmp/rip_rig_1'  # the emulator's link
    # An empty policy is the one shipped for the rate.
    assert by['control'].params['policy'] == str(launching.packaged_policy(50.0))
    cmd = by['control'].command()
    assert '-p' in cmd and 'rate_hz:=50.0' in cmd and 'episodes:=3' in cmd
    assert "run_name:='2024'" in cmd  # quoted: rcl would read a bare 2024 as an integer
    # A value other than the default, spelled as a user types it.
    params = node_parameters({'rate': '100'})
    assert params[CONTROL]['rate_hz'] == params[LEARNER]['rate_hz'] == 100.0
    assert isinstance(params[CONTROL]['rate_hz'], float)


def test_a_params_file_is_typed_by_the_table_and_unknown_keys_are_refused(tmp_path):
    path = tmp_path / 'p.yaml'
    path.write_text(
        'rip_control:\n  ros__parameters:\n    max_action_v: 3\n    max_strikes: 4.0\n'
        'rip_learner:\n  ros__parameters:\n    learning_rate: 1\n    run_name: 2024\n'
    )
    params = node_parameters({'params_file': str(path)})
    assert params[CONTROL]['max_action_v'] == 3.0 and isinstance(
        params[CONTROL]['max_action_v'], float
    )
    assert params[CONTROL]['max_strikes'] == 4 and isinstance(params[CONTROL]['max_strikes'], int)
    assert params[LEARNER]['learning_rate'] == 1.0
    path.write_text('rip_control:\n  ros__parameters:\n    max_strike: 4\n')
    with pytest.raises(ValueError, match=r'p.yaml.*max_strike.*did you mean max_strikes'):
        node_parameters({'params_file': str(path)})
    path.write_text('rip_control:\n  ros__parameters:\n    max_strikes: 2.5\n')
    with pytest.raises(ValueError, match=r'max_strikes: 2.5: expected an integer'):
        node_parameters({'params_file': str(path)})


def test_yaml_and_launch_defaults_agree():
    doc = yaml.safe_load((REPO / 'config' / 'finetune.yaml').read_text())
    for a in LAUNCH_ARGUMENTS:
        for node, param in a.targets:
            in_yaml = doc[node]['ros__parameters'][param]
            assert param_text(a.convert(in_yaml)) == param_text(a.convert(a.default)), (
                f'{a.name}: launch default {a.default!r} vs {node}.{param}={in_yaml!r}'
            )


def test_unknown_or_malformed_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="argument 'rat' does not exist; did you mean rate"):
        node_parameters({'rat': '50'})
    with pytest.raises(ValueError, match=r'rate:=abc: expected a double'):
        node_parameters({'rate': 'abc'})
    with pytest.raises(ValueError, match=r'episodes:=2.5: expected an integer'):
        node_parameters({'episodes': '2.5'})
    with pytest.raises(ValueError, match='episodes=3'):
        launching.parse_args(['episodes=3'])


def test_every_node_parameter_of_the_yaml_is_declared_by_the_nodes():
    from rip_control.ros.control_node import PARAMETERS as CONTROL_PARAMETERS
    from rip_learner.learner_node import PARAMETERS

    doc = yaml.safe_load((REPO / 'config' / 'finetune.yaml').read_text())
    declared = {p.name for p in CONTROL_PARAMETERS}
    assert set(doc[CONTROL]['ros__parameters']) <= declared
    assert set(doc[LEARNER]['ros__parameters']) <= {p.name for p in PARAMETERS}


def test_the_launch_file_builds_its_processes_from_the_runners_plan():
    assert 'plan' in _launch_file_imports('rip_control.run.finetune')


def test_a_plan_for_several_rigs_gives_each_its_namespace_emulator_and_folder():
    specs, _ = finetune.plan({'rigs': '3', 'run_name': 'many'}, pid=7)
    controls = [s for s in specs if s.executable == 'control_node']
    emulators = [s for s in specs if s.executable == 'rig_emulator']
    assert [s.namespace for s in controls] == ['rig0', 'rig1', 'rig2']
    assert [s.fqn for s in controls] == [
        '/rig0/rip_control',
        '/rig1/rip_control',
        '/rig2/rip_control',
    ]
    links = [s.args[s.args.index('--link') + 1] for s in emulators]
    assert links == ['/tmp/rip_rig_7_0', '/tmp/rip_rig_7_1', '/tmp/rip_rig_7_2']
    assert [s.params['serial_port'] for s in controls] == links
    assert [s.params['run_name'] for s in controls] == ['many/rig0', 'many/rig1', 'many/rig2']
    assert len({s.params['seed'] for s in controls}) == 3
    for s in controls:
        assert s.remaps == {'transitions': '/transitions', 'policy_weights': '/policy_weights'}
        assert '-r' in s.command() and 'transitions:=/transitions' in s.command()
    assert sum(s.executable == 'learner_node' for s in specs) == 1
    with pytest.raises(ValueError, match=r'serial_port lists 1 port\(s\) but rigs:=2'):
        finetune.plan({'rigs': '2', 'serial_port': '/dev/ttyUSB0'})
    with pytest.raises(ValueError, match=r'rigs:=0: expected a value in \[1, 16\]'):
        finetune.plan({'rigs': '0'})
