"""Question 'timing': whether the control loop holds its rate under load."""

from __future__ import annotations

from typing import Any

from rip_bench.results.goals import TIMING_GOALS
from rip_bench.results.model import Records, Result, Section, Table
from rip_bench.results.text import _bullets, _control, _q, _span

TIMING = (
    'timing_50hz_sac.json',
    'timing_100hz_sac.json',
    'timing_500hz_sac.json',
    'timing_1000hz_sac.json',
    'timing_50hz_none.json',
    'timing_50hz_hog.json',
    'timing_50hz_sac_idle_halts.json',
    'timing_50hz_sac_timer.json',
    'timing_100hz_sac_no_fifo.json',
)


def _timing_setup(r: Records) -> str:
    one = r[TIMING[0]]
    return (
        '`python -m rip_bench timing`: the real control node in its own process, '
        'lifecycle-activated, against the emulator, while a load runs (`sac`: SB3 SAC `train()` '
        'flat out on a pre-filled buffer in another process, normal priority, unpinned; `hog`: '
        'one busy process per core; `none`) and actor weights (a new version each time) arrive '
        f'at {one["weights_hz"]:g} Hz. Beside it, the **floor**: one Python thread at SCHED_FIFO '
        f'{_control("fifo_priority")}, pinned, memory locked, the same pacer and an actor forward '
        'pass per tick, nothing else (`rip_bench.floor`). Code of commit b79327d, nothing else '
        'running. Figures are dt std / p99 of |dt − T| / max of |dt − T|, in ms; "late" counts '
        "releases after the deadline, split by cause from each tick's recorded work time."
    )


