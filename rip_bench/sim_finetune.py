"""The fine-tune's learning side on a simulated rig, in minutes instead of an hour.

``python -m rip_bench sim-finetune --rig config/rig_shifted_worn.yaml --seeds 0 1 2``

A proxy for the question the matrix asks of the real fine-tune (:mod:`rip_bench.matrix`): does the
learner's update, as ``config/finetune.yaml`` configures it (with ``--set`` overrides), make
the starting policy better or worse on a shifted rig? It runs the same pieces in one process:
SB3's SAC with the policy's saved critics and entropy coefficient
(:func:`~rip_learner.sac.load_initial_networks`), the learner's update with its safeguards
(:class:`~rip_learner.fast_sac.FastSacUpdate`: critic-first updates, prior data,
smoothness term), K updates per stored transition once ``learning_starts`` are in, and the
control node's regression guard (every ``eval_every_episodes`` training episodes a
deterministic evaluation of the newest actor, which drives from then on only within
``eval_margin`` of the best evaluation). The rig is
:class:`~rip_control.rig.env.SimRotaryInvertedPendulumEnv` with the rig file's physics: the
emulator's dynamics, quantisation, noise and sensing latency, stepped as fast as the CPU
allows.

What it leaves out is timing: no real-time loop, no DDS, no update lagging behind the
transitions (here the updates owed are run every 50 transitions). Its evaluations, unlike
the control loop's, never reach the replay buffer (they run in an env of their own). So it
says nothing about rates; the real fine-tune (``matrix``, ``v5``) is the measurement, this
is the quick way to find which setting is worth measuring there.
"""

from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass
from pathlib import Path
import time
from typing import Any

import numpy as np
import yaml

from rip_bench.arms import arm_parameters, sac_config, safeguards
from rip_bench.common import DEFAULT_POLICY, add_deployment_arguments, add_run_arguments
from rip_control.rt.guard import RegressionGuard

NAME = 'sim-finetune'
HELP = "the fine-tune's learning side on a simulated rig (minutes)"
UPDATE_EVERY = 50  # transitions between the calls that run the updates owed


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``sim-finetune`` options (episodes and their length default to the shipped ones)."""
    ap.add_argument('--rig', required=True, help='rig physics YAML file')
    ap.add_argument('--seeds', nargs='+', type=int, default=[0])
    ap.add_argument('--policy', default=str(DEFAULT_POLICY), help='the starting policy')
    add_run_arguments(ap, 'episodes', 'episode_seconds')
    add_deployment_arguments(ap)
    ap.add_argument('--params-file', default='', help='default: config/finetune.yaml')
    ap.add_argument('--guard', type=int, default=None, help='eval_every_episodes (0: off)')
    ap.add_argument('--hidden', default='', help='e.g. 256,256 (actor and critics)')
    ap.add_argument('--set', action='append', default=[], metavar='NODE.NAME=VALUE')
    ap.add_argument('--label', default='')


@dataclass(frozen=True)
class _Version:
    """What the guard needs of an actor: its version."""

    version: int


def _actor_fn(actor: Any, deterministic: bool, noise_scale: float = 1.0) -> Any:
    """The actor's mean action, or a sample with its std times ``noise_scale`` (as the loop)."""
    import torch

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            mean, log_std, _ = actor.get_action_dist_params(
                torch.as_tensor(obs, dtype=torch.float32)[None]
            )
            if not deterministic:
                mean = mean + log_std.exp() * (noise_scale * torch.randn_like(mean))
            return torch.tanh(mean)[0].numpy()

    return act


def _evaluate(actor: Any, params: Any, seconds: float, episodes: int, seed: int) -> dict:
    """Deterministic episodes from hanging: mean return, longest balance, chatter."""
    from rip_control.rig.env import SimRotaryInvertedPendulumEnv, TaskConfig
    from rip_learner.pretrain import run_episode

    env = SimRotaryInvertedPendulumEnv(
        TaskConfig.from_params(rate_hz=50.0, episode_seconds=seconds), params
    )
    ms = [run_episode(_actor_fn(actor, True), env, seed + i) for i in range(episodes)]
    balance = [m.longest_balance_s for m in ms]
    return {
        'return': float(np.mean([m.ret for m in ms])),
        'balance_s': float(np.mean(balance)),
        'balance_min_s': float(np.min(balance)),
        'action_tv_per_s': float(np.mean([m.action_tv_per_s for m in ms])),
    }


