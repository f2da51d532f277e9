"""The learner node in its own process over DDS: checks, weights, persistence, refusals."""

import signal
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
import numpy as np
import pytest
import rclpy
from std_msgs.msg import Float32MultiArray, MultiArrayDimension, UInt8MultiArray

from rip_control import buffer_file
from rip_control.buffer_file import BufferMeta
from rip_control.policy import PolicyMeta, decode_actor, encode_actor, random_actor
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
from rip_control.ros.qos import TRANSITIONS_QOS, WEIGHTS_QOS
from rip_control.transitions import Transition, field_layout, run_tagged

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def _stop(proc, sig=signal.SIGINT):
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out


def _msg(t, labels=None, run_id=''):
    msg = Float32MultiArray()
    msg.layout.dim = [
        MultiArrayDimension(label=lbl, size=n, stride=n)
        for lbl, n in run_tagged(labels or field_layout(OBS_SIZE, ACTION_SIZE), run_id)
    ]
    msg.data = t.pack().tolist()
    return msg


def _transition(i, dt=0.02, reward=0.0):
    rng = np.random.default_rng(i)
    return Transition(
        episode=0,
        step=i,
        obs=rng.uniform(-1, 1, OBS_SIZE).astype(np.float32),  # inside the observation space
        action=rng.uniform(-1, 1, ACTION_SIZE).astype(np.float32),
        reward=reward,
        next_obs=rng.uniform(-1, 1, OBS_SIZE).astype(np.float32),
        terminated=False,
        truncated=(i % 50 == 49),
        dt_s=dt,
        policy_version=1,
    )


def _zeros(n, fill=0.0):
    return {
        'observations': np.full((n, OBS_SIZE), fill, np.float32),
        'next_observations': np.full((n, OBS_SIZE), fill, np.float32),
        'actions': np.zeros((n, ACTION_SIZE), np.float32),
        'rewards': np.zeros(n, np.float32),
        'dones': np.zeros(n, np.float32),
        'timeouts': np.zeros(n, np.float32),
    }


def _one_save(run_dir):
    """The buffer, the actor and the SAC networks in ``run_dir`` are one save: its id."""
    from rip_control import run_files
    from rip_control.policy import read_metadata

    _, meta = buffer_file.load(
        run_dir / run_files.BUFFER, rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE
    )
    ids = {
        name: read_metadata((run_dir / name).read_bytes()).get('generation', '')
        for name in (run_files.POLICY_LATEST, run_files.CHECKPOINT)
    }
    assert meta.generation and set(ids.values()) == {meta.generation}, (meta.generation, ids)
    return meta.generation


def _wait(node, cond, timeout_s):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        rclpy.spin_once(node, timeout_sec=0.05)
    return cond()


def test_learner_checks_transitions_trains_publishes_and_saves_on_sigint(
    ros_node, tmp_path, learner_process
):
    proc, name = learner_process(run_name='r', run_id='ours')
    weights, diags = [], []
    ws = ros_node.create_subscription(
        UInt8MultiArray, 'policy_weights', lambda m: weights.append(bytes(m.data)), WEIGHTS_QOS
    )
    ds = ros_node.create_subscription(
        DiagnosticArray,
        '/diagnostics',
        lambda m: diags.extend(
            {kv.key: kv.value for kv in s.values} for s in m.status if s.name.startswith(name)
        ),
        10,
    )
    pub = ros_node.create_publisher(Float32MultiArray, 'transitions', TRANSITIONS_QOS)
    try:
        assert _wait(ros_node, lambda: pub.get_subscription_count() > 0 and weights, 60)
        first = decode_actor(weights[0], rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE)
        assert first.version >= 1  # published once at start
        assert first.metadata['run_id'] == 'ours'  # what a control node of this run checks
        for i in range(100):
            pub.publish(_msg(_transition(i), run_id='ours'))
        bad_nan = _transition(1000, reward=float('nan'))
        pub.publish(_msg(bad_nan, run_id='ours'))
        pub.publish(_msg(_transition(1001, dt=0.035), run_id='ours'))  # a stretched tick
        pub.publish(_msg(_transition(1002, dt=0.01), run_id='ours'))  # a 100 Hz transition
        wrong = list(field_layout(OBS_SIZE, ACTION_SIZE))
        wrong[2] = ('observation', OBS_SIZE)
        pub.publish(_msg(_transition(1003), labels=wrong, run_id='ours'))
        # Another run's control node in this domain, and an untagged publisher.
        pub.publish(_msg(_transition(1004), run_id='theirs'))
        pub.publish(_msg(_transition(1005)))

        def done():
            return (
                diags
                and int(diags[-1]['transitions_rejected']) == 6
                and int(diags[-1]['gradient_steps_done']) > 0
            )

        assert _wait(ros_node, done, 30), diags[-1:] or 'no diagnostics'
        d = diags[-1]
        assert d['rejected_non_finite'] == '1'
        assert d['rejected_dt'] == '2'
        assert d['rejected_layout'] == '1'
        assert d['rejected_foreign'] == '2'
        assert int(d['buffer_size']) == 100
        assert _wait(ros_node, lambda: len(weights) > 1, 20)
        versions = [
            decode_actor(w, rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE).version
            for w in weights
        ]
        assert versions == sorted(versions) and versions[-1] > versions[0]
    finally:
        code, out = _stop(proc)
        for sub in (ws, ds):
            ros_node.destroy_subscription(sub)
        ros_node.destroy_publisher(pub)
    assert code == 0, out
    arrays, meta = buffer_file.load(
        tmp_path / 'runs' / 'r' / 'replay_buffer.safetensors',
        rate_hz=50.0,
        obs_size=OBS_SIZE,
        action_size=ACTION_SIZE,
    )
    assert meta.count == 100 and meta.rate_hz == 50.0
    assert arrays['timeouts'].sum() == 2  # steps 49 and 99 were truncations, kept apart
    assert (tmp_path / 'runs' / 'r' / 'policy_latest.safetensors').exists()


