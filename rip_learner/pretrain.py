"""Simulation pre-training: SAC on the plain simulator at the design rate, as fast as it runs.

``python -m rip_learner.pretrain rate:=50 out:=runs/pretrain_50hz``
``python -m rip_learner.pretrain rig_params:=runs/NAME/identified_rig.yaml \
init:=policies/sim_50hz randomization:=identified``

The simulator is :class:`rip_control.rig.env.SimRotaryInvertedPendulumEnv`: the emulator's
dynamics, the rig's observation, action and reward, and the control period ``1/rate``. Here,
unlike on the rig, SB3's ``learn()`` is right: simulated time does not run while SAC trains.

- **Curriculum.** Episodes start near upright for the first ``balance_steps`` (balancing is
  learnt first); then the share of upright starts falls linearly over ``ramp_steps`` to
  ``final_upright_share`` and the rest start hanging at rest, as on the rig.
- **The physics** is the QUBE-Servo 2's (:class:`~rip_control.rig.dynamics.PendulumParams`)
  or a rig file's (``rig_params:=``, the format of ``config/rig_*.yaml``; what
  :mod:`rip_learner.identify` writes): a rig of another size, or one identified from its own
  data.
- **Domain randomisation.** Each episode draws its physics from
  :class:`~rip_learner.randomization.Randomization` around that base (masses, lengths,
  damping, Coulomb friction, a motor dead zone, encoder noise, sensing latency); the ranges
  are stated there and written into the run's ``pretrain.json``.
  ``randomization:=identified`` draws around an identified rig file's values, as wide as
  their uncertainty (:func:`~rip_learner.randomization.around_identified`).
- **Warm start** (``init:=DIR``): the actor, critics and entropy coefficient of an earlier
  pre-training or fine-tune (its ``policy.safetensors`` and ``sac_checkpoint.safetensors``).
- **Evaluation** every ``eval_every`` steps and at the last one: deterministic episodes of
  ``eval_seconds`` from hanging, on nominal physics and on randomised physics, scored with
  :mod:`rip_control.run.evaluation` (longest balance window, swing-up time, chatter). The best
  policy so far is kept; training stops early once both evaluations balance for
  ``target_balance_s`` on average, or at ``steps`` / ``time_limit_s``.
- **Outputs** in ``out``: ``policy.safetensors`` (the actor in the wire format, with the rate
  it was trained at: the control node and the learner refuse it at any other rate),
  ``sac_checkpoint.safetensors`` (critics included, so the fine-tune starts from them),
  ``progress.csv`` (one row per evaluation), ``pretrain.json`` and ``learning_curve.png``.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, replace
import json
import math
from pathlib import Path
import sys
import time
from typing import Any

import numpy as np

from rip_control import run_files
from rip_control.files import atomic_write_bytes
from rip_control.params import (
    CONTROL_PARAMETERS,
    LEARNER_PARAMETERS,
    PRETRAIN_ACTION_HISTORY,
    Param,
    help_requested,
    parse_options,
    table_by_name,
)
from rip_control.policy import encode_actor, read_metadata
from rip_control.rig.dynamics import PendulumParams
from rip_control.rig.env import ACTION_SIZE, SimRotaryInvertedPendulumEnv, TaskConfig, obs_size
from rip_control.run.evaluation import EpisodeMetrics, episode_metrics, summarize
from rip_learner.randomization import Curriculum, CurriculumEnv, Randomization, randomization_named
from rip_learner.sac import SacConfig, actor_meta, actor_tensors, encode_checkpoint, sac_state

_LEARNER = table_by_name(LEARNER_PARAMETERS)
_CONTROL = table_by_name(CONTROL_PARAMETERS)

OPTIONS = (
    Param('rate', 50.0, 'design control rate, Hz (the policy is tagged with it)', 1.0, 1000.0),
    Param('out', 'runs/pretrain', 'output folder'),
    Param(
        'rig_params',
        '',
        "rig YAML of the simulated physics (config/rig_*.yaml's format, e.g. "
        "rip_learner.identify's output; default: the QUBE-Servo 2)",
    ),
    Param(
        'init',
        '',
        'warm start: a folder (or its policy.safetensors) whose actor, critics and entropy '
        'coefficient training starts from (default: from scratch)',
    ),
    _LEARNER['device'],
    Param('steps', 200_000, 'most environment steps', 1, 10_000_000),
    Param('time_limit_s', 900.0, 'stop after this much wall-clock time', 1.0, 86_400.0),
    Param('seed', 0, 'seed of SAC, the curriculum and the randomisation', 0, 2**31 - 1),
    _LEARNER['hidden_sizes'],
    PRETRAIN_ACTION_HISTORY,
    _LEARNER['batch_size'],
    replace(
        _LEARNER['learning_rate'],
        default=1e-3,
        description="SAC learning rate (3e-4, the fine-tune's, took 3x the steps to balance)",
    ),
    _LEARNER['gamma'],
    Param('ent_coef', 'auto_0.1', "SAC entropy coefficient ('auto_<initial>' tunes it)"),
    Param('train_freq', 1, 'environment steps between updates', 1, 1000),
    # The learner's K, per simulated step here (1: a simulated step is cheap, an update not).
    replace(
        _LEARNER['gradient_steps'],
        default=1,
        description="SAC updates per simulated step (the learner's K, per received transition)",
    ),
    Param(
        'random_steps',
        2000,
        'steps of uniformly random actions before the first update',
        0,
        1_000_000,
    ),
    _CONTROL['episode_seconds'],
    Param('balance_steps', 10_000, 'curriculum: steps with upright starts only', 0, 10_000_000),
    Param('ramp_steps', 20_000, 'curriculum: steps to reach final_upright_share', 0, 10_000_000),
    Param('final_upright_share', 0.2, 'curriculum: upright starts after the ramp', 0.0, 1.0),
    Param('randomize', True, 'domain randomisation of the physics per episode'),
    Param(
        'randomization',
        'standard',
        "physics ranges when randomising: 'standard' (a second unit's tolerances), 'wide' "
        '(also a worn actuator: more friction, dead zone, damping, noise and up to 1.25 ticks '
        "of sensing latency) or 'identified' (around rig_params's identified values, as wide "
        'as their uncertainty)',
    ),
    Param(
        'eval_every',
        5000,
        'steps between evaluations (the last step is scored too)',
        100,
        10_000_000,
    ),
    Param('eval_episodes', 4, 'episodes per evaluation (nominal and randomised each)', 1, 100),
    Param('eval_seconds', 10.0, 'evaluation episode length, s', 1.0, 600.0),
    Param('target_balance_s', 8.0, 'stop once evaluations balance this long', 0.0, 600.0),
    Param('min_steps', 30_000, 'no early stop before this many steps', 0, 10_000_000),
    _LEARNER['torch_threads'],
    Param(
        'prior_data_size',
        20_000,
        'transitions of the replay buffer kept as prior_data.safetensors (a uniform sample; the '
        'fine-tune mixes them into its batches; 0: none)',
        0,
        10_000_000,
    ),
)


def run_episode(
    act: Any, env: SimRotaryInvertedPendulumEnv, seed: int, start: str = 'down'
) -> EpisodeMetrics:
    """One deterministic episode with ``act(obs) -> action``; its metrics."""
    obs, _ = env.reset(seed=seed, options={'start': start})
    phis, actions, rewards = [], [], []
    while True:
        action = np.asarray(act(obs), dtype=np.float32).reshape(-1)
        obs, reward, terminated, truncated, info = env.step(action)
        phis.append(info['phi'])
        actions.append(float(np.clip(action[0], -1.0, 1.0)))
        rewards.append(reward)
        if terminated or truncated:
            break
    period = env.config.period_s
    dt = np.full(len(phis), period)
    return episode_metrics(np.array(phis), np.array(actions), dt, period, np.array(rewards))


def evaluate_sim(
    act: Any,
    task: TaskConfig,
    episodes: int,
    seed: int,
    randomization: Randomization | None = None,
    base: PendulumParams | None = None,
) -> list[EpisodeMetrics]:
    """Deterministic episodes from hanging; physics nominal, or drawn per episode."""
    base = base or PendulumParams()
    env = SimRotaryInvertedPendulumEnv(task, base)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(episodes):
        if randomization is not None:
            env.set_params(randomization.sample(rng, base, task.period_s))
        out.append(run_episode(act, env, seed + i))
    return out


def _plot_curve(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    steps = [r['step'] for r in rows]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    ax[0].plot(steps, [r['train_return'] for r in rows], label='training episodes (mean)')
    ax[0].plot(steps, [r['eval_nominal_return'] for r in rows], label='eval, nominal physics')
    ax[0].set(xlabel='environment steps', ylabel='episode return', title='return')
    ax[0].legend(fontsize=8)
    ax[1].plot(steps, [r['eval_nominal_balance_s'] for r in rows], label='nominal physics')
    ax[1].plot(steps, [r['eval_random_balance_s'] for r in rows], label='randomised physics')
    ax[1].set(xlabel='environment steps', ylabel='s', title='longest balance window (eval)')
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save_prior_data(rb: Any, path: Path, size: int, rate_hz: float, seed: int) -> dict[str, Any]:
    """A uniform sample of ``size`` transitions of ``rb``, saved as a rate-tagged buffer file.

    What the fine-tune mixes into its batches (``prior_data``): the simulation's experience,
    diverse (the curriculum's starts, randomised physics), to keep the critics anchored while
    the rig's first transitions are few.
    """
    from rip_control import buffer_file
    from rip_control.buffer_file import BufferMeta
    from rip_learner import buffer_store

    arrays = buffer_store.extract(rb)
    n = len(arrays['rewards'])
    pick = np.sort(np.random.default_rng(seed).choice(n, size=min(size, n), replace=False))
    arrays = {k: v[pick] for k, v in arrays.items()}
    meta = BufferMeta(rate_hz, arrays['observations'].shape[1], ACTION_SIZE, len(pick))
    buffer_file.save(path, arrays, meta)
    return {'file': str(path), 'transitions': len(pick), 'of': n}


def warm_start(model: Any, init: str, cfg: SacConfig, rate_hz: float) -> Path:
    """Load ``init``'s actor, critics and entropy coefficient into ``model``; its policy path.

    :raises ValueError: no policy there, another rate, or other network sizes (naming both).
    """
    from rip_control.policy import PolicyRejected, load_actor_file
    from rip_learner.sac import load_initial_networks

    path = Path(init)
    policy = path / run_files.POLICY if path.is_dir() else path
    try:  # any action history up to this one: the networks get zero inputs for the rest
        k = int(read_metadata(policy.read_bytes()).get('action_history', '0'))
    except (OSError, ValueError):
        k = 0  # the load below names the problem
    if k > cfg.action_history:
        raise ValueError(
            f'init:={init} was trained with action_history {k}, more than the '
            f'{cfg.action_history} of this pre-training: give action_history:={k}'
        )
    try:
        actor = load_actor_file(
            policy,
            rate_hz=rate_hz,
            obs_size=obs_size(k),
            action_size=ACTION_SIZE,
            action_history=k,
        )
    except PolicyRejected as exc:
        raise ValueError(f'init:={init}: {exc}') from None
    if tuple(actor.meta.hidden_sizes) != tuple(cfg.hidden_sizes):
        raise ValueError(
            f'init:={init} has hidden_sizes {list(actor.meta.hidden_sizes)} but this '
            f'pre-training builds {list(cfg.hidden_sizes)}: give hidden_sizes:= to match'
        )
    widen = (obs_size(k), obs_size(cfg.action_history) - obs_size(k))
    if load_initial_networks(model, actor, str(policy), rate_hz, widen) is None:
        raise ValueError(
            f'init:={init}: no {run_files.CHECKPOINT} beside {policy.name} (the critics): a '
            'warm start needs them, or the fresh critics unlearn the actor first'
        )
    return policy


@dataclass(frozen=True)
class _Setup:
    """What the options make of the pre-training: tasks, physics, ranges, curriculum, SAC."""

    rate: float
    out: Path
    task: TaskConfig
    eval_task: TaskConfig
    base: PendulumParams
    ranges: Randomization
    randomization: Randomization | None  # None: randomize:=false
    curriculum: Curriculum
    cfg: SacConfig


def _setup(opts: dict[str, Any]) -> _Setup:
    """Create the output folder; the task, physics, randomisation and SAC configuration."""
    rate = float(opts['rate'])
    out = Path(opts['out'])
    out.mkdir(parents=True, exist_ok=True)
    task = TaskConfig.from_params(
        rate_hz=rate,
        episode_seconds=opts['episode_seconds'],
        action_history=opts['action_history'],
    )
    eval_task = replace(task, episode_seconds=opts['eval_seconds'])
    base = PendulumParams.from_yaml(opts['rig_params']) if opts['rig_params'] else PendulumParams()
    ranges = randomization_named(opts['randomization'], opts['rig_params'], task.period_s)
    randomization = ranges if opts['randomize'] else None
    curriculum = Curriculum(opts['balance_steps'], opts['ramp_steps'], opts['final_upright_share'])
    cfg = SacConfig.from_params(
        hidden_sizes=tuple(int(h) for h in opts['hidden_sizes']),
        action_history=opts['action_history'],
        batch_size=opts['batch_size'],
        learning_rate=opts['learning_rate'],
        gamma=opts['gamma'],
        buffer_size=max(opts['steps'], opts['batch_size']),
        torch_threads=opts['torch_threads'],
        seed=opts['seed'],
        device=opts['device'],
    )
    return _Setup(rate, out, task, eval_task, base, ranges, randomization, curriculum, cfg)


def _build_model(opts: dict[str, Any], setup: _Setup) -> Any:
    """The SAC model on the curriculum's randomised simulator, torch seeded after it."""
    from stable_baselines3.common.monitor import Monitor
    import torch

    from rip_learner.sac import build_sac

    env = Monitor(
        CurriculumEnv(
            SimRotaryInvertedPendulumEnv(setup.task, setup.base),
            setup.curriculum,
            setup.randomization,
            opts['seed'],
        )
    )
    model = build_sac(
        setup.cfg,
        env,
        learning_starts=opts['random_steps'],
        train_freq=opts['train_freq'],
        gradient_steps=opts['gradient_steps'] * opts['train_freq'],
        ent_coef=opts['ent_coef'],
    )
    torch.manual_seed(opts['seed'])
    return model


class _Progress:
    """The evaluations during training: scored, logged, written to ``progress.csv``.

    The best policy so far is saved (actor and checkpoint); :meth:`on_step` says when
    training stops (time limit, target reached).
    """

    def __init__(
        self, opts: dict[str, Any], setup: _Setup, model: Any, init: str | Path, log: Any
    ) -> None:
        self.opts = opts
        self.setup = setup
        self.model = model
        self.init = init
        self.log = log
        self.rows: list[dict[str, Any]] = []
        self.best: dict[str, Any] = {'score': -math.inf}
        self.t0 = time.monotonic()
        self.csv_path = setup.out / run_files.PRETRAIN_PROGRESS
        self.eval_s = 0.0  # wall-clock time spent in the evaluations
        # A warm start is scored first: the best kept is never worse than where it began.
        self.next_eval = 1 if init else opts['eval_every']
        self.stop = ''
        self.scored_updates = -1  # the updates done when the policy was last scored

    def act(self, obs: np.ndarray) -> np.ndarray:
        """The policy's deterministic action."""
        action, _ = self.model.predict(obs, deterministic=True)
        return action

    def on_step(self, step: int) -> bool:
        """Evaluate when due; False when training should stop (its reason in ``stop``)."""
        opts = self.opts
        elapsed = time.monotonic() - self.t0
        if elapsed > opts['time_limit_s']:
            self.stop = f'time limit {opts["time_limit_s"]:g} s'
            return False
        # The last step is scored too, unless nothing trained since the last score.
        last = step >= opts['steps'] and self.model._n_updates != self.scored_updates
        if step < self.next_eval and not last:
            return True
        self.scored_updates = self.model._n_updates
        self.next_eval = (step // opts['eval_every'] + 1) * opts['eval_every']
        e0 = time.monotonic()
        nominal, randomised = self.evaluate()
        self.eval_s += time.monotonic() - e0
        nom, ran = summarize(nominal), summarize(randomised)
        upright = run_episode(
            self.act,
            SimRotaryInvertedPendulumEnv(self.setup.eval_task, self.setup.base),
            30_000,
            'upright',
        )
        row = self._row(step, elapsed, nom, ran, upright)
        self._write_row(row)
        score = row['eval_nominal_balance_s'] + row['eval_random_balance_s']
        marker = ''
        if score > self.best['score']:
            self.save(step, score, nominal, randomised)
            marker = '  * best, saved'
        self._log_row(row, elapsed, marker)
        target = opts['target_balance_s']
        if (
            target > 0
            and step >= opts['min_steps']
            and nom['longest_balance_s']['mean'] >= target
            and ran['longest_balance_s']['mean'] >= target
        ):
            self.stop = f'target reached: balance >= {target:g} s nominal and randomised'
            return False
        return True

    def evaluate(self) -> tuple[list[EpisodeMetrics], list[EpisodeMetrics]]:
        """Deterministic episodes from hanging on nominal physics, then on randomised physics."""
        setup, episodes = self.setup, self.opts['eval_episodes']
        nominal = evaluate_sim(self.act, setup.eval_task, episodes, 10_000, base=setup.base)
        randomised = evaluate_sim(
            self.act, setup.eval_task, episodes, 20_000, setup.ranges, base=setup.base
        )
        return nominal, randomised

    def _row(
        self,
        step: int,
        elapsed: float,
        nom: dict[str, Any],
        ran: dict[str, Any],
        upright: EpisodeMetrics,
    ) -> dict[str, Any]:
        """One row of ``progress.csv``: training's pace and return, the evaluations' scores."""
        import torch

        model = self.model
        train_returns = [e['r'] for e in list(model.ep_info_buffer or [])[-10:]]
        return {
            'step': step,
            'wall_s': round(elapsed, 1),
            'steps_per_s': round(step / max(elapsed, 1e-9), 1),
            'upright_share': round(self.setup.curriculum.upright_share(step), 3),
            'train_return': float(np.mean(train_returns)) if train_returns else 0.0,
            'eval_upright_balance_s': upright.longest_balance_s,
            'eval_nominal_return': nom['return_mean'],
            'eval_nominal_balance_s': nom['longest_balance_s']['mean'],
            'eval_nominal_swing_up_s': nom['swing_up_s_mean'],
            'eval_random_return': ran['return_mean'],
            'eval_random_balance_s': ran['longest_balance_s']['mean'],
            'eval_random_swung_up': ran['swung_up'],
            'ent_coef': float(torch.exp(model.log_ent_coef.detach()).item())
            if model.log_ent_coef is not None
            else None,
        }

    def _write_row(self, row: dict[str, Any]) -> None:
        """Keep the row; append it to ``progress.csv`` (a new file, header first, at the first)."""
        self.rows.append(row)
        new = not self.csv_path.exists() or len(self.rows) == 1
        with self.csv_path.open('w' if new else 'a', newline='') as f:
            writer = csv.DictWriter(f, fieldnames=list(row))
            if new:
                writer.writeheader()
            writer.writerow(row)

    def _log_row(self, row: dict[str, Any], elapsed: float, marker: str) -> None:
        """The evaluation's log line (``marker``: whether its policy was saved as the best)."""
        swing = row['eval_nominal_swing_up_s']
        # The latest end: the steps at this rate or the time limit (the target may stop it sooner)
        rate = max(row['steps_per_s'], 1e-9)
        left = min((self.opts['steps'] - row['step']) / rate, self.opts['time_limit_s'] - elapsed)
        self.log(
            f'step {row["step"]:>7} | {elapsed:6.0f} s, ends within {max(left, 0.0):.0f} s | '
            f'{row["steps_per_s"]:5.0f} steps/s | '
            f'upright starts {row["upright_share"]:.2f} | train return '
            f'{row["train_return"]:6.1f} | eval balance from upright '
            f'{row["eval_upright_balance_s"]:4.1f} s, from hanging: nominal '
            f'{row["eval_nominal_balance_s"]:4.1f} s, randomised '
            f'{row["eval_random_balance_s"]:4.1f} s | swing-up '
            + (f'{swing:.1f} s' if swing is not None else '-')
            + marker
        )

    def save(
        self,
        step: int,
        score: float,
        nominal: list[EpisodeMetrics],
        randomised: list[EpisodeMetrics],
    ) -> None:
        """Save the policy (tagged with its step) and the SAC checkpoint; keep it as the best."""
        opts, setup, version = self.opts, self.setup, 1
        extra = {
            'trained_in': 'simulation',
            'pretrain_steps': str(step),
            'pretrain_seed': str(opts['seed']),
            'domain_randomization': opts['randomization'] if setup.randomization else 'off',
            'rig_params': opts['rig_params'] or 'QUBE-Servo 2 defaults',
            'warm_start': str(self.init),
        }
        meta = actor_meta(setup.cfg, version, setup.rate)
        actor = encode_actor(meta, actor_tensors(self.model), extra)
        atomic_write_bytes(setup.out / run_files.POLICY, actor)
        atomic_write_bytes(
            setup.out / run_files.CHECKPOINT,
            encode_checkpoint(sac_state(self.model), version, setup.rate),
        )
        self.best.update(
            score=score,
            step=step,
            nominal=summarize(nominal),
            randomised=summarize(randomised),
        )


def _callback(progress: _Progress) -> Any:
    """An SB3 callback that hands each environment step to ``progress``."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Progress(BaseCallback):
        def _on_step(self) -> bool:
            return progress.on_step(self.num_timesteps)

    return Progress()


def _summary(
    opts: dict[str, Any],
    setup: _Setup,
    model: Any,
    progress: _Progress,
    elapsed: float,
    stopped_by: str,
) -> dict[str, Any]:
    """What ``pretrain.json`` records: the options, the setup, how it ended, the curve."""
    randomization = setup.randomization
    return {
        'command': 'python -m rip_learner.pretrain',
        'options': opts,
        'rate_hz': setup.rate,
        'wall_s': elapsed,
        'eval_wall_s': progress.eval_s,
        'steps': model.num_timesteps,
        'stopped_by': stopped_by,
        'best': {k: v for k, v in progress.best.items() if k != 'score'},
        'randomization': asdict(setup.ranges) if randomization else None,
        'randomization_name': opts['randomization'] if randomization else None,
        'rig': asdict(setup.base),
        'rig_params': opts['rig_params'],
        'init': str(progress.init),
        'device': str(model.device),
        'curriculum': asdict(setup.curriculum),
        'task': asdict(setup.task),
        'curve': progress.rows,
        'policy': str(setup.out / run_files.POLICY),
    }


def pretrain(opts: dict[str, Any], log: Any = print) -> dict[str, Any]:
    """Train, evaluate, save; return the summary written to ``pretrain.json``."""
    setup = _setup(opts)
    rate, out = setup.rate, setup.out
    model = _build_model(opts, setup)
    init = warm_start(model, opts['init'], setup.cfg, rate) if opts['init'] else ''
    if init:
        log(f'warm start: actor, critics and entropy coefficient of {init}')
    progress = _Progress(opts, setup, model, init, log)
    log(
        f'pre-training at {rate:g} Hz in {out}: up to {opts["steps"]} steps or '
        f'{opts["time_limit_s"]:g} s; nets {list(setup.cfg.hidden_sizes)}, batch '
        f'{setup.cfg.batch_size}, {opts["gradient_steps"]} update(s) per step, every '
        f'{opts["train_freq"]} step(s), randomisation '
        f'{opts["randomization"] if setup.randomization else "off"}'
    )
    model.learn(total_timesteps=opts['steps'], callback=_callback(progress))
    elapsed = time.monotonic() - progress.t0
    stopped_by = progress.stop or f'{opts["steps"]} steps'
    if progress.best['score'] == -math.inf:  # never evaluated: save what there is
        progress.save(model.num_timesteps, -1.0, *progress.evaluate())
    summary = _summary(opts, setup, model, progress, elapsed, stopped_by)
    if opts['prior_data_size']:
        summary['prior_data'] = save_prior_data(
            model.replay_buffer,
            out / run_files.PRIOR_DATA,
            opts['prior_data_size'],
            rate,
            opts['seed'],
        )
    atomic_write_bytes(out / run_files.PRETRAIN_RECORD, json.dumps(summary, indent=1).encode())
    if progress.rows:
        _plot_curve(progress.rows, out / run_files.LEARNING_CURVE)
    best = progress.best
    log(
        f'done in {elapsed:.0f} s ({model.num_timesteps} steps, stopped by {stopped_by}); '
        f'best at step {best.get("step")}: balance nominal '
        f'{best["nominal"]["longest_balance_s"]["mean"]:.1f} s, randomised '
        f'{best["randomised"]["longest_balance_s"]["mean"]:.1f} s -> {out / run_files.POLICY}'
    )
    return summary


def main(argv: list[str] | None = None) -> int:
    """Command line: ``name:=value`` options (see ``--help``)."""
    argv = sys.argv[1:] if argv is None else argv
    if help_requested(argv, __doc__, OPTIONS):
        return 0
    try:
        opts = parse_options(argv, OPTIONS)
        randomization_named(opts['randomization'], opts['rig_params'], 1.0 / opts['rate'])
        if opts['rig_params']:
            PendulumParams.from_yaml(opts['rig_params'])
    except (ValueError, FileNotFoundError) as exc:
        print(f'pretrain: {exc}', file=sys.stderr)
        return 2
    try:
        pretrain(opts, log=lambda line: print(line, flush=True))
    except ValueError as exc:  # a warm start that does not fit, named
        print(f'pretrain: {exc}', file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print('pretrain: interrupted', file=sys.stderr)
        return 130
    return 0


if __name__ == '__main__':
    sys.exit(main())
