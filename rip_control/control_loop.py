"""The control thread's work, free of ROS: pace, read, act, hand off — every tick.

:class:`ControlLoop.run` is the body of the control thread. Each tick it waits for its
absolute deadline, checks the 3-strike rule, reads the rig, completes the previous
transition, runs the policy snapshot and writes the action. Between episodes the same paced
ticks drive the reset controller (not recorded, not policy-driven). It never waits on the
learner, on DDS or on a lock a slow path can hold: transitions, tick samples and episode
summaries leave through :class:`~rip_control.outbox.Outbox` deques.

Every way out of :meth:`ControlLoop.run` — a stop request, a timing violation, a serial
failure, a hung-loop trip, any exception — passes through one ``finally`` that disengages
the motor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
import logging
import math
import time
from typing import Protocol

import numpy as np

from rip_control.env import RealRotaryInvertedPendulumEnv
from rip_control.outbox import Outbox
from rip_control.pacer import Pacer, TickTiming
from rip_control.policy import NumpyActor
from rip_control.protocol import ErrorCode
from rip_control.rig_client import RigDisconnected, RigError, RigProtocolError
from rip_control.telemetry import RunningStats
from rip_control.transitions import Transition
from rip_control.watchdog import OverrunWatchdog, TimingViolation

_log = logging.getLogger(__name__)


class ControlLoopHung(RuntimeError):
    """The loop stopped ticking (the node's hung-loop watchdog saw no heartbeat)."""


class ActorSource(Protocol):
    """The policy hand-off the loop reads once per tick (a snapshot, the RT process's box)."""

    def read_from_rt(self) -> NumpyActor:
        """The actor for this tick; never blocks."""
        ...


class StopFlag(Protocol):
    """What the loop polls once per tick to know it must stop (``threading.Event`` fits)."""

    def is_set(self) -> bool:
        """Whether to stop now."""
        ...


class SerialFailure(RuntimeError):
    """Too many consecutive serial errors: the rig is not under control."""


@dataclass(frozen=True)
class LoopConfig:
    """Settings of the control thread (the task itself lives in the env's TaskConfig).

    :param timing_violation_threshold_s: overrun that counts as a strike; also the largest
        |dt - period| a transition may have and still be published.
    :param max_strikes: consecutive strikes that trip the watchdog.
    :param hung_timeout_s: silence after which the hung-loop watchdog disengages.
    :param max_serial_errors: consecutive failed ticks before giving up.
    :param stochastic_actions: sample from the policy (exploration) instead of its mean.
    :param episodes: stop after this many episodes (0: until stopped).
    :param spin_s: busy-wait window of the pacer.
    :param seed: seed of the exploration noise.
    :param fault_tick_delay_s: FAULT INJECTION for tests, never on a rig: stretch every tick's
        work by this long once ``fault_after_ticks`` ticks have run (0: off).
    :param fault_after_ticks: see ``fault_tick_delay_s``.
    """

    timing_violation_threshold_s: float = 0.005
    max_strikes: int = 3
    hung_timeout_s: float = 0.1
    max_serial_errors: int = 3
    stochastic_actions: bool = True
    episodes: int = 0
    spin_s: float = 0.001
    seed: int = 0
    fault_tick_delay_s: float = 0.0
    fault_after_ticks: int = 0

    def __post_init__(self) -> None:
        if not self.timing_violation_threshold_s > 0:
            value = self.timing_violation_threshold_s
            raise ValueError(f'timing_violation_threshold_s must be > 0, got {value}')
        if self.max_strikes < 1:
            raise ValueError(f'max_strikes must be >= 1, got {self.max_strikes}')
        if not self.hung_timeout_s > 0:
            raise ValueError(f'hung_timeout_s must be > 0, got {self.hung_timeout_s}')
        if self.max_serial_errors < 1:
            raise ValueError(f'max_serial_errors must be >= 1, got {self.max_serial_errors}')
        if self.episodes < 0:
            raise ValueError(f'episodes must be >= 0, got {self.episodes}')


@dataclass(frozen=True)
class TickSample:
    """One tick for the per-tick topic and the tick trace.

    ``prev_work_s`` is how long the previous tick's work took (release to the next wait):
    an overrun after a long work time came from the work (serial, policy), one after a
    short work time from waking late (scheduling, the GIL).
    """

    dt_s: float
    overrun_s: float
    strike: bool
    prev_work_s: float = 0.0


@dataclass(frozen=True)
class EpisodeSummary:
    """What one episode did; the node turns it into a timing.csv row and a topic message."""

    episode: int
    n_ticks: int
    dt_mean_s: float
    dt_std_s: float
    max_overrun_s: float
    n_strikes: int
    episode_return: float
    balance_s: float
    terminated: bool
    policy_version: int
    transitions_published: int
    transitions_dropped_late: int
    settled: bool


class LoopStatus:
    """Counters the control thread updates and other threads read (plain attribute reads)."""

    def __init__(self) -> None:
        self.ticks = 0
        self.missed_ticks = 0
        self.dt = RunningStats()  # since activation
        self.max_overrun_s = 0.0
        self.strikes_total = 0
        self.violations = 0
        self.serial_errors = 0
        self.episodes = 0
        self.phase = 'idle'
        self.transitions_dropped_late = 0
        # (ticks, deadline of the last tick), replaced as one object: a reader in another
        # thread never pairs a count with another tick's time.
        self.tick_mark: tuple[int, float] = (0, 0.0)


class ControlLoop:
    """Runs episodes on the rig at the configured rate, in the calling thread.

    :param env: the rig env (its client must be open).
    :param config: loop settings.
    :param snapshot: the policy hand-off.
    :param transitions: outbox for transitions; its ``holdback`` should be
        ``max_strikes - 1``.
    :param ticks: outbox for per-tick samples (best effort).
    :param episodes: outbox for episode summaries.
    :param first_episode: number of the first episode (continues across activations).
    """

    def __init__(
        self,
        env: RealRotaryInvertedPendulumEnv,
        config: LoopConfig,
        snapshot: ActorSource,
        transitions: Outbox[Transition],
        ticks: Outbox[TickSample],
        episodes: Outbox[EpisodeSummary],
        first_episode: int = 0,
    ) -> None:
        self.env = env
        self.first_episode = first_episode
        self.config = config
        self.snapshot = snapshot
        self.transitions = transitions
        self.ticks = ticks
        self.episodes_out = episodes
        self.status = LoopStatus()
        self.motor_confirmed_off = False  # the rig answered the loop's last disengage
        self._rng = np.random.default_rng(config.seed)

    def run(self, stop: StopFlag, after_tick: Callable[[], None] | None = None) -> None:
        """Run until ``stop`` is set or ``episodes`` are done; raise on any fault.

        :param stop: polled once per tick, before the wait.
        :param after_tick: called once per tick after its work, before the wait (the RT
            process publishes its status and heartbeat there).
        :raises TimingViolation: the 3-strike rule tripped.
        :raises SerialFailure: consecutive serial errors beyond the limit.
        :raises RigDisconnected: the serial device vanished.
        """
        cfg, env, st = self.config, self.env, self.status
        period = env.config.period_s
        pacer = Pacer(period, spin_s=cfg.spin_s)
        overrun_dog = OverrunWatchdog(cfg.timing_violation_threshold_s, cfg.max_strikes)
        holdback = self.transitions.holdback
        clean_streak = 0
        episode = _Episode()
        in_episode = False
        serial_errors_in_row = 0
        obs: np.ndarray | None = None
        reset_result: bool | None = None  # set when a reset finished (settled or not)
        # A reset begins (engage + first read: serial traffic) on a tick of its own, inside
        # the serial-error handling, so a timeout there counts like any other.
        begin_reset_due = False
        try:
            env.begin_reset()
            st.phase = 'reset'
            last_release = pacer.start()
            while True:
                work_end = time.monotonic()
                if after_tick is not None:
                    after_tick()
                if stop.is_set():
                    break
                timing = pacer.wait()
                prev_work = work_end - last_release
                last_release = timing.tick_time_s + timing.overrun_s
                st.ticks += 1
                st.tick_mark = (st.ticks, timing.tick_time_s)
                if cfg.fault_tick_delay_s and st.ticks > cfg.fault_after_ticks:
                    time.sleep(cfg.fault_tick_delay_s)
                st.missed_ticks += timing.missed
                if st.ticks > 1:
                    st.dt.add(timing.dt_s)
                if timing.overrun_s > st.max_overrun_s:
                    st.max_overrun_s = timing.overrun_s
                strike = overrun_dog.is_strike(timing.overrun_s)
                self.ticks.push_from_rt(
                    TickSample(timing.dt_s, timing.overrun_s, strike, prev_work)
                )
                try:
                    overrun_dog.check_from_rt(timing.overrun_s)
                except TimingViolation:
                    st.violations += 1
                    self.transitions.discard_held_from_rt()
                    raise
                finally:
                    st.strikes_total = overrun_dog.n_strikes_total
                # Held transitions are released once enough clean ticks confirm them.
                clean_streak = 0 if strike else clean_streak + 1
                if clean_streak >= holdback:
                    self.transitions.flush_held_from_rt()

                try:
                    if begin_reset_due:
                        env.begin_reset()
                        begin_reset_due = False
                        serial_errors_in_row = 0
                        continue
                    if not in_episode and reset_result is None:
                        done, settled = env.reset_step()
                        if done:
                            reset_result = settled  # the episode starts on the next tick
                        serial_errors_in_row = 0
                        continue
                    if not in_episode:
                        # First tick of an episode: observe at the tick, act at once.
                        obs = env.begin_episode()
                        in_episode = True
                        st.phase = 'episode'
                        episode = _Episode(settled=bool(reset_result))
                        reset_result = None
                    else:
                        assert obs is not None
                        next_obs, reward, terminated, truncated, info = env.observe_and_step()
                        episode.record_tick(timing, strike, info, env.config.balance_threshold_rad)
                        self._emit(episode, st, obs, next_obs, reward, terminated, truncated, info)
                        obs = next_obs
                        if terminated or truncated:
                            self._finish_episode(episode, terminated, st)
                            in_episode = False
                            if cfg.episodes and st.episodes >= cfg.episodes:
                                break
                            begin_reset_due = True
                            st.phase = 'reset'
                            serial_errors_in_row = 0
                            continue
                    actor = self.snapshot.read_from_rt()
                    noise = (
                        self._rng.standard_normal(actor.meta.action_size).astype(np.float32)
                        if cfg.stochastic_actions
                        else None
                    )
                    action = actor.act(obs, noise)
                    env.apply_action(action)
                    episode.last_action = action
                    episode.policy_version = actor.version
                    serial_errors_in_row = 0
                except RigDisconnected:
                    raise
                except RigError as exc:
                    st.serial_errors += 1
                    serial_errors_in_row += 1
                    if serial_errors_in_row >= cfg.max_serial_errors:
                        raise SerialFailure(
                            f'{serial_errors_in_row} consecutive serial errors, last: {exc}'
                        ) from exc
                    refused = (
                        isinstance(exc, RigProtocolError) and exc.error == ErrorCode.NOT_ENGAGED
                    )
                    if in_episode or refused:
                        # In an episode the transition chain is broken: drop its tail and
                        # reset. A refusal as not engaged means a stall outlasted the firmware
                        # deadman: every voltage would be refused until the error limit, so
                        # the reset starts over and engages again.
                        if in_episode:
                            self.transitions.discard_held_from_rt()
                        in_episode = False
                        begin_reset_due = True
                        reset_result = None
                        st.phase = 'reset'
            # A clean stop: nothing violated, so what is still held back is good data.
            self.transitions.flush_held_from_rt()
        finally:
            # Any other way out is a fault. What is still held back is released if the tick
            # timing since the last strike confirms it (as the next tick would have), else
            # withdrawn and counted; never left behind uncounted.
            if clean_streak >= holdback:
                self.transitions.flush_held_from_rt()
            else:
                self.transitions.discard_held_from_rt()
            st.phase = 'stopped'
            try:
                env.disengage_safely()
                self.motor_confirmed_off = True
            except RigError as exc:
                _log.error('disengage failed (%s); the firmware deadman will stop the motor', exc)

    def _emit(
        self,
        episode: _Episode,
        st: LoopStatus,
        obs: np.ndarray,
        next_obs: np.ndarray,
        reward: float,
        terminated: bool,
        truncated: bool,
        info: dict,
    ) -> None:
        dt = float(info['dt_s'])
        episode.ret += reward
        if abs(dt - self.env.config.period_s) > self.config.timing_violation_threshold_s:
            st.transitions_dropped_late += 1  # a stretched transition never leaves the node
            episode.dropped_late += 1
            return
        self.transitions.push_from_rt(
            Transition(
                episode=self.first_episode + st.episodes,
                step=self.env.episode_steps_done - 1,
                obs=obs,
                action=np.asarray(episode.last_action, dtype=np.float32).reshape(-1),
                reward=reward,
                next_obs=next_obs,
                terminated=terminated,
                truncated=truncated,
                dt_s=dt,
                policy_version=episode.policy_version,
            )
        )
        episode.published += 1

    def _finish_episode(self, episode: _Episode, terminated: bool, st: LoopStatus) -> None:
        summary = EpisodeSummary(
            episode=self.first_episode + st.episodes,
            n_ticks=episode.dt.n,
            dt_mean_s=episode.dt.mean,
            dt_std_s=episode.dt.std,
            max_overrun_s=max(episode.max_overrun_s, 0.0),
            n_strikes=episode.strikes,
            episode_return=episode.ret,
            balance_s=episode.best_balance_ticks * self.env.config.period_s,
            terminated=terminated,
            policy_version=episode.policy_version,
            transitions_published=episode.published,
            transitions_dropped_late=episode.dropped_late,
            settled=episode.settled,
        )
        st.episodes += 1
        self.episodes_out.push_from_rt(summary)


class _Episode:
    """Per-episode accumulators (control thread only)."""

    def __init__(self, settled: bool = True) -> None:
        self.settled = settled
        self.dt = RunningStats()
        self.max_overrun_s = -math.inf
        self.strikes = 0
        self.ret = 0.0
        self.balance_ticks = 0
        self.best_balance_ticks = 0
        self.last_action: np.ndarray = np.zeros(1, dtype=np.float32)
        self.policy_version = 0
        self.published = 0
        self.dropped_late = 0

    def record_tick(
        self, timing: TickTiming, strike: bool, info: dict, balance_threshold_rad: float
    ) -> None:
        self.dt.add(timing.dt_s)
        self.max_overrun_s = max(self.max_overrun_s, timing.overrun_s)
        self.strikes += strike
        if abs(info['phi']) < balance_threshold_rad:
            self.balance_ticks += 1
            self.best_balance_ticks = max(self.best_balance_ticks, self.balance_ticks)
        else:
            self.balance_ticks = 0
