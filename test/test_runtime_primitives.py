"""Pure runtime primitives, no ROS: pacer, watchdogs, outbox, codec, snapshot, host steal."""

import numpy as np
import pytest

from rip_control.policy import (
    PolicyMeta,
    PolicyRejected,
    decode_actor,
    encode_actor,
    load_actor_file,
    random_actor,
)
from rip_control.rt.outbox import Outbox
from rip_control.rt.pacer import Pacer
from rip_control.rt.watchdog import OverrunWatchdog, TimingViolation
from rip_control.transitions import Transition, TransitionRejected, field_layout, unpack

pytestmark = pytest.mark.alone


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def test_pacer_uses_absolute_deadlines_so_work_does_not_accumulate_drift():
    clock = FakeClock()
    pacer = Pacer(0.02, spin_s=0.0, clock=clock, sleep=clock.sleep)
    start = pacer.start()
    for _ in range(100):
        timing = pacer.wait()
        clock.t += 0.007  # work inside the tick
    assert timing.tick_time_s == pytest.approx(start + 100 * 0.02)


def test_pacer_skips_missed_cycles_instead_of_bursting():
    clock = FakeClock()
    pacer = Pacer(0.02, spin_s=0.0, clock=clock, sleep=clock.sleep)
    pacer.start()
    pacer.wait()
    clock.t += 0.065  # a 65 ms stall: three deadlines pass
    late = pacer.wait()
    assert late.missed == 2 and late.overrun_s == pytest.approx(0.045)
    nxt = pacer.wait()
    assert nxt.dt_s == pytest.approx(0.02 - 0.005)  # back on the grid, not a burst of 0 ms ticks
    assert nxt.overrun_s == 0.0 and pacer.n_missed == 2


def test_pacer_real_clock_holds_the_period():
    pacer = Pacer(0.005)
    pacer.start()
    dts = [pacer.wait().dt_s for _ in range(100)][1:]
    # The median: one pause of the VM's host skips whole cycles (as the pacer should), which
    # would move the mean; a pacer off its period moves the median too.
    assert np.median(dts) == pytest.approx(0.005, abs=2e-4), dts


def test_pacer_rejects_a_bad_period():
    with pytest.raises(ValueError, match='period_s must be a positive finite number, got 0'):
        Pacer(0)


def test_three_consecutive_strikes_raise_and_a_clean_tick_resets_the_count():
    dog = OverrunWatchdog(0.005, 3)
    for overrun in (0.006, 0.006, 0.001, 0.006, 0.006):
        dog.check_from_rt(overrun)
    with pytest.raises(TimingViolation, match='3 consecutive ticks overran'):
        dog.check_from_rt(0.007)
    assert dog.n_violations == 1 and dog.n_strikes_total == 5


def test_outbox_holds_back_until_confirmed_and_discards_on_violation():
    box = Outbox(capacity=10, holdback=2)
    for i in range(5):
        box.push_from_rt(i)
    assert [box.pop_from_non_rt() for _ in range(3)] == [0, 1, 2]
    assert box.pop_from_non_rt() is None
    assert box.discard_held_from_rt() == 2 and box.n_discarded == 2
    box.push_from_rt(9)
    box.flush_held_from_rt()
    assert box.pop_from_non_rt() == 9


def test_full_outbox_drops_and_counts_without_blocking():
    box = Outbox(capacity=2)
    for i in range(5):
        box.push_from_rt(i)
    assert len(box) == 2 and box.n_dropped_full == 3


def _bytes(version=1, rate=50.0, hidden=(8, 8), mutate=None):
    actor = random_actor(6, 1, hidden, rate, version=version)
    tensors = dict(actor.tensors)
    if mutate:
        mutate(tensors)
    return encode_actor(PolicyMeta(version, rate, 6, 1, hidden), tensors)


