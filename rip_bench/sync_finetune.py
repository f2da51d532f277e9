"""The fine-tune done the old, synchronous way: SB3 ``SAC.learn()`` on a self-pacing rig env.

This is the pattern the package exists to replace, kept as the V5 baseline
(:mod:`rip_bench.v5`). The env sleeps to the next tick inside ``step()``;
gradient updates run between steps in the same thread, so every tick that follows
``K`` updates is late and the real rate stretches. The policy learns the dynamics of the
stretched period and is then deployed at the configured rate.

For a fair comparison with the asynchronous nodes (V5) it runs the learner's own update
(:class:`~rip_learner.fast_sac.FastSacUpdate`, with the same safeguards) and acts with the
initial policy from the first step: SB3 would act uniformly at random until
``learning_starts``, which the asynchronous fine-tune never does.

A stretched step can outlast the firmware's deadman (100 ms): the rig disengages and refuses
the next voltage; and a read can time out. A user of this pattern would end the episode there
and reset (the reset engages the motor again); :class:`DeadmanTolerantEnv` does exactly that
and counts both.
"""

from __future__ import annotations

from dataclasses import dataclass
import json
from pathlib import Path
import time
from typing import Any

import gymnasium as gym
import numpy as np

from rip_control import run_files
from rip_control.files import atomic_write_bytes
from rip_control.policy import encode_actor, load_actor_file
from rip_control.rig.client import LowLevelClient, RigProtocolError, RigTimeout
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE, RealRotaryInvertedPendulumEnv, TaskConfig
from rip_control.rig.protocol import ErrorCode
from rip_learner.sac import (
    SacConfig,
    actor_meta,
    actor_tensors,
    build_sac,
    load_initial_networks,
)


class DeadmanTolerantEnv(gym.Wrapper):
    """Ends the episode (truncated) on a refused voltage (deadman) or a serial timeout."""

    def __init__(self, env: RealRotaryInvertedPendulumEnv, reset_attempts: int = 5) -> None:
        super().__init__(env)
        self.rig = env
        self.deadman_trips = 0
        self.serial_timeouts = 0
        self.reset_attempts = reset_attempts
        self._last_obs: np.ndarray | None = None
        self._obs_at = 0.0  # when the last observation was handed to the caller
        #: per step after the first of an episode: seconds from handing the caller an
        #: observation to its action arriving here (SB3's updates and its forward pass run
        #: in between, so the rig acts on an observation this old; the nodes take ~1 ms)
        self.act_delay_s: list[float] = []

    def reset(self, **kwargs: Any) -> Any:
        """Reset the rig (engages the motor again); a timeout retries, a few times."""
        for attempt in range(self.reset_attempts):
            try:
                obs, info = self.env.reset(**kwargs)
                break
            except RigTimeout:
                self.serial_timeouts += 1
                if attempt == self.reset_attempts - 1:
                    raise
        self._last_obs = obs
        self._obs_at = 0.0  # the reset's observation: the first action's delay is not kept
        return obs, info

    def step(self, action: Any) -> Any:
        """Step; a refused voltage or a timeout ends the episode instead of the run."""
        if self._obs_at:
            self.act_delay_s.append(time.monotonic() - self._obs_at)
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except RigProtocolError as exc:
            if exc.error != ErrorCode.NOT_ENGAGED:
                raise
            self.deadman_trips += 1
            assert self._last_obs is not None
            return self._last_obs, 0.0, False, True, {'deadman': True}
        except RigTimeout:
            self.serial_timeouts += 1
            assert self._last_obs is not None
            return self._last_obs, 0.0, False, True, {'serial_timeout': True}
        self._last_obs = obs
        self._obs_at = time.monotonic()
        return obs, reward, terminated, truncated, info


def _sync_sac_class() -> Any:
    """SB3's SAC, acting with its policy before ``learning_starts``, updating by a hook."""
    from stable_baselines3 import SAC

    class WarmStartSAC(SAC):
        update: Any = None  # FastSacUpdate, or None for SB3's own train()
        critic_warmup_updates = 0

        def _sample_action(self, learning_starts: int, *args: Any, **kwargs: Any) -> Any:
            return super()._sample_action(0, *args, **kwargs)

        def train(self, gradient_steps: int, batch_size: int = 64) -> None:
            if self.update is None:
                super().train(gradient_steps, batch_size)
                return
            actor = self._n_updates >= self.critic_warmup_updates
            self.update.train(gradient_steps, batch_size, update_actor=actor)

    return WarmStartSAC


def delay_stats(delays_s: Any) -> dict[str, float]:
    """Mean, median, 95th percentile and max of observation-to-action delays, in ms."""
    d = np.asarray(delays_s, dtype=float) * 1e3
    if not d.size:
        return {'n': 0}
    return {
        'n': int(d.size),
        'mean': float(d.mean()),
        'p50': float(np.median(d)),
        'p95': float(np.percentile(d, 95)),
        'max': float(d.max()),
    }