def test_learner_refuses_a_buffer_from_another_rate_naming_both(tmp_path, learner_process):
    path = tmp_path / 'b100.safetensors'
    arrays = _zeros(10)
    buffer_file.save(path, arrays, BufferMeta(100.0, OBS_SIZE, ACTION_SIZE, 10))
    before = path.read_bytes()
    proc, _ = learner_process(run_name='r', resume_buffer=str(path))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert '100 Hz' in out and '50 Hz' in out
    assert path.read_bytes() == before
    assert not (tmp_path / 'runs' / 'r' / 'replay_buffer.safetensors').exists()


def test_learner_refuses_a_corrupt_buffer_and_overwrites_nothing(tmp_path, learner_process):
    run_dir = tmp_path / 'runs' / 'r'
    run_dir.mkdir(parents=True)
    path = run_dir / 'replay_buffer.safetensors'
    arrays = _zeros(10, fill=1.0)
    buffer_file.save(path, arrays, BufferMeta(50.0, OBS_SIZE, ACTION_SIZE, 10))
    data = bytearray(path.read_bytes())
    data[-7] ^= 0xFF
    path.write_bytes(bytes(data))
    proc, _ = learner_process(run_name='r', resume_buffer=str(path))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert 'checksum' in out and str(path) in out
    assert path.read_bytes() == bytes(data)  # the user's file is left as it was


def test_learner_refuses_an_initial_policy_trained_at_another_rate(tmp_path, learner_process):
    actor = random_actor(OBS_SIZE, ACTION_SIZE, (64, 64), 100.0, version=1)
    path = tmp_path / 'sim_100hz.safetensors'
    path.write_bytes(
        encode_actor(PolicyMeta(1, 100.0, OBS_SIZE, ACTION_SIZE, (64, 64)), actor.tensors)
    )
    proc, _ = learner_process(run_name='p', policy=str(path))
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 2
    assert 'trained at 100 Hz but this node runs at 50 Hz' in out


def test_learner_refuses_a_run_folder_whose_buffer_it_would_overwrite(tmp_path, learner_process):
    run_dir = tmp_path / 'runs' / 'r'
    run_dir.mkdir(parents=True)
    earlier = run_dir / 'replay_buffer.safetensors'
    buffer_file.save(earlier, _zeros(10), BufferMeta(50.0, OBS_SIZE, ACTION_SIZE, 10))
    before = earlier.read_bytes()
    proc, _ = learner_process(run_name='r')  # not continuing it
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert f'{earlier} holds the replay buffer of an earlier run' in out
    assert earlier.read_bytes() == before


@pytest.mark.parametrize('sig', ['SIGINT', 'SIGTERM'])
@pytest.mark.parametrize('training', [False, True])
def test_a_signal_saves_the_buffer_and_exits_0_waiting_or_training(
    ros_node, tmp_path, learner_process, sig, training
):
    # Continuing a run: the buffer it started from is saved back with whatever came since.
    run_dir = tmp_path / 'runs' / 'r'
    run_dir.mkdir(parents=True)
    path = run_dir / 'replay_buffer.safetensors'
    buffer_file.save(path, _zeros(40, fill=0.5), BufferMeta(50.0, OBS_SIZE, ACTION_SIZE, 40))
    proc, name = learner_process(run_name='r', resume_buffer=str(path), learning_starts=500)
    diags = []
    ds = ros_node.create_subscription(
        DiagnosticArray,
        '/diagnostics',
        lambda m: diags.extend(
            (s.message, {kv.key: kv.value for kv in s.values})
            for s in m.status
            if s.name.startswith(name)
        ),
        10,
    )
    pub = ros_node.create_publisher(Float32MultiArray, 'transitions', TRANSITIONS_QOS)
    sent = 0
    try:
        assert _wait(ros_node, lambda: pub.get_subscription_count() > 0 and diags, 60)
        assert diags[-1][0] == 'waiting for data'
        if training:
            for i in range(500):  # within the topic's depth: all delivered
                pub.publish(_msg(_transition(i)))
            sent = 500

            def training_on_all():
                d = diags[-1][1]
                return int(d['transitions_accepted']) == sent and int(d['gradient_steps_done'])

            assert _wait(ros_node, training_on_all, 60), diags[-1]
            assert diags[-1][0] == 'training'
    finally:
        code, out = _stop(proc, getattr(signal, sig))
        ros_node.destroy_subscription(ds)
        ros_node.destroy_publisher(pub)
    assert code == 0, out
    assert 'Traceback' not in out, out[-2000:]
    _, meta = buffer_file.load(path, rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE)
    assert meta.count == 40 + sent
    # The actor and the SAC networks too, in the same save (no periodic one: the fixture's
    # checkpoint interval is an hour).
    assert _one_save(run_dir) == meta.generation