def run_one(a: argparse.Namespace, seed: int, runs: Path) -> dict[str, Any]:
    """One simulated fine-tune from ``a.policy`` on ``a.rig``; its record."""
    import torch

    from rip_control.policy import load_actor_file
    from rip_control.rig.dynamics import PendulumParams
    from rip_control.rig.env import ACTION_SIZE, OBS_SIZE, SimRotaryInvertedPendulumEnv, TaskConfig
    from rip_learner.fast_sac import FastSacUpdate
    from rip_learner.sac import build_sac, load_initial_networks

    a.seed = seed
    params_file, lp = arm_parameters(a, runs / f'seed{seed}')
    # The control node's guard settings, from the file both nodes would read (--set, --guard).
    control = yaml.safe_load(params_file.read_text())['rip_control']['ros__parameters']
    rate = float(lp['rate_hz'])
    if rate != 50.0:
        raise ValueError(f'sim-finetune runs at 50 Hz, the parameter file says {rate}')
    torch.manual_seed(seed)
    np.random.seed(seed)
    params = PendulumParams.from_yaml(a.rig)
    env = SimRotaryInvertedPendulumEnv(
        TaskConfig.from_params(rate_hz=rate, episode_seconds=a.episode_seconds), params
    )
    env.reset(seed=seed)
    model = build_sac(sac_config(lp))
    actor = load_actor_file(a.policy, rate_hz=rate, obs_size=OBS_SIZE, action_size=ACTION_SIZE)
    load_initial_networks(model, actor, a.policy, rate)
    g = safeguards(lp, a.policy, rate)
    if not g['fast_updates']:
        raise ValueError('sim-finetune runs the learner update: rip_learner.fast_updates=true')
    fast = FastSacUpdate(
        model, prior=g['prior'], prior_ratio=g['prior_ratio'], smoothness=g['smoothness']
    )
    if g['smoothness'] and g['smoothness_reference'] == 'initial':
        fast.set_smoothness_reference(model.actor)
    k, batch = int(lp['gradient_steps']), int(lp['batch_size'])
    starts, warmup = int(lp['learning_starts']), g['critic_warmup_updates']
    guard: RegressionGuard[_Version] = RegressionGuard(
        int(control['eval_every_episodes']),
        float(control['eval_margin']),
        float(control.get('eval_best_margin', 0.0)),
        float(control.get('eval_balance_margin', 1.0)),
    )
    eval_s = float(control.get('eval_episode_seconds', 0.0)) or a.episode_seconds
    noise_scale = float(control.get('train_noise_scale', 1.0))

    live = copy.deepcopy(model.actor)
    baseline = _evaluate(live, params, eval_s, 1, 10_000 + seed)
    evaluations: list[dict[str, Any]] = []
    episodes: list[dict[str, Any]] = []
    best = copy.deepcopy(live)  # what a deployment takes: policy_best
    if guard.enabled:
        guard.start(_Version(0))
        guard.next_episode(_Version(0))
        guard.judge(baseline['return'], baseline['balance_s'])
    stored = updates = actor_updates = 0
    t0 = time.monotonic()
    for ep in range(a.episodes):
        obs, _ = env.reset(seed=seed * 1000 + ep, options={'start': 'down'})
        act = _actor_fn(live, deterministic=False, noise_scale=noise_scale)
        ret, run, longest = 0.0, 0, 0
        while True:
            action = act(obs)
            nxt, reward, terminated, truncated, info = env.step(action)
            model.replay_buffer.add(
                obs[None],
                nxt[None],
                action[None],
                np.array([reward], dtype=np.float32),
                np.array([float(terminated or truncated)], dtype=np.float32),
                [{'TimeLimit.truncated': bool(truncated and not terminated)}],
            )
            stored += 1
            ret += reward
            run = run + 1 if abs(info['phi']) < 0.2 else 0
            longest = max(longest, run)
            obs = nxt
            if stored >= starts and (stored % UPDATE_EVERY == 0 or terminated or truncated):
                due = k * (stored - starts + 1) - updates
                while due > 0:
                    n = due if updates >= warmup else min(due, warmup - updates)
                    fast.train(n, batch, update_actor=updates >= warmup)
                    actor_updates += n if updates >= warmup else 0
                    updates += n
                    due -= n
            if terminated or truncated:
                break
        episodes.append({'return': ret, 'balance_s': longest / rate, 'updates': updates})
        line = f'[seed {seed}] episode {ep:3d}: return {ret:7.2f}, balance {longest / rate:5.2f} s'
        if guard.enabled:
            # As the control loop asks it: the newest actor (its version: the actor updates so
            # far) is evaluated only if newer than the live and the last judged one.
            guard.finish_training()
            evaluate, _ = guard.next_episode(_Version(actor_updates))
            if evaluate:
                e = _evaluate(model.actor, params, eval_s, 1, 10_000 + seed + ep + 1)
                v = guard.judge(e['return'], e['balance_s'])
                if v.kind == 'promoted':
                    live = copy.deepcopy(model.actor)
                if v.new_best:
                    best = copy.deepcopy(model.actor)
                e.update(episode=ep, verdict=v.kind, new_best=v.new_best)
                evaluations.append(e)
                line += f'; evaluation {e["return"]:7.2f} ({e["balance_s"]:.2f} s) {v.kind}'
        else:
            live = best = copy.deepcopy(model.actor)  # guard off: every new actor drives
        print(line + f', {updates} updates', flush=True)
    deployed = _evaluate(best, params, a.eval_seconds, a.eval_episodes, 20_000)
    print(
        f'[seed {seed}] deployed: balance {deployed["balance_s"]:.2f} s '
        f'(min {deployed["balance_min_s"]:.2f}), chatter {deployed["action_tv_per_s"]:.1f} TV/s, '
        f'{time.monotonic() - t0:.0f} s',
        flush=True,
    )
    return {
        'seed': seed,
        'baseline_evaluation': baseline,
        'episodes': episodes,
        'evaluations': evaluations,
        'deployed': deployed,
        'updates': updates,
        'transitions': stored,
        'wall_s': time.monotonic() - t0,
    }


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Every seed on the rig, and the starting policy deployed beside them: the JSON record."""
    import tempfile

    from rip_control.policy import load_actor_file
    from rip_control.rig.dynamics import PendulumParams
    from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
    from rip_learner.sac import build_sac, load_initial_networks

    runs = Path(tempfile.mkdtemp(prefix='sim_finetune_'))
    a.seed = a.seeds[0]
    _, lp = arm_parameters(a, runs / 'start')
    model = build_sac(sac_config(lp))
    actor = load_actor_file(a.policy, rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE)
    load_initial_networks(model, actor, a.policy, 50.0)
    params = PendulumParams.from_yaml(a.rig)
    # The deployments' episodes (same seeds): the start and each run's best compare directly.
    start = _evaluate(model.actor, params, a.eval_seconds, a.eval_episodes, 20_000)
    print(
        f'starting policy on {a.rig}: balance {start["balance_s"]:.2f} s, chatter '
        f'{start["action_tv_per_s"]:.1f} TV/s',
        flush=True,
    )
    results = [run_one(a, seed, runs) for seed in a.seeds]
    return {
        'benchmark': 'sim-finetune',
        'label': a.label,
        'rig': a.rig,
        'policy': a.policy,
        'set': a.set,
        'guard': a.guard,
        'episodes': a.episodes,
        'episode_seconds': a.episode_seconds,
        'eval_episodes': a.eval_episodes,
        'eval_seconds': a.eval_seconds,
        'starting_policy': start,
        'runs': results,
    }


def sim_finetune_table(docs: list[dict[str, Any]]) -> str:
    """Markdown: one row per file (a rig and a setting), spreads over its seeds."""
    rows = [
        '| rig | policy | setting | starting balance | deployed balance, mean (min) over seeds '
        '| evaluations promoted | chatter TV/s, start / deployed |',
        '|---|---|---|---|---|---|---|',
    ]
    for d in docs:
        runs = d['runs']
        dep = [r['deployed']['balance_s'] for r in runs]
        evs = [e for r in runs for e in r['evaluations'] if e['verdict'] != 'pending']
        promoted = sum(e['verdict'] == 'promoted' for e in evs)
        tv = np.mean([r['deployed']['action_tv_per_s'] for r in runs])
        rows.append(
            f'| {Path(d["rig"]).stem} | {Path(d["policy"]).parent.name} | '
            f'{d["label"] or "as shipped"} | {d["starting_policy"]["balance_s"]:.2f} s | '
            f'{np.mean(dep):.2f} s ({np.min(dep):.2f} s) | {promoted} of {len(evs)} | '
            f'{d["starting_policy"]["action_tv_per_s"]:.1f} / {tv:.1f} |'
        )
    return '\n'.join(rows)


TABLES = {NAME: sim_finetune_table}
