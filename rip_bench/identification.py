"""``identification``: how well the rig's physics is identified from its own transitions.

``python -m rip_bench identification --seeds 0 1 2``

For each shipped rig file and seed: the excitation episode and then deployment episodes of
the shipped policy from hanging, recorded in simulation with the rig's physics (its encoder
noise and latency included: the readings the identification sees are what a rig reports),
then :func:`rip_learner.identify.identify` from the QUBE-Servo 2 prior. Each fitted value's
error against the rig file, and whether it is within the goal's tolerance; with
``--episodes 0 1 3`` also how the error shrinks with more data, and with
``--excitation-seconds 5 10 15`` how much of the excitation it needs: only its first seconds
are kept (the 20-s episode has a ramp, a chirp and a ladder of kicks, in that order).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from rip_bench.common import DEFAULT_POLICY, shipped

NAME = 'identification'
HELP = 'identify the shipped rigs from simulated recordings; errors against the truth'

RIGS = (
    'config/rig_qube_servo2.yaml',
    'config/rig_shifted_worn.yaml',
    'config/rig_shifted_heavy.yaml',
    'config/rig_shifted_stuck.yaml',
)

#: The goal's tolerance per parameter: absolute in the unit, or relative (a fraction).
TOLERANCE: dict[str, tuple[str, float]] = {
    'motor_dead_zone_v': ('abs', 0.1),
    'sensing_latency_s': ('abs', 0.003),
    'arm_coulomb_friction_nm': ('rel', 0.25),
    'arm_viscous_damping_nms_per_rad': ('rel', 0.25),
    'pendulum_viscous_damping_nms_per_rad': ('rel', 0.25),
    'motor_resistance_ohm': ('rel', 0.25),
}

#: A Coulomb friction this small (N m) counts as zero: against a true 0 a relative error is
#: meaningless, so the absolute error is judged against 25 % of the stuck rig's.
FRICTION_FLOOR_NM = 0.002 * 0.25


def within(name: str, value: float, truth: float) -> bool:
    """Whether ``value`` is within the goal's tolerance of ``truth``."""
    kind, tol = TOLERANCE[name]
    if kind == 'abs':
        return abs(value - truth) <= tol
    if name == 'arm_coulomb_friction_nm' and truth < FRICTION_FLOOR_NM / tol:
        return abs(value - truth) <= FRICTION_FLOOR_NM
    return abs(value - truth) <= tol * abs(truth)


def simulated_recording(
    rig: Any,
    *,
    seed: int,
    episodes: int = 1,
    episode_seconds: float = 10.0,
    policy: str | Path = DEFAULT_POLICY,
) -> dict[str, np.ndarray]:
    """A simulated recording of the rig, as buffer arrays.

    Buffer arrays (fields and provenance) of an excitation episode and then ``episodes``
    deterministic episodes of ``policy`` from hanging, in simulation at ``rig``'s physics.
    """
    from rip_control.policy import load_actor_file
    from rip_control.rig.env import ACTION_SIZE, OBS_SIZE, SimRotaryInvertedPendulumEnv, TaskConfig
    from rip_control.rig.excitation import Excitation, ExcitationDesign
    from rip_control.transitions import EXCITATION_VERSION

    rate = float(shipped('rate_hz'))
    design = ExcitationDesign()
    task = TaskConfig(
        rate_hz=rate,
        episode_seconds=max(episode_seconds, design.duration_s),  # steps are counted here
        max_action_v=float(shipped('max_action_v')),
        arm_limit_rad=float(shipped('arm_limit_rad')),
        action_history=0,
    )
    actor = load_actor_file(policy, rate_hz=rate, obs_size=OBS_SIZE, action_size=ACTION_SIZE)
    excitation = Excitation(design, rate, task.max_action_v)
    env = SimRotaryInvertedPendulumEnv(task, rig)
    rows: list[tuple[Any, ...]] = []
    for episode in range(episodes + 1):
        obs, _ = env.reset(seed=seed * 1000 + episode)
        steps = excitation.steps if episode == 0 else round(episode_seconds * rate)
        for step in range(steps):
            if episode == 0:
                action, version = excitation.action(step, obs), EXCITATION_VERSION
            else:
                action, version = actor.act(obs), 1
            nxt, reward, terminated, truncated, _ = env.step(action)
            truncated = truncated or step == steps - 1
            rows.append((obs, action, reward, nxt, terminated, truncated, episode, step, version))
            obs = nxt
            if terminated or truncated:
                break
    return {
        'observations': np.stack([r[0] for r in rows]).astype(np.float32),
        'next_observations': np.stack([r[3] for r in rows]).astype(np.float32),
        'actions': np.stack([np.asarray(r[1]) for r in rows]).astype(np.float32),
        'rewards': np.array([r[2] for r in rows], dtype=np.float32),
        'dones': np.array([r[4] for r in rows], dtype=np.float32),
        'timeouts': np.array([r[5] for r in rows], dtype=np.float32),
        'episodes': np.array([r[6] for r in rows], dtype=np.float64),
        'steps': np.array([r[7] for r in rows], dtype=np.float64),
        'dts': np.full(len(rows), 1.0 / rate),
        'policy_versions': np.array([r[8] for r in rows], dtype=np.float64),
    }