def _header(changes):
    """Valid weights whose JSON metadata has ``changes`` written over it, as raw bytes."""
    import json
    import struct

    data = _bytes()
    (n,) = struct.unpack_from('<Q', data)
    header = json.loads(data[8 : 8 + n])
    header['__metadata__'].update(changes)
    text = json.dumps(header).encode()
    return struct.pack('<Q', len(text)) + text + data[8 + n :]


def _deep_header(depth):
    import struct

    text = b'[' * depth + b']' * depth
    return struct.pack('<Q', len(text)) + text


def _bytes_with_wrong_shape():
    """Weights whose metadata says 8x8 layers but whose first layer is 8x5 (a broken sender)."""
    from safetensors.numpy import save

    actor = random_actor(6, 1, (8, 8), 50.0, version=1)
    tensors = dict(actor.tensors)
    tensors['layers.0.weight'] = np.zeros((8, 5), np.float32)
    return save(tensors, metadata=PolicyMeta(1, 50.0, 6, 1, (8, 8)).to_metadata())


def test_weights_round_trip_and_act_like_the_original():
    original = random_actor(6, 1, (16, 16), 50.0, version=3)
    data = encode_actor(original.meta, original.tensors)
    actor = decode_actor(data, rate_hz=50.0, obs_size=6, action_size=1)
    obs = np.linspace(-1, 1, 6).astype(np.float32)
    assert actor.version == 3
    np.testing.assert_allclose(actor.act(obs), original.act(obs))
    assert np.all(np.abs(actor.act(obs, np.ones(1, np.float32))) <= 1.0)


@pytest.mark.parametrize(
    ('data', 'kwargs', 'message'),
    [
        (_bytes(rate=100.0), {}, 'trained at 100 Hz but this node runs at 50 Hz'),
        (
            _bytes(mutate=lambda t: t['mu.bias'].__setitem__(0, np.nan)),
            {},
            'mu.bias holds non-finite',
        ),
        (_bytes(), {'obs_size': 7}, 'obs/action sizes 6/1, this node has 7/1'),
        (_bytes(version=2), {'min_version': 2}, 'version 2 is not newer than the running 2'),
        (_bytes_with_wrong_shape(), {}, r'layers.0.weight has shape \(8, 5\), expected \(8, 6\)'),
        (b'\x07' * 40, {}, 'safetensors header length'),
        (b'abc', {}, 'too short for safetensors'),
        (_bytes(version=-1), {}, r'version -1 is outside 0\.\.16777216'),
        (_bytes(version=2**24 + 1), {}, 'is outside 0..'),
        (_bytes(version=10**6 + 3), {'min_version': 2}, 'jumps 1000001 past the running 2'),
        (
            _bytes(mutate=lambda t: t['layers.1.weight'].__setitem__((0, 0), -2e3)),
            {},
            'layers.1.weight holds a weight of magnitude 2e[+]03, beyond the bound 1000',
        ),
        (_bytes(hidden=(4,) * 5), {}, r'hidden sizes \[4, 4, 4, 4, 4\] are outside the bounds'),
        (_bytes(hidden=(4097,)), {}, r'hidden sizes \[4097\] are outside'),
        # A sender's header this package never writes: each refused by name, none raising
        # anything but PolicyRejected (which the node counts; anything else ended it).
        (_header({'hidden_sizes': 8}), {}, 'metadata holds values that are not strings'),
        (_header({'policy_version': 1e300}), {}, 'not strings'),
        (_header({'rate_hz': []}), {}, 'not strings'),
        (_header({'policy_version': '9' * 5000}), {}, 'malformed weights metadata'),
        (_deep_header(100_000), {}, 'header is not JSON'),
    ],
)
def test_bad_weights_are_rejected_naming_the_problem(data, kwargs, message):
    args = {'rate_hz': 50.0, 'obs_size': 6, 'action_size': 1} | kwargs
    with pytest.raises(PolicyRejected, match=message):
        decode_actor(data, **args)


