"""Long deployments with a push: sustained balance, chatter and recovery, offline.

``python -m rip_bench long-deployment --rig bench/rigs/gap_sticky.yaml --policy
shipped=policies/sim_50hz/policy.safetensors --policy adapted=PATH --json FILE``

Each policy's deterministic actor on the rig file, behind the emulator's firmware logic on an
explicit clock (:mod:`rip_bench.offline_rig`): ``--episodes`` episodes of ``--seconds`` from
hanging, left alone; then the same episodes again, each with an impulse on the pendulum once
it has balanced for ``--kick-after-s`` (its angular velocity changed by ``--kick-rad-s``, the
sign alternating by episode: a tap on the tip). The record gives, per policy, the deployment
measures of the episodes left alone with their 90 % intervals
(:func:`rip_control.run.evaluation.deployment_measures`: balance after swing-up, longest
balance, swing-up time, chatter), and of the pushed ones: how many pushes were applied (an
episode that never balanced long enough gets none) and how many the policy recovered from
(balanced again within ``--recover-within-s`` and still balanced at the episode's end).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

NAME = 'long-deployment'
HELP = 'long offline deployments of policies on a rig file, with a push mid-balance'


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``long-deployment`` options."""
    ap.add_argument('--rig', required=True, help='rig YAML (a gap rig or a model rig)')
    ap.add_argument(
        '--policy',
        action='append',
        required=True,
        metavar='NAME=PATH',
        help='a policy to deploy, named (repeat for several)',
    )
    ap.add_argument('--episodes', type=int, default=5)
    ap.add_argument('--seconds', type=float, default=60.0)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--kick-after-s', type=float, default=10.0, help='balanced this long first')
    ap.add_argument('--kick-rad-s', type=float, default=3.0, help="the push on alpha's velocity")
    ap.add_argument('--recover-within-s', type=float, default=3.0)


def _named(policies: list[str]) -> dict[str, str]:
    out = {}
    for item in policies:
        name, sep, path = item.partition('=')
        if not sep or not name or not path:
            raise ValueError(f'--policy {item!r}: give NAME=PATH')
        if not Path(path).is_file():
            raise ValueError(f'--policy {item!r}: no file {path}')
        out[name] = path
    return out


def deploy(
    rig_file: str,
    policy: str,
    *,
    episodes: int,
    seconds: float,
    seed: int,
    kick_after_s: float,
    kick_rad_s: float,
    recover_within_s: float,
) -> dict[str, Any]:
    """One policy's long deployments on ``rig_file``: left alone, then pushed."""
    alone = _episodes(rig_file, policy, episodes, seconds, seed, None, 0.0, 0.0)
    pushed = _episodes(
        rig_file, policy, episodes, seconds, seed, kick_after_s, kick_rad_s, recover_within_s
    )
    return {
        'policy': policy,
        **alone,
        'pushed': {k: pushed[k] for k in ('episodes', 'measures')},
        'pushes': len(pushed['kicks']),
        'recovered': sum(k['recovered'] for k in pushed['kicks']),
        'kicks': pushed['kicks'],
    }


def _episodes(
    rig_file: str,
    policy: str,
    episodes: int,
    seconds: float,
    seed: int,
    kick_after_s: float | None,
    kick_rad_s: float,
    recover_within_s: float,
) -> dict[str, Any]:
    """The episodes of one deployment (``kick_after_s`` None: no push)."""
    from rip_bench.offline_rig import HANGING_SPREAD_RAD, OfflineRig, _policy, run_episode
    from rip_control.rig.env import BALANCE_THRESHOLD_RAD
    from rip_control.rig.gap_plant import load_rig
    from rip_control.run.evaluation import deployment_measures, episode_metrics

    params, gap = load_rig(rig_file)
    task, actor = _policy(policy, seconds)
    period = task.config.period_s
    rig = OfflineRig(params, gap, seed=seed)
    starts = np.random.default_rng(seed).uniform(-HANGING_SPREAD_RAD, HANGING_SPREAD_RAD, episodes)
    need = math.inf if kick_after_s is None else round(kick_after_s / period)
    rows, kicks = [], []
    for i, alpha0 in enumerate(starts):
        state: dict[str, Any] = {'run': 0, 'kicked_at': None, 'push': kick_rad_s * (-1) ** i}

        def controller(step: int, obs: np.ndarray, state: dict[str, Any] = state) -> Any:
            phi = float(np.arctan2(obs[1], obs[2]))
            state['run'] = state['run'] + 1 if abs(phi) < BALANCE_THRESHOLD_RAD else 0
            if state['kicked_at'] is None and state['run'] >= need:
                rig.firmware.advance_to(rig.now_s)
                rig.firmware.dynamics.alpha_dot += state['push']
                state['kicked_at'] = step
            return actor.act(obs)

        tr = run_episode(
            rig, task, controller, steps=task.config.episode_steps, alpha0_rad=float(alpha0)
        )
        m = episode_metrics(tr['phi'], tr['action'], tr['dt'], period, tr['reward'])
        rows.append(m.as_dict())
        if state['kicked_at'] is not None:
            after = np.abs(tr['phi'][state['kicked_at'] :]) < BALANCE_THRESHOLD_RAD
            back = np.flatnonzero(after[1:] & ~after[:-1]) + 1  # balanced again
            window = round(recover_within_s / period)
            recovered = bool(after[-1]) and (
                bool(after.all()) or (back.size > 0 and int(back[0]) <= window)
            )
            kicks.append(
                {'episode': i, 'at_s': state['kicked_at'] * period, 'recovered': recovered}
            )
    return {'episodes': rows, 'measures': deployment_measures(rows), 'kicks': kicks}


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Every policy on the rig: the JSON record."""
    from rip_control.rig.gap_plant import load_gap

    if a.episodes < 1 or not a.seconds > 0:
        raise ValueError('--episodes must be >= 1 and --seconds > 0')
    out: dict[str, Any] = {
        'rig': a.rig,
        'kind': 'reality gap' if load_gap(a.rig) is not None else 'model',
        'episodes': a.episodes,
        'seconds': a.seconds,
        'seed': a.seed,
        'kick_after_s': a.kick_after_s,
        'kick_rad_s': a.kick_rad_s,
        'recover_within_s': a.recover_within_s,
        'policies': {},
    }
    for name, path in _named(a.policy).items():
        r = deploy(
            a.rig,
            path,
            episodes=a.episodes,
            seconds=a.seconds,
            seed=a.seed,
            kick_after_s=a.kick_after_s,
            kick_rad_s=a.kick_rad_s,
            recover_within_s=a.recover_within_s,
        )
        m = {k: v['mean'] for k, v in r['measures'].items()}
        print(
            f'{name}: balanced after swing-up {m["balanced_after_swing_up"]:.1%}, longest '
            f'{m["longest_balance_s"]:.1f} s, TV {m["action_tv_per_s"]:.1f}/s, sign changes '
            f'{m["sign_changes_per_s"]:.1f}/s; pushes recovered {r["recovered"]} of {r["pushes"]}',
            flush=True,
        )
        out['policies'][name] = r
    return out