def excitation_cut(arrays: dict[str, np.ndarray], seconds: float, rate_hz: float) -> dict:
    """``arrays`` with the excitation episode (episode 0) cut to its first ``seconds``."""
    keep = (arrays['episodes'] > 0) | (arrays['steps'] < round(seconds * rate_hz))
    last = np.flatnonzero(keep & (arrays['episodes'] == 0))
    out = {k: v[keep] for k, v in arrays.items()}
    if len(last) and seconds * rate_hz < np.count_nonzero(arrays['episodes'] == 0):
        out['timeouts'] = out['timeouts'].copy()
        out['timeouts'][len(last) - 1] = 1.0  # the cut episode ends there
    return out


def validation_rms(arrays: dict[str, np.ndarray], params: Any, opts: dict[str, Any]) -> list:
    """Multi-step prediction RMS ``[arm, pendulum]`` (rad) of ``params`` on other data.

    ``arrays``: a recording the fit never saw (its excitation episode left out: deployment
    episodes of the shipped policy), cut into the identification's own windows.
    """
    from rip_learner.ident_model import residuals, rms
    from rip_learner.identify import _windows, records_from_arrays

    keep = arrays['episodes'] > 0
    records = records_from_arrays(
        {k: v[keep] for k, v in arrays.items()}, 1.0 / opts['rate_hz'], opts['max_action_v']
    )
    win, _ = _windows(records, opts, lambda _: None)
    return [float(x) for x in rms(residuals([params], win)[0])]


def identify_one(
    rig_file: str,
    seed: int,
    episodes: int,
    opts: dict[str, Any],
    excitation_s: float | None = None,
) -> dict[str, Any]:
    """One rig, seed and amount of data: the errors of every fitted value."""
    from rip_control.rig.dynamics import PendulumParams
    from rip_learner.identify import identify, records_from_arrays

    truth = PendulumParams.from_yaml(rig_file)
    arrays = simulated_recording(truth, seed=seed, episodes=episodes)
    if excitation_s is not None:
        arrays = excitation_cut(arrays, excitation_s, opts['rate_hz'])
    records = records_from_arrays(arrays, 1.0 / opts['rate_hz'], opts['max_action_v'])
    result, _ = identify(records, PendulumParams(), {**opts, 'seed': seed}, log=lambda _: None)
    params: dict[str, Any] = {}
    for e in result.estimates:
        true = float(getattr(truth, e.name))
        row = {
            'truth': true,
            'value': float(e.value),
            'std': None if np.isnan(e.std) else float(e.std),
            'determined': bool(e.determined),
            'error': float(e.value - true),
        }
        if e.name in TOLERANCE:
            row['within_goal'] = bool(within(e.name, e.value, true))
        params[e.name] = row
    ok = all(p.get('within_goal', True) for p in params.values())
    held = None
    if excitation_s is not None:  # how much data is enough: judged on data it never saw
        other = simulated_recording(truth, seed=seed + 100, episodes=2)
        held = validation_rms(other, result.params, opts)
    print(
        f'{Path(rig_file).stem} seed {seed}, {result.seconds_of_data:.0f} s of data: '
        f'{"within" if ok else "OUTSIDE"} the goal; '
        + ', '.join(
            f'{n} {p["value"]:.4g} (true {p["truth"]:.4g})'
            for n, p in params.items()
            if n in TOLERANCE
        )
        + f'; {result.wall_s:.1f} s',
        flush=True,
    )
    return {
        'rig': rig_file,
        'seed': seed,
        'episodes': episodes,
        'excitation_seconds': excitation_s,
        'seconds_of_data': result.seconds_of_data,
        'wall_s': result.wall_s,
        'within_goal': bool(ok),
        'validation_rms_rad': held,
        'undetermined': result.undetermined,
        'residual_rms_rad': [result.rms_theta_rad, result.rms_alpha_rad],
        'params': params,
    }