@dataclass(frozen=True)
class SyncResult:
    """What a synchronous fine-tune did."""

    policy: str
    episodes: int
    steps: int
    deadman_trips: int
    serial_timeouts: int
    dt_s: list[float]
    episode_returns: list[float]
    wall_s: float
    updates: int = 0
    act_delay_s: tuple[float, ...] = ()  # DeadmanTolerantEnv.act_delay_s


def sync_finetune(
    serial_port: str,
    out: Path,
    rate_hz: float,
    episodes: int,
    gradient_steps: int,
    policy: str = '',
    cfg: SacConfig | None = None,
    episode_seconds: float = 6.0,
    learning_starts: int = 0,
    log: Any = print,
    fast_updates: bool = False,
    critic_warmup_updates: int = 0,
    prior: dict[str, np.ndarray] | None = None,
    prior_ratio: float = 0.0,
    smoothness: float = 0.0,
    smoothness_reference: str = 'none',
) -> SyncResult:
    """Fine-tune ``policy`` (with its critics, if saved beside it) by ``SAC.learn()``.

    :param serial_port: the rig (emulator link or device).
    :param out: folder for the fine-tuned ``policy.safetensors`` and ``sync_finetune.json``.
    :param rate_hz: the rate the env paces itself to, and the rate the result is tagged with
        (it is meant for deployment at this rate, whatever rate it really ran at).
    :param learning_starts: steps (acting with the initial policy) before the first update.
    :param fast_updates: the learner's update instead of SB3's ``train()``; the safeguards
        (``critic_warmup_updates``, ``prior`` mixed in at ``prior_ratio``, ``smoothness``,
        ``smoothness_reference``) need it, and mean what the learner's parameters of the same
        names mean.
    """
    from stable_baselines3.common.callbacks import BaseCallback

    from rip_learner.fast_sac import FastSacUpdate

    cfg = cfg or SacConfig.from_params()
    out.mkdir(parents=True, exist_ok=True)
    client = LowLevelClient(serial_port)
    client.open()
    task = TaskConfig.from_params(rate_hz=rate_hz, episode_seconds=episode_seconds)
    rig = RealRotaryInvertedPendulumEnv(client, task)
    env = DeadmanTolerantEnv(rig)
    dts: list[float] = []
    returns: list[float] = []
    t0 = time.monotonic()
    try:
        model = build_sac(
            cfg,
            env,
            sac_class=_sync_sac_class(),
            learning_starts=learning_starts,
            train_freq=1,
            gradient_steps=gradient_steps,
        )
        if policy:
            actor = load_actor_file(
                policy, rate_hz=rate_hz, obs_size=OBS_SIZE, action_size=ACTION_SIZE
            )
            load_initial_networks(model, actor, policy, rate_hz)
        if fast_updates:
            model.update = FastSacUpdate(
                model, prior=prior, prior_ratio=prior_ratio, smoothness=smoothness
            )
            if smoothness_reference not in ('none', 'initial'):
                got = smoothness_reference
                raise ValueError(f"smoothness_reference must be 'none' or 'initial', got {got!r}")
            if smoothness_reference == 'initial':
                model.update.set_smoothness_reference(model.actor)
            model.critic_warmup_updates = critic_warmup_updates

        class _Episodes(BaseCallback):
            def __init__(self) -> None:
                super().__init__()
                self.ret = 0.0

            def _on_step(self) -> bool:
                info = self.locals['infos'][0]
                if 'dt_s' in info:
                    dts.append(float(info['dt_s']))
                self.ret += float(self.locals['rewards'][0])
                if self.locals['dones'][0]:
                    returns.append(self.ret)
                    recent = np.asarray(dts[-int(episode_seconds * rate_hz) :])
                    log(
                        f'sync episode {len(returns):3d}: return {self.ret:8.2f}, real rate '
                        f'{1.0 / recent.mean() if recent.size else float("nan"):5.1f} Hz '
                        f'(configured {rate_hz:g}), deadman trips {env.deadman_trips}, serial '
                        f'timeouts {env.serial_timeouts} so far'
                    )
                    self.ret = 0.0
                return len(returns) < episodes

        model.learn(total_timesteps=10**9, callback=_Episodes())
        meta = actor_meta(cfg, 1, rate_hz)
        extra = {'trained_in': 'sync SAC.learn() on the rig', 'source_policy': policy}
        atomic_write_bytes(out / run_files.POLICY, encode_actor(meta, actor_tensors(model), extra))
    finally:
        env.rig.disengage_safely()
        client.close()
    result = SyncResult(
        policy=str(out / run_files.POLICY),
        episodes=len(returns),
        steps=len(dts),
        deadman_trips=env.deadman_trips,
        serial_timeouts=env.serial_timeouts,
        dt_s=dts,
        episode_returns=returns,
        wall_s=time.monotonic() - t0,
        updates=int(model._n_updates),
        act_delay_s=tuple(env.act_delay_s),
    )
    doc = {k: v for k, v in result.__dict__.items() if k not in ('dt_s', 'act_delay_s')}
    doc['act_delay_ms'] = delay_stats(result.act_delay_s)
    atomic_write_bytes(out / 'sync_finetune.json', json.dumps(doc, indent=1).encode())
    return result
