"""Bags of transitions, imported by the learner with the checks live data gets.

Written by an independent writer (``rosbags`` directly, as ``ros2 bag record`` would) and by
our recorder from a live control node.
"""

import math
import os
import signal
import subprocess
import sys
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray
import numpy as np
import pytest
import rclpy
from rosbags.interfaces import (
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore
from std_msgs.msg import Float64MultiArray

from rip_control.bags import BagRejected, BagWriter, read_transitions, serialize
from rip_control.procs import child_env, stop_process
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
from rip_control.transitions import Transition, field_layout

LAYOUT = list(field_layout(OBS_SIZE, ACTION_SIZE))
STORE = get_typestore(Stores.ROS2_KILTED)


def _transition(step, dt=0.02, reward=1.0, episode=0, truncated=False):
    return Transition(
        episode,
        step,
        np.full(OBS_SIZE, step / 1000, np.float32),  # inside the observation space
        np.array([0.1], np.float32),
        reward,
        np.full(OBS_SIZE, (step + 1) / 1000, np.float32),
        False,
        truncated,
        dt,
        1,
    )


def _independent_bag(path, storage, messages):
    """A bag as `ros2 bag record /transitions` writes it: no rip_control code involved."""
    msg_t = STORE.types['std_msgs/msg/Float32MultiArray']
    layout_t = STORE.types['std_msgs/msg/MultiArrayLayout']
    dim_t = STORE.types['std_msgs/msg/MultiArrayDimension']
    zero = QosTime(0, 0)
    qos = Qos(
        QosHistory.KEEP_LAST,
        1000,
        QosReliability.RELIABLE,
        QosDurability.VOLATILE,
        zero,
        zero,
        QosLiveliness.AUTOMATIC,
        zero,
        False,
    )
    with Writer(path, version=9, storage_plugin=storage) as w:
        conn = w.add_connection(
            '/transitions',
            'std_msgs/msg/Float32MultiArray',
            typestore=STORE,
            offered_qos_profiles=[qos],
        )
        other = w.add_connection('/chatter', 'std_msgs/msg/Float32MultiArray', typestore=STORE)
        for i, (labels, data) in enumerate(messages):
            dims = [dim_t(label=lbl, size=n, stride=0) for lbl, n in labels]
            msg = msg_t(
                layout=layout_t(dim=dims, data_offset=0), data=np.asarray(data, dtype=np.float32)
            )
            raw = STORE.serialize_cdr(msg, 'std_msgs/msg/Float32MultiArray')
            w.write(conn, 1_000_000_000 + i * 20_000_000, raw)
            w.write(other, 1_000_000_000 + i * 20_000_000, raw)  # another topic: ignored


@pytest.mark.parametrize('storage', [StoragePlugin.MCAP, StoragePlugin.SQLITE3])
def test_bags_from_an_independent_writer_import_with_per_transition_checks(tmp_path, storage):
    good = [(LAYOUT, _transition(i).pack()) for i in range(20)]
    stretched = [(LAYOUT, _transition(20, dt=0.05).pack())]
    nan = _transition(21).pack()
    nan[5] = np.nan
    bad_layout = [(LAYOUT[::-1], _transition(22).pack())]
    _independent_bag(tmp_path / 'b', storage, good + stretched + [(LAYOUT, nan)] + bad_layout)
    got = read_transitions(
        [tmp_path / 'b'],
        rate_hz=50.0,
        obs_size=OBS_SIZE,
        action_size=ACTION_SIZE,
        dt_tolerance_s=0.005,
    )
    assert got.messages == 23 and len(got.transitions) == 20
    assert [t.step for t in got.transitions] == list(range(20))
    assert got.rejected == {'dt': 1, 'non_finite': 1, 'layout': 1}
    # Recorded without a rate tag: a 100 Hz learner refuses each transition by its dt.
    got100 = read_transitions(
        [tmp_path / 'b'],
        rate_hz=100.0,
        obs_size=OBS_SIZE,
        action_size=ACTION_SIZE,
        dt_tolerance_s=0.005,
    )
    assert not got100.transitions and got100.rejected['dt'] == 21


def test_our_bags_are_tagged_with_the_rate_and_refused_at_another(tmp_path):
    w = BagWriter(tmp_path / 'ours', 50.0, OBS_SIZE, ACTION_SIZE)
    for i in range(5):
        w.write(serialize(LAYOUT, _transition(i).pack()), time.time_ns())
    w.close()
    assert (tmp_path / 'ours' / 'metadata.yaml').exists()
    assert list((tmp_path / 'ours').glob('*.mcap'))
    with pytest.raises(BagRejected, match=r'recorded at 50 Hz but this learner runs at 100 Hz'):
        read_transitions(
            [tmp_path / 'ours'],
            rate_hz=100.0,
            obs_size=OBS_SIZE,
            action_size=ACTION_SIZE,
            dt_tolerance_s=0.005,
        )
    with pytest.raises(FileExistsError, match='not overwriting'):
        BagWriter(tmp_path / 'ours', 50.0, OBS_SIZE, ACTION_SIZE)
    # Several bags at once, in the order given.
    _independent_bag(
        tmp_path / 'theirs',
        StoragePlugin.MCAP,
        [(LAYOUT, _transition(100 + i).pack()) for i in range(3)],
    )
    got = read_transitions(
        [tmp_path / 'ours', tmp_path / 'theirs'],
        rate_hz=50.0,
        obs_size=OBS_SIZE,
        action_size=ACTION_SIZE,
        dt_tolerance_s=0.005,
    )
    assert [t.step for t in got.transitions] == [0, 1, 2, 3, 4, 100, 101, 102]


def test_missing_and_corrupt_bags_are_refused_by_name(tmp_path):
    with pytest.raises(BagRejected, match='nowhere does not exist'):
        read_transitions(
            [tmp_path / 'nowhere'],
            rate_hz=50.0,
            obs_size=OBS_SIZE,
            action_size=ACTION_SIZE,
            dt_tolerance_s=0.005,
        )
    _independent_bag(tmp_path / 'b', StoragePlugin.MCAP, [(LAYOUT, _transition(0).pack())])
    mcap = next((tmp_path / 'b').glob('*.mcap'))
    mcap.write_bytes(b'\x89MCAP0\r\n' + b'garbage' * 50)
    with pytest.raises(BagRejected, match=r'bag .*b cannot be read'):
        read_transitions(
            [tmp_path / 'b'],
            rate_hz=50.0,
            obs_size=OBS_SIZE,
            action_size=ACTION_SIZE,
            dt_tolerance_s=0.005,
        )


def _wait(node, cond, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, 'timed out'
        rclpy.spin_once(node, timeout_sec=0.05)


@pytest.mark.ros
@pytest.mark.readme('python -m rip_control.record out:=runs/demo/transitions_bag rate:=50')
def test_recorder_bags_a_live_control_node_and_the_learner_imports_it(
    control_rig, ros_node, learner_process, tmp_path
):
    bag = tmp_path / 'live_bag'
    rec = subprocess.Popen(
        [
            sys.executable,
            '-m',
            'rip_control.record',
            f'out:={bag}',
            'rate:=50',
            'max_messages:=40',
        ],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines, matched = [], threading.Event()

    def read():
        for line in rec.stdout:
            lines.append(line)
            if 'publisher(s) matched' in line and not line.startswith('0 '):
                matched.set()

    threading.Thread(target=read, daemon=True).start()
    rig = control_rig(episodes=1, episode_seconds=1.0)
    assert rig.driver.change('configure')
    # The recorder's own subscription reports the match: no transition can be missed.
    assert matched.wait(30), ''.join(lines)
    # ...and the node's publisher has matched the recorder (discovery is per side).
    subscribers = []
    diag = ros_node.create_subscription(
        DiagnosticArray,
        '/diagnostics',
        lambda m: subscribers.extend(
            int(kv.value)
            for st in m.status
            if st.name.startswith(rig.name + ':')
            for kv in st.values
            if kv.key == 'transitions_subscribers'
        ),
        10,
    )
    _wait(ros_node, lambda: subscribers and subscribers[-1] >= 1, 15)
    ros_node.destroy_subscription(diag)
    assert rig.driver.change('activate')
    episodes = []
    sub = ros_node.create_subscription(
        Float64MultiArray, f'/{rig.name}/episode', episodes.append, 10
    )
    _wait(ros_node, lambda: episodes, 60)  # one 1 s episode at 50 Hz: up to 50 transitions
    ros_node.destroy_subscription(sub)
    # It stops by itself after 40 of them (fewer than the episode's 50, of which a stray late
    # tick may be dropped; a stop right after the episode could race the last one in
    # flight); SIGINT is tested on its own.
    assert rec.wait(timeout=30) == 0
    deadline = time.monotonic() + 5
    while not any('closed' in line for line in lines):
        assert time.monotonic() < deadline, ''.join(lines)
        time.sleep(0.05)
    got = read_transitions(
        [bag], rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE, dt_tolerance_s=0.005
    )
    # All 40 bagged; the import refuses only a tick stretched past the learner's 5 ms (the
    # rig's strike threshold here is 20 ms: see the control_rig fixture), never one that
    # does not decode, and the learner below imports the same ones.
    assert set(got.rejected) <= {'dt'} and got.rejected['dt'] <= 4, got.rejected
    imported = len(got.transitions)
    assert imported + got.rejected['dt'] == 40
    # Every one the loop published, in order: without the dt check, the bag holds the first
    # 40 of the episode, steps 0, 1, 2, ... (one the loop dropped late was never published:
    # a gap, which the node counts).
    whole = read_transitions(
        [bag], rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE, dt_tolerance_s=math.inf
    )
    steps = [t.step for t in whole.transitions]
    assert len(steps) == 40 and not whole.rejected
    assert steps[0] == 0 and all(b > a for a, b in zip(steps, steps[1:], strict=False)), steps
    assert steps[-1] - 39 <= 2, steps  # at most two late drops in 40 ticks
    # A learner fills its buffer from the bag at start and reports it in its diagnostics.
    proc, name = learner_process(run_name='bagged', resume_bag=str(bag))
    seen = {}

    def on_diag(msg):
        for st in msg.status:
            if st.name.startswith(name):
                seen.update({kv.key: kv.value for kv in st.values})

    sub = ros_node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 10)
    _wait(ros_node, lambda: 'bag_imported' in seen, 90)
    ros_node.destroy_subscription(sub)
    assert seen['bag_imported'] == str(imported) and int(seen['buffer_size']) == imported
    assert stop_process(proc, signal.SIGINT, timeout_s=60) == 0
    assert f'imported {imported} transitions from 1 bag(s)' in proc.stdout.read()


def test_learner_refuses_a_bag_from_another_rate_naming_both(tmp_path, learner_process):
    w = BagWriter(tmp_path / 'b100', 100.0, OBS_SIZE, ACTION_SIZE)
    w.write(serialize(LAYOUT, _transition(0, dt=0.01).pack()), time.time_ns())
    w.close()
    proc, _ = learner_process(run_name='r', resume_bag=str(tmp_path / 'b100'))
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 2
    assert 'recorded at 100 Hz but this learner runs at 50 Hz' in out


@pytest.mark.ros
@pytest.mark.parametrize('sig', ['SIGINT', 'SIGTERM'])
def test_a_signal_closes_the_recorders_bag_and_exits_0(tmp_path, sig, ros_node):
    # With transitions in it (before, only an empty bag was shown closed): the ten it received
    # are in the closed, readable bag.
    from rclpy.duration import Duration
    from std_msgs.msg import Float32MultiArray, MultiArrayDimension

    from rip_control.ros.qos import TRANSITIONS_QOS

    bag = tmp_path / 'stopped_bag'
    topic = f'/signal_transitions_{os.getpid()}_{sig}'
    rec = subprocess.Popen(
        [sys.executable, '-m', 'rip_control.record', f'out:={bag}', 'rate:=50', f'topic:={topic}'],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    pub = ros_node.create_publisher(Float32MultiArray, topic, TRANSITIONS_QOS)
    try:
        first = rec.stdout.readline()  # printed once its subscription exists
        assert first.startswith('recording '), first
        matched = rec.stdout.readline()  # the recorder sees the publisher: matched both ways
        assert matched.startswith('1 publisher(s) matched'), matched
        deadline = time.monotonic() + 30
        while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)  # bounded wait for the match on this side too
        assert pub.get_subscription_count() == 1, 'the recorder never matched'
        for i in range(10):
            msg = Float32MultiArray(data=_transition(i).pack().tolist())
            msg.layout.dim = [MultiArrayDimension(label=lbl, size=n) for lbl, n in LAYOUT]
            pub.publish(msg)
        # reliable: acknowledged means the recorder's reader holds them
        assert pub.wait_for_all_acked(Duration(seconds=10))
        rec.send_signal(getattr(signal, sig))
        out, _ = rec.communicate(timeout=30)
    finally:
        ros_node.destroy_publisher(pub)
        if rec.poll() is None:
            rec.kill()
            rec.communicate()
    assert rec.returncode == 0, out
    assert f'closed {bag}: 10 transitions' in out, out
    assert (bag / 'metadata.yaml').exists()
    got = read_transitions(
        [bag], rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE, dt_tolerance_s=0.005
    )
    assert [t.step for t in got.transitions] == list(range(10))


# Run in a process of its own (record() initialises rclpy itself): the stop is requested once
# ten transitions are acknowledged by the recorder's reader, before its loop has taken any.
_DRAIN_SCRIPT = """
import os
import sys
import time

import numpy as np
import rclpy
from rclpy.duration import Duration
from std_msgs.msg import Float32MultiArray, MultiArrayDimension

from rip_control.params import parse_options
from rip_control.record import OPTIONS, record
from rip_control.ros.qos import TRANSITIONS_QOS
from rip_control.transitions import Transition, field_layout

OBS, ACT = 6, 1


class Stop:
    requested = False


stop = Stop()


def log(line):
    print(line, flush=True)
    if not line.startswith('recording '):
        return
    # The recorder's subscription exists; its loop has not spun yet.
    node = rclpy.create_node('drain_publisher')
    pub = node.create_publisher(Float32MultiArray, sys.argv[2], TRANSITIONS_QOS)
    deadline = time.monotonic() + 30
    while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    for i in range(10):  # as test_bags._transition makes them
        obs, nxt = np.full(OBS, i / 1000, np.float32), np.full(OBS, (i + 1) / 1000, np.float32)
        t = Transition(0, i, obs, np.array([0.1], np.float32), 1.0, nxt, False, False, 0.02, 1)
        msg = Float32MultiArray(data=t.pack().tolist())
        msg.layout.dim = [MultiArrayDimension(label=lbl, size=n)
                          for lbl, n in field_layout(OBS, ACT)]
        pub.publish(msg)
    assert pub.wait_for_all_acked(Duration(seconds=10))
    stop.requested = True  # as a signal's handler would


opts = parse_options([f'out:={sys.argv[1]}', f'topic:={sys.argv[2]}'], OPTIONS)
print('written', record(opts, stop, log=log, ros_teardown=False), flush=True)
os._exit(0)  # as the recorder's command line ends: no rclpy teardown
"""


@pytest.mark.ros
def test_after_a_stop_the_recorder_takes_what_its_subscription_received(tmp_path):
    bag = tmp_path / 'drained'
    topic = f'/drain_transitions_{os.getpid()}'
    proc = subprocess.run(
        [sys.executable, '-c', _DRAIN_SCRIPT, str(bag), topic],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The loop never ran (the stop came first); the drain took all ten.
    assert 'publisher(s) matched' not in proc.stdout, proc.stdout
    assert 'written 10' in proc.stdout and f'closed {bag}: 10 transitions' in proc.stdout
    got = read_transitions(
        [bag], rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE, dt_tolerance_s=0.005
    )
    assert [t.step for t in got.transitions] == list(range(10))


def test_a_bag_import_holds_only_the_newest_transitions_a_buffer_would_keep(tmp_path):
    # Read message by message: memory is bounded by `keep` (the buffer's size), not the bags.
    w = BagWriter(tmp_path / 'long', 50.0, OBS_SIZE, ACTION_SIZE)
    for i in range(50):
        w.write(serialize(LAYOUT, _transition(i).pack()), time.time_ns())
    w.close()
    _independent_bag(
        tmp_path / 'more',
        StoragePlugin.MCAP,
        [(LAYOUT, _transition(100 + i).pack()) for i in range(5)],
    )
    got = read_transitions(
        [tmp_path / 'long', tmp_path / 'more'],
        rate_hz=50.0,
        obs_size=OBS_SIZE,
        action_size=ACTION_SIZE,
        dt_tolerance_s=0.005,
        keep=20,
    )
    assert [t.step for t in got.transitions] == list(range(35, 50)) + list(range(100, 105))
    assert got.accepted == 55 and got.not_kept == 35 and got.messages == 55
    assert got.per_bag == {str(tmp_path / 'long'): 50, str(tmp_path / 'more'): 5}
    assert got.transitions.maxlen == 20