def identify_gap(
    rig_file: str,
    seed: int,
    episodes: int,
    opts: dict[str, Any],
    excitation_s: float | None = None,
) -> dict[str, Any]:
    """A reality-gap rig: what the identification's term selection finds, and what it leaves.

    Recorded offline behind the real firmware logic (:func:`rip_bench.offline_rig.record_session`:
    the excitation, then ``episodes`` of the shipped policy). The gap plant's effects have
    other forms than the model's terms, so there is no true value to score against: the record
    is the selection (each term's held-out cost without and with it, kept or not) and the
    held-out error of the base and the chosen model.
    """
    from rip_bench.offline_rig import record_session
    from rip_control.rig.dynamics import PendulumParams
    from rip_learner.identify import identify, records_from_arrays

    arrays = record_session(rig_file, DEFAULT_POLICY, episodes=episodes, seed=seed)
    if excitation_s is not None:
        arrays = excitation_cut(arrays, excitation_s, opts['rate_hz'])
    records = records_from_arrays(arrays, 1.0 / opts['rate_hz'], opts['max_action_v'])
    result, _ = identify(records, PendulumParams(), {**opts, 'seed': seed}, log=lambda _: None)
    sel = result.selection or {}
    kept = [v['term'] for v in sel.get('terms', {}).values() if v['kept']]
    held = None
    if excitation_s is not None:  # how much data is enough: judged on data it never saw
        other = record_session(rig_file, DEFAULT_POLICY, episodes=2, seed=seed + 100)
        held = validation_rms(other, result.params, opts)
    print(
        f'{Path(rig_file).stem} seed {seed}, {result.seconds_of_data:.0f} s of data: terms '
        f'{", ".join(kept) or "none"}; held-out RMS (mrad) base '
        + '/'.join(f'{1e3 * v:.1f}' for v in sel.get('base_held_out_rms_rad', {}).values())
        + ' -> '
        + '/'.join(f'{1e3 * v:.1f}' for v in sel.get('held_out_rms_rad', {}).values())
        + f'; {result.wall_s:.0f} s',
        flush=True,
    )
    return {
        'rig': rig_file,
        'kind': 'reality gap',
        'seed': seed,
        'episodes': episodes,
        'excitation_seconds': excitation_s,
        'validation_rms_rad': held,
        'seconds_of_data': result.seconds_of_data,
        'wall_s': result.wall_s,
        'selection': sel,
        'identified': result.summary()['fitted'],
    }


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``identification`` options."""
    ap.add_argument('--rigs', nargs='+', default=list(RIGS))
    ap.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    ap.add_argument(
        '--episodes',
        nargs='+',
        type=int,
        default=[1],
        help='deployment episodes after the excitation (10 s each), one fit per value',
    )
    ap.add_argument(
        '--excitation-seconds',
        nargs='+',
        type=float,
        default=[None],
        help="the excitation's first seconds kept (default: all of it), one fit per value",
    )


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Every rig x seed x amount of data: the JSON record."""
    from rip_control.params import defaults
    from rip_learner.identify import OPTIONS

    opts = defaults(OPTIONS)
    from rip_control.rig.gap_plant import load_gap

    runs = [
        (identify_gap if load_gap(rig) else identify_one)(rig, seed, episodes, opts, cut)
        for episodes in a.episodes
        for cut in a.excitation_seconds
        for rig in a.rigs
        for seed in a.seeds
    ]
    return {'benchmark': NAME, 'options': opts, 'tolerance': TOLERANCE, 'runs': runs}