def test_weights_at_the_bounds_are_accepted_and_the_fit_check_runs_before_decoding():
    edge = _bytes(version=2 + 10**6, mutate=lambda t: t['mu.bias'].__setitem__(0, 1000.0))
    args = {'rate_hz': 50.0, 'obs_size': 6, 'action_size': 1}
    assert decode_actor(edge, min_version=2, **args).version == 2 + 10**6
    assert decode_actor(_bytes(version=2**24, hidden=(4,) * 4), **args).version == 2**24
    seen = []

    def too_big(meta):
        seen.append(meta.hidden_sizes)
        raise PolicyRejected('no room')

    with pytest.raises(PolicyRejected, match='no room'):
        decode_actor(_bytes_with_wrong_shape(), fits=too_big, **args)  # before its shapes
    assert seen == [(8, 8)]


def test_initial_policy_file_from_another_rate_is_refused_naming_both(tmp_path):
    path = tmp_path / 'p.safetensors'
    path.write_bytes(_bytes(rate=100.0))
    with pytest.raises(PolicyRejected, match='trained at 100 Hz but this node runs at 50 Hz'):
        load_actor_file(path, rate_hz=50.0, obs_size=6, action_size=1)


def test_transition_layout_round_trips_and_rejects_bad_messages():
    t = Transition(
        3,
        7,
        np.linspace(-1, 1, 6, dtype=np.float32),
        np.array([0.5], np.float32),
        0.25,
        np.ones(6, np.float32),
        False,
        True,
        0.02,
        4,
    )
    layout = list(field_layout(6, 1))
    back = unpack(layout, t.pack(), 6, 1)
    assert (back.episode, back.step, back.truncated, back.policy_version) == (3, 7, True, 4)
    assert back.dt_s == pytest.approx(0.02)
    bad = t.pack()
    bad[3] = np.inf
    with pytest.raises(TransitionRejected, match=r"non-finite values in \['obs'\]"):
        unpack(layout, bad, 6, 1)
    with pytest.raises(TransitionRejected, match='layout'):
        unpack(layout[:-1], t.pack()[:-1], 6, 1)


def _packed(**changes):
    """A valid transition's wire vector, then ``changes`` written over its fields."""
    t = Transition(
        3,
        7,
        np.zeros(6, np.float32),
        np.array([0.5], np.float32),
        0.25,
        np.zeros(6, np.float32),
        False,
        False,
        0.02,
        4,
    )
    data = t.pack()
    slices, offset = {}, 0
    for label, size in field_layout(6, 1):
        slices[label], offset = slice(offset, offset + size), offset + size
    for name, value in changes.items():
        label, _, index = name.partition('__')
        data[slices[label].start + int(index or 0)] = value
    return data


@pytest.mark.parametrize(
    ('changes', 'reason', 'message'),
    [
        ({'action': 1.5}, 'action', r'action \[1.5\] is outside \[-1, 1\]'),
        ({'obs__1': 1.5}, 'observation', r'obs\[1\] = 1.5 is outside \[-1, 1\] \(a sine'),
        ({'next_obs__2': -1.5}, 'observation', r'next_obs\[2\] = -1.5 is outside'),
        ({'obs__5': 1.01}, 'observation', r'obs\[5\] = 1.01 is outside'),  # a past action
        ({'reward': 1e30}, 'reward', r'reward 1e\+30 of a step not terminated is outside'),
        ({'reward': -0.3}, 'reward', r"outside the task's \[-0.25, 1\]"),  # still pendulum
        ({'reward': -1.3, 'next_obs__4': 10.0}, 'reward', r"outside the task's \[-1.25, 1\]"),
        ({'terminated': 1.0}, 'reward', r'step terminated is outside the task\'s \[-10, -10\]'),
        ({'terminated': 1.0, 'truncated': 1.0, 'reward': -10}, 'flags', 'cannot be terminated'),
        ({'terminated': 0.3}, 'counters', r'terminated 0.3\d* is not a whole number in 0..1'),
        ({'episode': -1}, 'counters', r'episode -1.0 is not a whole number'),
        ({'step': 2.5}, 'counters', 'step 2.5 is not a whole number'),
        ({'policy_version': -2}, 'counters', r'policy_version -2.0 is not a whole number in -1'),
    ],
)
def test_a_transition_no_rig_of_the_task_could_make_is_refused_naming_the_field(
    changes, reason, message
):
    with pytest.raises(TransitionRejected, match=message) as refused:
        unpack(list(field_layout(6, 1)), _packed(**changes), 6, 1)
    assert refused.value.reason == reason


