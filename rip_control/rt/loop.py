"""The control loop's work, free of ROS: pace, read, act, hand off — every tick.

:class:`ControlLoop.run` is the body of the real-time process (:mod:`rip_control.rt.process`),
its one thread. Each tick it waits for its absolute deadline, checks the 3-strike rule, reads
the rig, completes the previous transition, runs the policy and writes the action. Between
episodes the same paced ticks drive the reset controller (not recorded, not policy-driven);
the phases are an explicit state machine (:class:`Phase`). It never waits on the learner, on
DDS or on a lock a slow path can hold: transitions, tick samples and episode summaries leave
through :class:`~rip_control.rt.outbox.Outbox` objects whose items go into shared-memory rings.

Every way out of :meth:`ControlLoop.run` — a stop request, a timing violation, a serial
failure, any exception — passes through one ``finally`` that disengages the motor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
import enum
import logging
import math
import time
from typing import ClassVar, Protocol

import numpy as np

from rip_control.params import CONTROL_PARAMETERS, From, FromParams, Param
from rip_control.policy import NumpyActor
from rip_control.rig.client import (
    RigClockJump,
    RigDisconnected,
    RigEngageRefused,
    RigError,
    RigProtocolError,
)
from rip_control.rig.env import RealRotaryInvertedPendulumEnv, TaskConfig
from rip_control.rig.excitation import Excitation, ExcitationDesign
from rip_control.rig.protocol import ErrorCode
from rip_control.rt.guard import EpisodeBounds, RegressionGuard
from rip_control.rt.outbox import Outbox
from rip_control.rt.pacer import Pacer, TickTiming
from rip_control.rt.watchdog import OverrunWatchdog, TimingViolation
from rip_control.telemetry import EPISODE_KINDS, RunningStats
from rip_control.transitions import EXCITATION_VERSION, Transition

_log = logging.getLogger(__name__)


class Phase(enum.Enum):
    """Where the loop is; each tick does one step of the current phase.

    ``BEGIN_RESET`` -> ``RESETTING`` -> ``EPISODE_START`` -> ``EPISODE`` -> ``BEGIN_RESET`` ...
    and ``STOPPING`` from anywhere (a stop request, ``episodes`` done, a fault).
    """

    BEGIN_RESET = 'begin_reset'  # engage and start the reset controller (serial traffic)
    RESETTING = 'resetting'  # the reset controller, until the rig is quiet or it times out
    EPISODE_START = 'episode_start'  # first observation; the policy acts at once
    EPISODE = 'episode'  # observe, complete the transition, act
    STOPPING = 'stopping'

    @property
    def status_name(self) -> str:
        """The phase as :class:`LoopStatus` and the diagnostics name it."""
        if self in (Phase.BEGIN_RESET, Phase.RESETTING, Phase.EPISODE_START):
            return 'reset'
        return 'episode' if self is Phase.EPISODE else 'stopped'


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
class LoopConfig(FromParams):
    """Settings of the control loop (the task itself lives in the env's TaskConfig).

    Every field but ``spin_s`` is a control node parameter, its default in
    :data:`rip_control.params.CONTROL_PARAMETERS` (build one with :meth:`from_params`).

    :param timing_violation_threshold_s: overrun that counts as a strike; also the largest
        |dt - period| a transition may have and still be published.
    :param max_strikes: consecutive strikes that trip the watchdog.
    :param hung_timeout_s: silence after which the hung-loop watchdog disengages.
    :param max_serial_errors: consecutive failed ticks before giving up.
    :param stochastic_actions: sample from the policy (exploration) instead of its mean.
    :param train_noise_scale: multiplies the policy's standard deviation when a training
        episode samples an action (1: SAC's own sampling; 0: the mean action). SAC learns
        off-policy, so narrower sampling changes what is tried, not how it is learnt from.
    :param episodes: stop after this many training episodes (0: until stopped); the
        regression guard's evaluation episodes are not counted.
    :param excitation_episodes: excitation episodes (:mod:`rip_control.rig.excitation`)
        before the first training episode; not counted in ``episodes``.
    :param seed: seed of the exploration noise.
    :param fault_tick_delay_s: FAULT INJECTION for tests, never on a rig: stretch every tick's
        work by this long once ``fault_after_ticks`` ticks have run (0: off).
    :param fault_after_ticks: see ``fault_tick_delay_s``.
    :param eval_every_episodes: the regression guard (:mod:`rip_control.rt.guard`): a newer
        actor is evaluated after this many training episodes and drives only if it passes
        (0: off, the newest actor drives at once).
    :param eval_margin: how far below the best evaluation return a candidate may score and
        still go live, as a fraction of it.
    :param eval_best_margin: how far above the best evaluation return a candidate must score
        to become the best (:class:`~rip_control.rt.guard.RegressionGuard`).
    :param eval_balance_margin: how far below the longest balance an evaluation that went
        live has shown a candidate's may be and still go live, as a fraction of it (1: no
        requirement).
    :param eval_episode_s: length of an evaluation episode, shorter or longer than a
        training episode (0: as long).
    :param eval_episodes: evaluation episodes per evaluation, judged on their means.
    :param spin_s: busy-wait window of the pacer (not a parameter).
    """

    TABLE: ClassVar[tuple[Param, ...]] = CONTROL_PARAMETERS
    PARAMS: ClassVar[Mapping[str, From]] = {
        'timing_violation_threshold_s': From('timing_violation_threshold_ms', 1e-3),
        'hung_timeout_s': From('hung_timeout_ms', 1e-3),
        'fault_tick_delay_s': From('fault_tick_delay_ms', 1e-3),
        'eval_episode_s': From('eval_episode_seconds'),
    }

    timing_violation_threshold_s: float
    max_strikes: int
    hung_timeout_s: float
    max_serial_errors: int
    stochastic_actions: bool
    train_noise_scale: float
    episodes: int
    excitation_episodes: int
    seed: int
    fault_tick_delay_s: float
    fault_after_ticks: int
    eval_every_episodes: int
    eval_margin: float
    eval_best_margin: float
    eval_balance_margin: float
    eval_episode_s: float
    eval_episodes: int
    spin_s: float = 0.001

    def __post_init__(self) -> None:
        self.guard()  # raises on bad values
        if not self.eval_episode_s >= 0:
            raise ValueError(f'eval_episode_s must be >= 0, got {self.eval_episode_s}')
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
        if self.excitation_episodes < 0:
            raise ValueError(f'excitation_episodes must be >= 0, got {self.excitation_episodes}')
        if not 0.0 <= self.train_noise_scale <= 1.0:
            raise ValueError(f'train_noise_scale must be in [0, 1], got {self.train_noise_scale}')

    def guard(self, task: TaskConfig | None = None) -> RegressionGuard[NumpyActor]:
        """A regression guard with these settings.

        Given the task, it knows the most an evaluation episode can score, and an evaluation
        whose rejection is certain ends before its last episode.
        """
        bounds = None
        if task is not None:
            steps = self.eval_steps(task) or task.episode_steps
            bounds = EpisodeBounds(task.most_return(steps), steps * task.period_s)
        return RegressionGuard(
            self.eval_every_episodes,
            self.eval_margin,
            self.eval_best_margin,
            self.eval_balance_margin,
            self.eval_episodes,
            bounds,
        )

    def eval_steps(self, task: TaskConfig) -> int:
        """Steps of an evaluation episode (0: as many as a training episode's)."""
        return round(self.eval_episode_s * task.rate_hz)


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
    """What one episode did; the node turns it into a timing.csv row and a topic message.

    ``kind`` is one of :data:`~rip_control.telemetry.EPISODE_KINDS`. An evaluation episode was
    driven by its actor's mean action (its transitions are sent like any); an excitation
    episode by the excitation input (its transitions carry ``policy_version`` -1);
    ``verdict`` is the guard's (``baseline``, ``promoted``, ``rejected``; ``pending`` before
    an evaluation's last episode). ``eval_score`` and ``eval_balance_s`` are what the verdict
    judged (the means over the evaluation's episodes; NaN before its last),
    ``eval_bar`` and ``eval_balance_bar_s`` what an evaluated candidate had to reach, and
    ``eval_missed`` which of them a rejected one missed (``return`` or ``balance``),
    ``eval_judged`` of ``eval_planned`` the episodes it judged (fewer when the rejection was
    certain before the last; 0 before the last);
    ``live_version``, ``best_version``, ``best_score`` and ``balance_reference_s`` are the
    guard's state after it (with the guard off the live policy is the one the loop started
    with, and the rest -1 and NaN).
    """

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
    kind: str = 'training'
    verdict: str = ''
    eval_bar: float = math.nan
    eval_balance_bar_s: float = math.nan
    eval_missed: str = ''
    eval_score: float = math.nan
    eval_balance_s: float = math.nan
    live_version: int = -1
    best_version: int = -1
    best_score: float = math.nan
    balance_reference_s: float = math.nan
    reset_s: float = math.nan  # the reset before the episode, rig seconds (ticks x period)
    eval_judged: int = 0
    eval_planned: int = 0

    def __post_init__(self) -> None:
        if self.kind not in EPISODE_KINDS:
            raise ValueError(f'episode kind {self.kind!r} is none of {EPISODE_KINDS}')

    @property
    def evaluation(self) -> bool:
        """Whether the regression guard's evaluation drove it."""
        return self.kind == 'evaluation'


class LoopStatus:
    """Counters the loop updates (the RT process copies them into its status record)."""

    def __init__(self) -> None:
        self.ticks = 0
        self.missed_ticks = 0
        self.dt = RunningStats()  # since activation
        self.max_overrun_s = 0.0
        self.strikes_total = 0
        self.violations = 0
        self.serial_errors = 0
        self.episodes = 0  # every episode (their numbers)
        self.train_episodes = 0  # ... of them, training episodes (what ``episodes`` counts)
        self.eval_episodes = 0
        self.excitation_episodes = 0
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
    :param train_episodes_done: training episodes earlier activations ran: ``episodes``
        counts over all of them, so a re-activation runs only those still owed.
    :param excitation_episodes_done: excitation episodes earlier activations ran (likewise).
    :param guard: the regression guard's state, kept across activations by the caller
        (default: a new one from ``config``).
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
        train_episodes_done: int = 0,
        guard: RegressionGuard[NumpyActor] | None = None,
        excitation_episodes_done: int = 0,
    ) -> None:
        self.env = env
        self.guard: RegressionGuard[NumpyActor] = guard or config.guard(env.config)
        self.first_episode = first_episode
        self.train_episodes_done = train_episodes_done
        self.excitation_episodes_done = excitation_episodes_done
        task = env.config
        self._excitation = Excitation(ExcitationDesign(), task.rate_hz, task.max_action_v)
        self.config = config
        self.snapshot = snapshot
        self.transitions = transitions
        self.ticks = ticks
        self.episodes_out = episodes
        self.status = LoopStatus()
        self.motor_confirmed_off = False  # the rig answered the loop's last disengage
        self._rng = np.random.default_rng(config.seed)
        self._noise_scale = np.float32(config.train_noise_scale)
        self.phase = Phase.STOPPING
        self._episode = _Episode()
        self._obs: np.ndarray = np.zeros(0, dtype=np.float32)
        self._settled = False
        self._reset_ticks = 0  # the ticks of the reset before the next episode
        self._clean_streak = 0
        self._errors_in_row = 0

    def run(self, stop: StopFlag, after_tick: Callable[[], None] | None = None) -> None:
        """Run until ``stop`` is set or ``episodes`` are done; raise on any fault.

        Every tick, whatever the phase: wait for the deadline, the 3-strike check, release the
        held transitions that clean ticks confirm; then one step of the phase (see
        :class:`Phase`). A serial error in an episode (or a refusal as not engaged) cuts the
        episode and starts a reset on the next tick; ``max_serial_errors`` in a row end the run.

        :param stop: polled once per tick, before the wait.
        :param after_tick: called once per tick after its work, before the wait (the RT
            process publishes its status and heartbeat there).
        :raises TimingViolation: the 3-strike rule tripped.
        :raises SerialFailure: consecutive serial errors beyond the limit.
        :raises RigDisconnected: the serial device vanished.
        """
        cfg, env, st = self.config, self.env, self.status
        pacer = Pacer(env.config.period_s, spin_s=cfg.spin_s)
        overrun_dog = OverrunWatchdog(cfg.timing_violation_threshold_s, cfg.max_strikes)
        holdback = self.transitions.holdback
        self._clean_streak = 0
        self._errors_in_row = 0
        try:
            # The first engage too happens on a tick, inside the serial-error handling: a rig
            # slow to answer it once is retried like any other tick, not a failed activation.
            self._enter(Phase.STOPPING if self._all_episodes_done() else Phase.BEGIN_RESET)
            last_release = pacer.start()
            while self.phase is not Phase.STOPPING:
                work_end = time.monotonic()
                if after_tick is not None:
                    after_tick()
                if stop.is_set():
                    self._enter(Phase.STOPPING)
                    break
                timing = pacer.wait()
                prev_work = work_end - last_release
                last_release = timing.tick_time_s + timing.overrun_s
                strike = self._account_tick(timing, prev_work, overrun_dog)
                self._clean_streak = 0 if strike else self._clean_streak + 1
                if self._clean_streak >= holdback:
                    # Held transitions are released once enough clean ticks confirm them.
                    self.transitions.flush_held_from_rt()
                try:
                    self._step(timing, strike)
                    self._errors_in_row = 0
                except (RigDisconnected, RigEngageRefused, RigClockJump):
                    raise  # not a link hiccup: the rig gone, its stop pressed, or it reset
                except RigError as exc:
                    self._on_serial_error(exc)
            # A clean stop: nothing violated, so what is still held back is good data.
            self.transitions.flush_held_from_rt()
        finally:
            # Any other way out is a fault. What is still held back is released if the tick
            # timing since the last strike confirms it (as the next tick would have), else
            # withdrawn and counted; never left behind uncounted.
            if self._clean_streak >= holdback:
                self.transitions.flush_held_from_rt()
            else:
                self.transitions.discard_held_from_rt()
            self._enter(Phase.STOPPING)
            st.phase = 'stopped'
            try:
                env.disengage_safely()
                self.motor_confirmed_off = True
            except RigError as exc:
                _log.error('disengage failed (%s); the firmware deadman will stop the motor', exc)

    def _excitation_owed(self) -> bool:
        done = self.excitation_episodes_done + self.status.excitation_episodes
        return done < self.config.excitation_episodes

    def _all_episodes_done(self) -> bool:
        owed = self.config.episodes
        return 0 < owed <= self.train_episodes_done + self.status.train_episodes

    def _enter(self, phase: Phase) -> None:
        self.phase = phase
        self.status.phase = phase.status_name

    def _account_tick(self, timing: TickTiming, prev_work: float, dog: OverrunWatchdog) -> bool:
        """Counters, the tick sample and the 3-strike check of one tick; whether it struck.

        :raises TimingViolation: this was the last strike (the held transitions withdrawn).
        """
        cfg, st = self.config, self.status
        st.ticks += 1
        st.tick_mark = (st.ticks, timing.tick_time_s)
        if cfg.fault_tick_delay_s and st.ticks > cfg.fault_after_ticks:
            time.sleep(cfg.fault_tick_delay_s)
        st.missed_ticks += timing.missed
        if st.ticks > 1:
            st.dt.add(timing.dt_s)
        if timing.overrun_s > st.max_overrun_s:
            st.max_overrun_s = timing.overrun_s
        strike = dog.is_strike(timing.overrun_s)
        self.ticks.push_from_rt(TickSample(timing.dt_s, timing.overrun_s, strike, prev_work))
        try:
            dog.check_from_rt(timing.overrun_s)
        except TimingViolation:
            st.violations += 1
            self.transitions.discard_held_from_rt()
            raise
        finally:
            st.strikes_total = dog.n_strikes_total
        return strike

    def _step(self, timing: TickTiming, strike: bool) -> None:
        """The phase's work for one tick (serial I/O: may raise :class:`RigError`)."""
        env, phase = self.env, self.phase
        if phase is Phase.BEGIN_RESET:
            env.begin_reset()  # engage and first read, on a tick of its own
            self._reset_ticks = 1
            self._enter(Phase.RESETTING)
        elif phase is Phase.RESETTING:
            done, settled = env.reset_step()
            self._reset_ticks += 1
            if done:
                self._settled = settled
                self._enter(Phase.EPISODE_START)  # the episode starts on the next tick
        elif phase is Phase.EPISODE_START:
            # First tick of an episode: observe at the tick, act at once.
            self._obs = env.begin_episode()
            if self._excitation_owed():
                self._episode = _Episode(settled=self._settled, kind='excitation')
            else:
                evaluation, actor = self.guard.next_episode(self.snapshot.read_from_rt())
                self._episode = _Episode(
                    settled=self._settled,
                    kind='evaluation' if evaluation else 'training',
                    actor=actor if self.guard.enabled else None,
                )
            self._episode.reset_s = self._reset_ticks * env.config.period_s
            self._enter(Phase.EPISODE)
            self._act()
        else:  # Phase.EPISODE
            episode = self._episode
            next_obs, reward, terminated, truncated, info = env.observe_and_step()
            episode.record_tick(timing, strike, info, env.config.balance_threshold_rad)
            if episode.kind == 'excitation' and not terminated:
                truncated = self._excitation.steps <= env.episode_steps_done  # its own length
            eval_steps = self.config.eval_steps(env.config)
            if episode.evaluation and not terminated and eval_steps > 0:
                # Its own length, shorter or longer than a training episode's.
                truncated = eval_steps <= env.episode_steps_done
            self._emit(
                episode, self.status, self._obs, next_obs, reward, terminated, truncated, info
            )
            self._obs = next_obs
            if terminated or truncated:
                self._finish_episode(episode, terminated, self.status)
                done = self._all_episodes_done()
                self._enter(Phase.STOPPING if done else Phase.BEGIN_RESET)
                return
            self._act()

    def _act(self) -> None:
        episode = self._episode
        if episode.kind == 'excitation':  # no actor drives it
            action = self._excitation.action(self.env.episode_steps_done, self._obs)
            self.env.apply_action(action)
            episode.last_action = action
            episode.policy_version = EXCITATION_VERSION
            return
        latest = self.snapshot.read_from_rt()  # every tick: a newer actor swaps in here
        actor = episode.actor or latest  # the guard's choice, if it is on
        noise = None
        if self.config.stochastic_actions and not episode.evaluation:
            noise = self._rng.standard_normal(actor.meta.action_size).astype(np.float32)
            if self._noise_scale != 1.0:  # 1: bit for bit SAC's own sample
                noise *= self._noise_scale
        action = actor.act(self._obs, noise)
        self.env.apply_action(action)
        self._episode.last_action = action
        self._episode.policy_version = actor.version

    def _on_serial_error(self, exc: RigError) -> None:
        """Count a failed tick; cut a broken episode; give up after too many in a row."""
        st = self.status
        st.serial_errors += 1
        self._errors_in_row += 1
        if self._errors_in_row >= self.config.max_serial_errors:
            raise SerialFailure(
                f'{self._errors_in_row} consecutive serial errors, last: {exc}'
            ) from exc
        refused = isinstance(exc, RigProtocolError) and exc.error == ErrorCode.NOT_ENGAGED
        if self.phase is Phase.EPISODE or refused:
            # In an episode the transition chain is broken: drop its tail and reset. A refusal
            # as not engaged means a stall outlasted the firmware deadman: every voltage would
            # be refused until the error limit, so the reset starts over and engages again.
            if self.phase is Phase.EPISODE:
                self.transitions.discard_held_from_rt()
            self._enter(Phase.BEGIN_RESET)
        # Otherwise (a reset step, the start of an episode) the same step is tried again.

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
        # An evaluation's transitions are training data too: SAC learns off-policy, and they are
        # the only place the learner sees what its own candidate does. Without them, once the
        # guard rejects, the buffer holds only the live policy's narrow data and the critic's
        # extrapolation beyond it is never corrected (a two-rig soak collapsed that way).
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
        guard = self.guard
        verdict = None
        balance_s = episode.best_balance_ticks * self.env.config.period_s
        if episode.evaluation:
            verdict = guard.judge(episode.ret, balance_s)
            st.eval_episodes += 1
        elif episode.kind == 'excitation':
            st.excitation_episodes += 1
        else:
            guard.finish_training()
            st.train_episodes += 1
        summary = EpisodeSummary(
            episode=self.first_episode + st.episodes,
            n_ticks=episode.dt.n,
            dt_mean_s=episode.dt.mean,
            dt_std_s=episode.dt.std,
            max_overrun_s=max(episode.max_overrun_s, 0.0),
            n_strikes=episode.strikes,
            episode_return=episode.ret,
            balance_s=balance_s,
            terminated=terminated,
            policy_version=episode.policy_version,
            transitions_published=episode.published,
            transitions_dropped_late=episode.dropped_late,
            settled=episode.settled,
            kind=episode.kind,
            verdict=verdict.kind if verdict else '',
            eval_bar=verdict.bar if verdict else math.nan,
            eval_balance_bar_s=verdict.balance_bar_s if verdict else math.nan,
            eval_missed=verdict.missed if verdict else '',
            eval_score=verdict.score if verdict and verdict.kind != 'pending' else math.nan,
            eval_balance_s=(
                verdict.balance_s if verdict and verdict.kind != 'pending' else math.nan
            ),
            live_version=guard.live_version,
            best_version=guard.best_version,
            best_score=guard.best_score,
            balance_reference_s=guard.balance_reference_s,
            reset_s=episode.reset_s,
            eval_judged=verdict.episodes if verdict and verdict.kind != 'pending' else 0,
            eval_planned=verdict.planned if verdict and verdict.kind != 'pending' else 0,
        )
        st.episodes += 1
        self.episodes_out.push_from_rt(summary)


class _Episode:
    """Per-episode accumulators (the loop's own)."""

    def __init__(
        self, settled: bool = True, kind: str = 'training', actor: NumpyActor | None = None
    ) -> None:
        self.settled = settled
        self.kind = kind
        self.evaluation = kind == 'evaluation'
        self.actor = actor  # None: the newest actor, tick by tick
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
        self.reset_s = math.nan  # the reset before it (set by the loop)

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
