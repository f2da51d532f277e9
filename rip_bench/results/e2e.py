"""Question 'e2e': the whole fine-tune, one rig and several.

Through the runner (:data:`E2E_RESULT`), and the synchronous pattern for contrast
(:data:`SYNC_RESULT`).
"""

from __future__ import annotations

import numpy as np

from rip_bench.results.model import Records, Result, Section
from rip_bench.results.text import _bullets, _q, _returns_span, _slashed, _span

E2E = ('v4_e2e_50hz.json', 'e2e_2rigs_50hz.json', 'e2e_3rigs_50hz.json')
SYNC = 'sync_baseline_50hz_k4.json'


def _e2e_setup(r: Records) -> str:
    a = r[E2E[0]]['args']
    return (
        f'`bench e2e`: the whole fine-tune through the runner, {a["episodes"]} x '
        f'{float(a["episode_seconds"]):g} s per rig, K = {a["gradient_steps"]}, '
        f'{float(a["rate"]):g} Hz, from the shipped pre-trained policy, one Python emulator per '
        'rig; code of commit 37404ae.'
    )


def _e2e_conclusion(r: Records) -> str:
    one, two, three = (r[n] for n in E2E)
    c = one['control_node']
    rets = one['episode_returns']
    versions = one['policy_versions']
    k = int(one['args']['gradient_steps'])
    t2 = [x['ticks'] for x in two['rigs']]
    rig_names = [x['rig'] for x in three['rigs']]
    tripped = [x['rig'] for x in three['rigs'] if x['ticks']['n_violations']]
    return _bullets(
        f'**One rig** (`v4_e2e_50hz.json`): {c["measured_rate_hz"]:.4f} Hz over {c["n_ticks"]} '
        f'policy and reset ticks, dt std {c["dt_std_ms"]:.2f} ms, p99 of the tick error '
        f'{c["dt_p99_abs_dev_ms"]:.1f} ms, max {c["dt_max_abs_dev_ms"]:.0f} ms, '
        f"**{c['n_violations']} violations**; the control node's policy version rose from "
        f'v{versions[0]} to v{versions[-1]} during the run; '
        f'{one["learner"]["gradient_steps_done"]} '
        f'gradient steps in {one["learner"]["train_calls"]} `train()` calls, '
        f'{float(one["learner"]["updates_per_transition"]):.1f} updates per transition (target '
        f'K = {k}); returns {_returns_span(rets)} over {len(rets)} episodes (median '
        f'{float(np.median(rets)):.0f}). The rate is '
        f'{100 * (c["measured_rate_hz"] / c["target_rate_hz"] - 1):+.2f} % off '
        f"its target; the jitter is this VM's floor ({_q('timing')}).",
        f'**{len(two["rigs"])} rigs** (`e2e_2rigs_50hz.json`): '
        f'{_span([t["measured_rate_hz"] for t in t2], 4, " Hz")}, '
        f'{sum(t["n_violations"] for t in t2)} violations, every episode finished (returns '
        f'{_returns_span([x for rig in two["rigs"] for x in rig["returns"]])}); dt std '
        f'{_slashed([t["dt_std_ms"] for t in t2], 2)} ms, p99 of the tick error '
        f'{_slashed([t["dt_p99_abs_dev_ms"] for t in t2], 1)} ms, max '
        f'{_slashed([t["dt_max_abs_dev_ms"] for t in t2], 1)} ms. The learner took '
        f'{two["learner_transitions_per_wall_second"]:.0f} transitions per wall second.',
        f'**{len(three["rigs"])} rigs** (`e2e_3rigs_50hz.json`): **failed** after '
        f'{_span([len(x["returns"]) for x in three["rigs"]], 0)} episodes on each rig: '
        f'"{three["failure"]}"'
        + (f', after {" and ".join(tripped)} had had a timing violation' if tripped else '')
        + f'. On this VM, {len(rig_names)} rigs with {len(rig_names)} Python emulators and a '
        'learner are beyond the edge.',
        "The late releases are split by cause in the runner's summary and the e2e JSON "
        '(`late_woke_late`, `late_after_long_work`).',
    )


E2E_RESULT = Result(
    heading='The runner, one rig and several',
    question='Run end to end through the runner (V4), does the fine-tune keep its rate and its '
    'K? And with several rigs on one learner?',
    setup=_e2e_setup,
    files=E2E,
    conclusion=_e2e_conclusion,
    replicate=('bash bench/run_learning.sh',),
)


def _sync_conclusion(r: Records) -> str:
    d = r[SYNC]
    w = d['while_learning']
    every = d['all_steps']
    return (
        f"SB3 `SAC.learn()` with SB3's own `train()` at [{d['hidden_sizes'].replace(',', ', ')}] "
        f'and an env that paces itself, K = {d["gradient_steps"]}, ran at '
        f'**{w["measured_rate_hz"]:.1f} Hz** once learning started (dt {w["dt_mean_ms"]:.1f} ± '
        f'{w["dt_std_ms"]:.1f} ms, up to {w["dt_max_abs_dev_ms"]:.0f} ms late among the steps '
        "that completed); then a gap between two voltage commands exceeded the firmware's "
        f'deadman, which disengaged the motor and ended the run after {every["n_ticks"]} steps '
        f'("{d["stopped_by"]}"). With the learner\'s own update inside `learn()`, the '
        f'synchronous arm of V5 ({_q("v5")}) keeps the rate.'
    )


SYNC_RESULT = Result(
    heading='The synchronous pattern, for contrast',
    question='The same fine-tune with the update inside the control loop, as SB3 runs it?',
    setup=lambda r: (
        '`bench sync-baseline` in the same script, the same emulator; code of the '
        'same time as the runs above.'
    ),
    files=(SYNC,),
    conclusion=_sync_conclusion,
)


SECTION = Section('e2e', 'The whole fine-tune, one rig and several', (E2E_RESULT, SYNC_RESULT))