def _timing_conclusion(r: Records) -> str:
    docs = {n: r[n] for n in TIMING}
    plain = [
        d for d in docs.values() if d['load'] == 'sac' and not _timing_extra(d) and d.get('floor')
    ]
    c50 = docs['timing_50hz_sac.json']['control_node']
    rates = ', '.join(f'{d["node_params"]["rate_hz"]:g} Hz ({d["seconds"]:g} s)' for d in plain)
    violations = sum(d['control_node']['n_violations'] for d in plain)
    fast = [d for d in plain if d['node_params']['rate_hz'] > 100]
    mid = [d for d in plain if d['node_params']['rate_hz'] <= 100]
    c500 = docs['timing_500hz_sac.json']['control_node']
    g = TIMING_GOALS
    long_goal = [d for d in mid if d['seconds'] >= g['seconds']]
    fast_goal = [d for d in fast if d['node_params']['rate_hz'] == g['fast_hz']]
    goals_met = all(
        d['control_node']['dt_std_ms'] <= g['std_ms']
        and d['control_node']['dt_max_abs_dev_ms'] <= g['max_ms']
        for d in long_goal
    ) and all(d['control_node']['dt_max_abs_dev_ms'] <= g['fast_max_ms'] for d in fast_goal)
    r50, r500 = (docs[n]['node_params']['rate_hz'] for n in TIMING[:3:2])
    idle, base = docs['timing_50hz_sac_idle_halts.json'], docs['timing_50hz_sac.json']
    none, hog = docs['timing_50hz_none.json'], docs['timing_50hz_hog.json']
    timer = docs['timing_50hz_sac_timer.json']
    no_fifo = docs['timing_100hz_sac_no_fifo.json']['control_node']
    return _bullets(
        f'**{violations} violations under SAC load** at {rates}, with weights arriving '
        f'throughout. At {r50:g} Hz: {c50["measured_rate_hz"]:.4f} Hz, p99 '
        f'{c50["dt_p99_abs_dev_ms"]:.3f} ms over {c50["n_ticks"]} ticks, {c50["late_releases"]} '
        f'late releases, {c50["late_woke_late"]} of them "woke late".',
        '**Not held exactly everywhere**: '
        + ', '.join(
            f'{d["control_node"]["measured_rate_hz"]:.4f} Hz at {d["node_params"]["rate_hz"]:g} Hz'
            for d in plain[1:]
        )
        + '. At '
        + ' and '.join(f'{d["node_params"]["rate_hz"]:g} Hz' for d in fast)
        + ' two serial round trips per tick through the Python emulator (work p99 '
        f'{c500["work_p99_ms"]:.1f} ms at {r500:g} Hz) leave little of the period: '
        f'{c500["late_after_long_work"]} of the {c500["late_releases"]} late releases at '
        f'{r500:g} Hz '
        f'come after long work. Against the C firmware the loss is smaller ({_q("firmware")}).',
        f'**The tighter goals are {"met" if goals_met else "not met"} on this VM**: std ≤ '
        f'{g["std_ms"]:g} ms and max ≤ {g["max_ms"]:g} ms over {g["seconds"]:g} s (here '
        + ', '.join(
            f'{d["control_node"]["dt_std_ms"]:.2f} / {d["control_node"]["dt_max_abs_dev_ms"]:.1f} '
            f'ms at {d["node_params"]["rate_hz"]:g} Hz'
            for d in long_goal
        )
        + f'), and max ≤ {g["fast_max_ms"]:g} ms at {g["fast_hz"]:g} Hz ('
        + ', '.join(f'{d["control_node"]["dt_max_abs_dev_ms"]:.1f} ms' for d in fast_goal)
        + '). '
        'What sets the max is pauses of the whole VM, which the floor shares in the same runs: '
        'the bare pacer process woke up to '
        + ', '.join(
            f'{d["floor"]["dt_max_abs_dev_ms"]:.0f} ms late at {d["node_params"]["rate_hz"]:g} Hz'
            for d in plain
        )
        + '. Between the pauses the loop is at the floor: p99 '
        f'{_span([d["control_node"]["dt_p99_abs_dev_ms"] for d in mid], 2, " ms")} at '
        f'{_span([d["node_params"]["rate_hz"] for d in mid], 0, " Hz")}.',
        '**What `cpu_idle_latency_us` buys is not settled.** Without it (the `-1` row) the loop '
        f'measured std {idle["control_node"]["dt_std_ms"]:.2f} against '
        f'{base["control_node"]["dt_std_ms"]:.2f} ms, while the floor was '
        + ('worse' if idle['floor']['dt_std_ms'] > base['floor']['dt_std_ms'] else 'better')
        + f' (std {idle["floor"]["dt_std_ms"]:.2f} against {base["floor"]["dt_std_ms"]:.2f} ms). '
        'This VM halts an idle vCPU at once (`machine.guest_halt_poll_ns` is '
        f'{idle["machine"]["guest_halt_poll_ns"]} in the JSON). It stays on by default, as '
        'standard real-time practice; set `-1` on a battery-powered rig if you measure no '
        'difference.',
        '**No load is not the easiest case here**: with both vCPUs idle between ticks the node '
        f'had {none["control_node"]["n_violations"]} violation'
        f'{"s" * (none["control_node"]["n_violations"] != 1)} and stopped after '
        f'{none["control_node"]["active_s"]:g} s of its {none["seconds"]:g} (the measurement '
        f'stops there) while the floor had {none["floor"]["n_violations"]}. A busy process per '
        f'core (`hog`) keeps every vCPU running: std {hog["control_node"]["dt_std_ms"]:.3f} ms, '
        f'p99 {hog["control_node"]["dt_p99_abs_dev_ms"]:.3f} ms.',
        "**The rclpy timer** (the same tick work on an `rclpy` timer in the node's process, "
        f'same load): std {timer["rclpy_timer"]["dt_std_ms"]:.2f} against '
        f'{timer["control_node"]["dt_std_ms"]:.2f} ms, p99 '
        f'{timer["rclpy_timer"]["dt_p99_abs_dev_ms"]:.2f} against '
        f'{timer["control_node"]["dt_p99_abs_dev_ms"]:.3f} ms. `fifo_priority:=0` ran '
        f'{docs["timing_100hz_sac_no_fifo.json"]["seconds"]:g} s at '
        f'{no_fifo["target_rate_hz"]:g} Hz with {no_fifo["n_violations"]} violations (std '
        f'{no_fifo["dt_std_ms"]:.2f} ms, p99 {no_fifo["dt_p99_abs_dev_ms"]:.2f} ms): the `sac` '
        'load competes for the control CPU only now and then.',
    )


def _timing_extra(d: dict[str, Any]) -> bool:
    """A run with a setting the standard rows do not have."""
    return any(
        k in d.get('node_params', {}) for k in ('fifo_priority', 'cpu_idle_latency_us')
    ) or bool(d.get('rclpy_timer'))


TIMING_RESULT = Result(
    heading='',
    question="Does the control node's loop, in its real-time process, hold the configured rate "
    'while SAC trains beside it and weights arrive, and how close does it come to what the '
    'machine allows a Python loop at all?',
    setup=_timing_setup,
    tables=(Table('timing', TIMING),),
    conclusion=_timing_conclusion,
    replicate=('bash bench/run_timing.sh',),
)


SECTION = Section('timing', 'Does the control loop hold its rate under load?', (TIMING_RESULT,))