def test_the_edges_of_the_task_are_accepted():
    layout = list(field_layout(6, 1))
    ok = [
        {},
        {'action': -1.0, 'obs__0': 4.0, 'obs__4': -12.0, 'reward': 1.0},  # as measured
        {'reward': -0.25, 'policy_version': -1},  # an excitation tick, every penalty but spin
        {'reward': -1.69, 'next_obs__4': 12.0},  # spinning at 120 rad/s: its own penalty
        {'terminated': 1.0, 'reward': -10.0},
    ]
    for changes in ok:
        unpack(layout, _packed(**changes), 6, 1)


def test_host_steal_is_read_from_proc_stat_and_an_unreadable_one_reads_as_zero(tmp_path):
    from rip_control.stats import cpu_times, steal_fraction

    stat = tmp_path / 'stat'
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text('cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 50 0 25 400 5 0 2 18 0 0\n')
    start = cpu_times(str(stat))
    assert start == (35, 1000)
    stat.write_text('cpu  200 0 100 1550 10 0 5 135 0 0\n')
    assert steal_fraction(start, cpu_times(str(stat))) == pytest.approx(100 / 1000)
    assert cpu_times(str(tmp_path / 'missing')) == (0, 0)
    stat.write_text('cpu  100 0 x 800\n')  # some container's view
    assert cpu_times(str(stat)) == (0, 0)
    assert steal_fraction((0, 0), (0, 0)) == 0.0
    steal, total = cpu_times()  # this machine's
    assert 0 <= steal <= total


def test_the_tick_trace_keeps_the_newest_ticks_in_a_fixed_ring_and_counts_the_rest():
    from rip_control.ros.loop_outputs import TickTrace

    trace = TickTrace(capacity=4)
    for i in range(3):
        trace.append(i, 10 + i, 20 + i)
    assert trace.kept()[:, 0].tolist() == [0, 1, 2] and trace.not_kept == 0
    for i in range(3, 10):
        trace.append(i, 10 + i, 20 + i)
    kept = trace.kept()
    assert kept.tolist() == [[i, 10 + i, 20 + i] for i in range(6, 10)]  # oldest first
    assert trace.not_kept == 6 and trace.seen == 10
    trace.clear()
    assert trace.kept().shape == (0, 3) and trace.not_kept == 0
    assert TickTrace.CAPACITY * 3 * 8 <= 32 << 20  # bounded whatever the run's length


def test_an_episodes_timing_csv_row_counts_its_transitions_dropped_late(ros_node, tmp_path):
    """What an episode's transitions lost to stretched ticks shows in its timing.csv row."""
    import csv

    from rip_control.ros.loop_outputs import LoopOutputs
    from rip_control.rt.loop import EpisodeSummary

    out = LoopOutputs(ros_node, tmp_path, obs_size=8, tick_topic_max_hz=0.0, tick_trace='')
    try:
        episode = EpisodeSummary(
            episode=3,
            n_ticks=100,
            dt_mean_s=0.02,
            dt_std_s=1e-3,
            max_overrun_s=0.011,
            n_strikes=0,
            episode_return=1.0,
            balance_s=0.5,
            terminated=False,
            policy_version=1,
            transitions_published=98,
            transitions_dropped_late=2,
            settled=True,
        )
        out.episode(episode, 0, (0, 0.0), publish=False)
    finally:
        out.destroy()
    with (tmp_path / 'timing.csv').open(newline='') as f:
        rows = list(csv.DictReader(f))
    assert [(r['episode'], r['n_ticks'], r['transitions_dropped_late']) for r in rows] == [
        ('3', '100', '2')
    ]