@pytest.mark.alone  # its ~1 Hz reports and a learner that cannot keep up: timed
def test_learner_diagnostics_as_rqt_robot_monitor_sees_them(ros_node, learner_process):
    # K = 100 cannot be kept up with here: the learner must say so (WARN), and a rejected
    # transition must be reported over it.
    proc, name = learner_process(run_name='diag', gradient_steps=100, learning_starts=32)
    statuses = []
    ds = ros_node.create_subscription(
        DiagnosticArray,
        '/diagnostics',
        lambda m: statuses.extend(
            (time.monotonic(), s) for s in m.status if s.name.startswith(name)
        ),
        10,
    )
    pub = ros_node.create_publisher(Float32MultiArray, 'transitions', TRANSITIONS_QOS)
    try:
        assert _wait(ros_node, lambda: pub.get_subscription_count() > 0 and statuses, 60)
        first = statuses[-1][1]
        assert (first.name, first.hardware_id) == (f'{name}: learner', 'rip_learner')
        assert (first.level, first.message) == (DiagnosticStatus.OK, 'waiting for data')
        for i in range(600):
            pub.publish(_msg(_transition(i)))
        assert _wait(ros_node, lambda: statuses[-1][1].level == DiagnosticStatus.WARN, 30)
        assert statuses[-1][1].message == 'falling behind K updates per transition'
        pub.publish(_msg(_transition(700, reward=float('inf'))))
        assert _wait(ros_node, lambda: statuses[-1][1].message == 'transitions rejected', 10)
        assert statuses[-1][1].level == DiagnosticStatus.WARN
        assert _wait(ros_node, lambda: len(statuses) >= 5, 10)
    finally:
        code, out = _stop(proc)
        ros_node.destroy_subscription(ds)
        ros_node.destroy_publisher(pub)
    assert code == 0, out
    values = {kv.key: kv.value for kv in statuses[-1][1].values}
    for key in ('buffer_size', 'updates_per_s', 'updates_per_transition', 'transitions_rejected'):
        float(values[key])  # plottable
    times = [t for t, _ in statuses]
    gaps = np.diff(times)
    assert len(gaps) >= 3 and 0.7 < float(np.median(gaps)) < 1.3  # ~1 Hz


def test_a_failed_training_thread_reports_error_saves_and_exits_1(
    ros_node, tmp_path, learner_process
):
    proc, name = learner_process(run_name='f', fault_train_error_after_updates=50)
    statuses = []
    ds = ros_node.create_subscription(
        DiagnosticArray,
        '/diagnostics',
        lambda m: statuses.extend(s for s in m.status if s.name.startswith(name)),
        10,
    )
    pub = ros_node.create_publisher(Float32MultiArray, 'transitions', TRANSITIONS_QOS)
    try:
        assert _wait(ros_node, lambda: pub.get_subscription_count() > 0 and statuses, 60)
        for i in range(100):
            pub.publish(_msg(_transition(i)))
        assert _wait(ros_node, lambda: statuses[-1].level == DiagnosticStatus.ERROR, 30), [
            s.message for s in statuses[-3:]
        ]
        out, _ = proc.communicate(timeout=60)
    finally:
        ros_node.destroy_subscription(ds)
        ros_node.destroy_publisher(pub)
    assert statuses[-1].message.startswith('training failed: RuntimeError: injected')
    assert proc.returncode == 1, out
    # What it had received is saved on the way out.
    _, meta = buffer_file.load(
        tmp_path / 'runs' / 'f' / 'replay_buffer.safetensors',
        rate_hz=50.0,
        obs_size=OBS_SIZE,
        action_size=ACTION_SIZE,
    )
    accepted = next(
        int(kv.value) for kv in statuses[-1].values if kv.key == 'transitions_accepted'
    )
    assert meta.count >= accepted >= 32  # (more may have arrived between the fault and the stop)
    assert _one_save(tmp_path / 'runs' / 'f') == meta.generation  # and the networks with it
