"""Offline rig: the emulator's firmware driven with explicit times, no pty, no real time.

``python -m rip_bench.offline_rig --params bench/rigs/gap_X.yaml --policy
policies/sim_50hz/policy.safetensors --episodes 5 --seconds 10``

For designing rigs quickly (a 10 s episode takes a second or two of CPU): the emulator's
:class:`~rip_control.rig.emulator.Firmware` (with the model's plant, or the reality-gap plant
of a rig file with a ``gap:`` section) is sent the protocol's frames at the control rate, and
its GET_STATE replies are observed as the rig env does (:class:`~rip_control.rig.env.RipTask`:
counts to angles, the firmware's timestamps). Each tick reads at the tick and sends the action
``act_delay_s`` later (the host's round trip and forward pass). An episode starts from the
pendulum hanging at rest, placed directly (offline only: a real rig cannot be teleported),
after ``settle_s`` engaged at 0 V; its balance is the evaluation's
(:func:`rip_control.run.evaluation.episode_metrics`, ``|phi| < 0.2 rad``).

:func:`record_excitation` records the excitation episode (:mod:`rip_control.rig.excitation`)
the same way, as buffer arrays that :func:`rip_learner.identify.records_from_arrays` takes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
import math
from pathlib import Path
import sys
from typing import Any

import numpy as np

from rip_bench.paths import REPO
from rip_control.policy import PolicyRejected, load_actor_file, read_metadata
from rip_control.rig.dynamics import PendulumParams
from rip_control.rig.emulator import Firmware
from rip_control.rig.env import PendulumReading, RipTask, TaskConfig
from rip_control.rig.excitation import Excitation, ExcitationDesign
from rip_control.rig.gap_plant import GapEffects, GapPlant, load_rig
from rip_control.rig.protocol import Cmd, FrameParser, RigState, encode_frame, pack_voltage_mv
from rip_control.run.evaluation import EpisodeMetrics, episode_metrics
from rip_control.transitions import EXCITATION_VERSION

#: A controller: ``(step in the episode, observation) -> action`` in [-1, 1].
Controller = Callable[[int, np.ndarray], np.ndarray]

HANGING_SPREAD_RAD = 0.05
"""An episode's pendulum starts at rest, uniformly within this of hanging (as the simulator's)."""


class OfflineRig:
    """The emulator's firmware behind frames, on a clock the caller advances.

    :param params: the rig's parameters.
    :param gap: its gap effects (None: the model's plant).
    :param seed: seed of the encoder noise and the sample ages.
    """

    def __init__(
        self, params: PendulumParams, gap: GapEffects | None = None, seed: int | None = 0
    ) -> None:
        plant = GapPlant(params, gap, seed=seed) if gap is not None else None
        self.firmware = Firmware(params, seed=seed, plant=plant)
        self.params = params
        self.now_s = 0.0
        self._seq = 0
        self._rad_per_count = 2.0 * math.pi / params.encoder_counts_per_rev

    def _request(self, cmd: Cmd, payload: bytes = b'') -> bytes:
        self._seq = (self._seq + 1) & 0xFF
        frames = FrameParser().feed(encode_frame(self._seq, cmd, payload))
        reply = FrameParser().feed(self.firmware.handle(frames[0], self.now_s))
        return reply[0].payload

    def at(self, time_s: float) -> OfflineRig:
        """Move the clock to ``time_s`` (never back); the physics follows at the next request."""
        self.now_s = max(self.now_s, time_s)
        return self

    def engage(self) -> None:
        """ENGAGE (0 V)."""
        self._request(Cmd.ENGAGE)

    def set_voltage(self, volts: float) -> None:
        """SET_VOLTAGE, as the client rounds it."""
        self._request(Cmd.SET_VOLTAGE, pack_voltage_mv(round(volts * 1000.0)))

    def read(self) -> PendulumReading:
        """GET_STATE, converted as the rig env does (no wrap within 71 minutes of power-on)."""
        state = RigState.unpack(self._request(Cmd.GET_STATE))
        k = self._rad_per_count
        return PendulumReading(
            state.arm_counts * k, state.pendulum_counts * k, state.timestamp_us * 1e-6
        )

    def place(self, alpha_rad: float) -> None:
        """Put the pendulum at rest at ``alpha_rad`` from hanging, the arm centred (offline)."""
        self.firmware.advance_to(self.now_s)
        self.firmware.dynamics.set_state(0.0, alpha_rad)


def run_episode(
    rig: OfflineRig,
    task: RipTask,
    controller: Controller,
    *,
    steps: int,
    alpha0_rad: float,
    act_delay_s: float = 0.001,
    settle_s: float = 0.3,
) -> dict[str, np.ndarray]:
    """One episode as the control loop runs it; its per-tick arrays.

    ``obs`` and ``next_obs`` of each transition, ``action``, ``reward``, ``terminated``,
    ``phi`` (of the next observation's reading) and ``dt`` (the host's tick interval).
    """
    cfg = task.config
    period = cfg.period_s
    rig.place(alpha0_rad)
    rig.engage()
    t = rig.now_s
    for _ in range(max(0, round(settle_s / period))):  # engaged at 0 V: the reset's end
        t += period
        rig.at(t).set_voltage(0.0)
    t += period
    prev = rig.at(t).read()
    task.clear_actions()
    obs, _, _ = task.observe(prev, prev)
    out: dict[str, list] = {k: [] for k in ('obs', 'next_obs', 'action', 'reward', 'phi')}
    out['terminated'] = []
    for step in range(steps):
        value = max(-1.0, min(1.0, float(np.asarray(controller(step, obs)).reshape(-1)[0])))
        rig.at(t + act_delay_s).set_voltage(value * cfg.max_action_v)
        task.push_action(value)
        t += period
        cur = rig.at(t).read()
        nxt, _, phi_dot = task.observe(prev, cur)
        terminated = task.terminated(cur)
        reward = cfg.termination_penalty if terminated else task.reward(cur, phi_dot, value)
        for key, item in zip(
            ('obs', 'next_obs', 'action', 'reward', 'phi', 'terminated'),
            (obs, nxt, value, reward, cur.phi, terminated),
            strict=True,
        ):
            out[key].append(item)
        obs, prev = nxt, cur
        if terminated:
            break
    rig.at(t + act_delay_s).set_voltage(0.0)
    arrays = {k: np.asarray(v) for k, v in out.items()}
    arrays['dt'] = np.full(len(arrays['phi']), period)
    return arrays


def _task(rate_hz: float, seconds: float, action_history: int, **values: float) -> RipTask:
    return RipTask(
        TaskConfig.from_params(
            {
                'rate_hz': rate_hz,
                'episode_seconds': seconds,
                'action_history': action_history,
                **values,
            }
        )
    )


def _policy(policy_path: str | Path, seconds: float) -> tuple[RipTask, Any]:
    """A policy file's task (its rate and action history, episodes of ``seconds``), its actor."""
    meta = read_metadata(Path(policy_path).read_bytes())
    rate_hz = float(meta.get('rate_hz', 50.0))
    k = int(meta.get('action_history', 0))
    task = _task(rate_hz, seconds, k)
    actor = load_actor_file(
        policy_path,
        rate_hz=rate_hz,
        obs_size=task.config.obs_size,
        action_size=1,
        action_history=k,
    )
    return task, actor


def evaluate_policy(
    params_path: str | Path,
    policy_path: str | Path,
    *,
    episodes: int = 5,
    seconds: float = 10.0,
    seed: int = 0,
    act_delay_s: float = 0.001,
) -> list[EpisodeMetrics]:
    """The policy's deterministic actor on the rig file, ``episodes`` from hanging at rest."""
    params, gap = load_rig(params_path)
    task, actor = _policy(policy_path, seconds)
    rig = OfflineRig(params, gap, seed=seed)
    starts = np.random.default_rng(seed).uniform(-HANGING_SPREAD_RAD, HANGING_SPREAD_RAD, episodes)
    results = []
    for alpha0 in starts:
        tr = run_episode(
            rig,
            task,
            lambda _step, obs: actor.act(obs),
            steps=task.config.episode_steps,
            alpha0_rad=float(alpha0),
            act_delay_s=act_delay_s,
        )
        results.append(
            episode_metrics(tr['phi'], tr['action'], tr['dt'], task.config.period_s, tr['reward'])
        )
    return results


def record_excitation(
    params_path: str | Path,
    *,
    design: ExcitationDesign | None = None,
    rate_hz: float = 50.0,
    max_action_v: float = 8.0,
    action_history: int = 0,
    seed: int = 0,
    episode: int = 0,
    act_delay_s: float = 0.001,
) -> dict[str, np.ndarray]:
    """The excitation episode on a rig file, offline, as replay-buffer arrays.

    :data:`rip_learner.buffer_file.FIELDS` and ``PROVENANCE`` (the policy version marks the
    excitation), as :func:`rip_learner.identify.records_from_arrays` takes them with
    ``period_s = 1 / rate_hz`` and the same ``max_action_v``.
    """
    params, gap = load_rig(params_path)
    design = design or ExcitationDesign()
    task = _task(rate_hz, design.duration_s, action_history, max_action_v=max_action_v)
    excitation = Excitation(design, rate_hz, max_action_v)
    rig = OfflineRig(params, gap, seed=seed)
    tr = run_episode(
        rig,
        task,
        excitation.action,
        steps=excitation.steps,
        alpha0_rad=0.0,
        act_delay_s=act_delay_s,
    )
    return _buffer_arrays(tr, episode, EXCITATION_VERSION)


def _buffer_arrays(tr: dict[str, np.ndarray], episode: int, version: int) -> dict[str, np.ndarray]:
    """One episode's :func:`run_episode` arrays as replay-buffer arrays."""
    n = len(tr['action'])
    terminated = tr['terminated'].astype(np.float32)
    timeouts = np.zeros(n, np.float32)
    if n and not terminated[-1]:
        timeouts[-1] = 1.0  # the episode's own length
    return {
        'observations': tr['obs'].astype(np.float32),
        'next_observations': tr['next_obs'].astype(np.float32),
        'actions': tr['action'].astype(np.float32).reshape(n, 1),
        'rewards': tr['reward'].astype(np.float32),
        'dones': terminated,
        'timeouts': timeouts,
        'episodes': np.full(n, float(episode)),
        'steps': np.arange(n, dtype=np.float64),
        'dts': tr['dt'].astype(np.float64),
        'policy_versions': np.full(n, float(version)),
    }


def record_session(
    params_path: str | Path,
    policy_path: str | Path,
    *,
    episodes: int = 5,
    seconds: float = 10.0,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """What ``adapt``'s baseline records, offline: the excitation, then the policy's episodes.

    Replay-buffer arrays: the excitation (episode 0), then ``episodes`` deterministic
    episodes of ``policy_path`` of ``seconds`` from hanging at rest, numbered from 1.
    """
    params, gap = load_rig(params_path)
    task, actor = _policy(policy_path, seconds)
    parts = [
        record_excitation(
            params_path,
            rate_hz=task.config.rate_hz,
            action_history=task.config.action_history,
            seed=seed,
        )
    ]
    rig = OfflineRig(params, gap, seed=seed + 1)
    for episode in range(1, episodes + 1):
        tr = run_episode(
            rig,
            task,
            lambda _step, obs: actor.act(obs),
            steps=task.config.episode_steps,
            alpha0_rad=0.0,
        )
        parts.append(_buffer_arrays(tr, episode, 1))
    return {k: np.concatenate([a[k] for a in parts]) for k in parts[0]}


def main(argv: list[str] | None = None) -> int:
    """Command line: per-episode balances and their mean."""
    ap = argparse.ArgumentParser(prog='offline_rig', description=__doc__.split('\n\n')[1])
    ap.add_argument('--params', default='', help='rig YAML (default: the nominal QUBE-Servo 2)')
    ap.add_argument('--policy', required=True, help='actor .safetensors')
    ap.add_argument('--episodes', type=int, default=5)
    ap.add_argument('--seconds', type=float, default=10.0)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument(
        '--act-delay-ms', type=float, default=1.0, help='read to write within a tick, ms'
    )
    args = ap.parse_args(argv)
    try:
        if args.episodes < 1 or not args.seconds > 0:
            raise ValueError('--episodes must be >= 1 and --seconds > 0')
        metrics = evaluate_policy(
            args.params or _nominal(),
            args.policy,
            episodes=args.episodes,
            seconds=args.seconds,
            seed=args.seed,
            act_delay_s=args.act_delay_ms / 1000.0,
        )
    except (ValueError, OSError, PolicyRejected) as exc:
        print(f'offline_rig: error: {exc}', file=sys.stderr)
        return 2
    balances = [m.longest_balance_s for m in metrics]
    for i, m in enumerate(metrics):
        print(f'episode {i}: balance {m.longest_balance_s:5.2f} s of {m.duration_s:5.2f} s')
    print(f'mean balance {np.mean(balances):.2f} s over {len(balances)} episodes')
    return 0


def _nominal() -> Path:
    return REPO / 'config' / 'rig_qube_servo2.yaml'


if __name__ == '__main__':
    sys.exit(main())