def identification_table(docs: list[dict[str, Any]]) -> str:
    """Markdown: per rig and amount of data, each goal parameter's error (worst over seeds)."""
    names = list(TOLERANCE)
    short = {
        'motor_dead_zone_v': 'dead zone (V)',
        'sensing_latency_s': 'latency (ms)',
        'arm_coulomb_friction_nm': 'friction',
        'arm_viscous_damping_nms_per_rad': 'arm damping',
        'pendulum_viscous_damping_nms_per_rad': 'pend. damping',
        'motor_resistance_ohm': 'resistance',
    }
    rows = [
        '| rig | data | within goal (seeds) | ' + ' | '.join(short[n] for n in names) + ' |',
        '|---|---|---|' + '---|' * len(names),
    ]
    groups: dict[tuple[str, int, Any], list[dict[str, Any]]] = {}
    for d in docs:
        for r in d['runs']:
            if 'params' in r:  # a gap rig's run has no true values to score
                key = (r['rig'], r['episodes'], r.get('excitation_seconds'))
                groups.setdefault(key, []).append(r)
    for (rig, _, _), runs in groups.items():
        cells = []
        for n in names:
            errs = [r['params'][n]['error'] for r in runs]
            worst = max(errs, key=abs)
            if TOLERANCE[n][0] == 'abs':
                scale = 1e3 if n == 'sensing_latency_s' else 1.0
                cell = f'{worst * scale:+.2f}'
            else:
                truth = runs[0]['params'][n]['truth']
                cell = f'{100 * worst / truth:+.0f} %' if truth > 0 else f'{worst:+.1e}'
            if not all(r['params'][n]['within_goal'] for r in runs):
                cell = f'**{cell}**'
            cells.append(cell)
        ok = sum(r['within_goal'] for r in runs)
        secs = np.mean([r['seconds_of_data'] for r in runs])
        rows.append(
            f'| {Path(rig).stem} | {secs:.0f} s | {ok} of {len(runs)} | '
            + ' | '.join(cells)
            + ' |'
        )
    return '\n'.join(rows)


def length_table(docs: list[dict[str, Any]]) -> str:
    """Markdown: per rig and length of the excitation, the error on data the fit never saw."""
    rows = [
        '| rig | kind | excitation | validation RMS arm / pendulum, mrad | goal met (seeds) '
        '| fit, s |',
        '|---|---|---|---|---|---|',
    ]
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for d in docs:
        for r in d['runs']:
            if r.get('validation_rms_rad') is not None:
                groups.setdefault((r['rig'], r['excitation_seconds']), []).append(r)
    for (rig, seconds), runs in sorted(groups.items()):
        arm, pend = (np.mean([r['validation_rms_rad'][i] for r in runs]) for i in (0, 1))
        goal = (
            f'{sum(r["within_goal"] for r in runs)} of {len(runs)}'
            if 'within_goal' in runs[0]
            else '(no truth)'
        )
        rows.append(
            f'| {Path(rig).stem} | {runs[0].get("kind", "in the model")} | {seconds:g} s | '
            f'{1e3 * arm:.1f} / {1e3 * pend:.1f} | {goal} | '
            f'{np.mean([r["wall_s"] for r in runs]):.0f} |'
        )
    return '\n'.join(rows)


TABLES = {NAME: identification_table, 'identification-length': length_table}
