"""The real-time control process: one Python thread that runs the control loop.

``python -m rip_control.rt.process --fd N --config JSON --sizes JSON --parent-pid PID`` -
started by the control node at configure (:class:`rip_control.rt.handle.RtHandle`, with an
:class:`RtConfig`), never by hand.

The problem it solves: a control thread inside the node process shares the GIL with the
rclpy executor, the publisher and weight decoding; when one of them holds the GIL and is
preempted, the control thread is released on time by the kernel and then waits. Here the
loop owns its interpreter. The process has exactly one thread (BLAS pools are limited to
one by the environment the node gives it) and imports neither rclpy nor DDS.

Everything it shares with the node goes through :class:`rip_control.rt.layout.RtChannels`
and never blocks: commands and weights in, events, transitions, tick samples and a status
record (with the heartbeat the node's hung-loop watchdog watches) out.

Safety: every way out of a run disengages the motor (the loop's ``finally``). The process
stops, disengages and exits when its node dies (``PR_SET_PDEATHSIG``), when the node's
heartbeat falls silent for ``node_timeout_s`` (a frozen node), or on SIGINT/SIGTERM/SIGHUP.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
import gc
import json
import logging
import os
import signal
import sys
import time
from typing import Any

from rip_control.policy import NumpyActor
from rip_control.procs import request_parent_death_signal
from rip_control.rig.client import LowLevelClient, RigError
from rip_control.rig.env import RealRotaryInvertedPendulumEnv, TaskConfig
from rip_control.rt.channels import SharedMemory
from rip_control.rt.guard import RegressionGuard
from rip_control.rt.layout import (
    TICK_RECORD,
    ChannelSizes,
    RtChannels,
    RtStatus,
    decode_json,
    decode_weights,
    encode_json,
)
from rip_control.rt.loop import ControlLoop, EpisodeSummary, LoopConfig, TickSample
from rip_control.rt.outbox import Outbox
from rip_control.rt.realtime import hold_cpu_latency, is_fifo, lock_memory, pin_to_cpu, set_fifo
from rip_control.transitions import Transition

IDLE_POLL_S = 0.002
EXIT_NODE_LOST = 3
EXIT_START_FAILED = 4

# Environment for the RT process: thread pools of one (a BLAS pool would be more threads).
SINGLE_THREAD_ENV = {
    'OPENBLAS_NUM_THREADS': '1',
    'OMP_NUM_THREADS': '1',
    'MKL_NUM_THREADS': '1',
    'NUMEXPR_NUM_THREADS': '1',
    'VECLIB_MAXIMUM_THREADS': '1',
}


@dataclass(frozen=True)
class RtConfig:
    """What the real-time process runs with: one value, built by the node, sent as JSON.

    :param task: the task (rate, episode length, limits).
    :param loop: the loop settings.
    :param serial_port: the rig device the process opens.
    :param serial_timeout_s: bound on one serial transaction.
    :param cpu: the CPU it is pinned to.
    :param fifo_priority: its SCHED_FIFO priority (0: normal scheduling).
    :param switch_interval_s: its Python switch interval.
    :param gc_off: freeze and disable its garbage collector.
    :param node_timeout_s: node silence after which it disengages and exits.
    :param cpu_idle_latency_us: the idle exit latency it holds for every CPU while it runs
        (-1: none; see :func:`rip_control.rt.realtime.hold_cpu_latency`).
    """

    task: TaskConfig
    loop: LoopConfig
    serial_port: str
    serial_timeout_s: float
    cpu: int
    fifo_priority: int
    switch_interval_s: float
    gc_off: bool
    node_timeout_s: float
    cpu_idle_latency_us: int = -1

    def to_json(self) -> str:
        """The text the process is started with."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RtConfig:
        """:meth:`to_json`'s value back."""
        d = json.loads(text)
        return cls(**{**d, 'task': TaskConfig(**d['task']), 'loop': LoopConfig(**d['loop'])})


class _Stop:
    """The loop's stop flag: a signal, a ``stop``/``quit`` command, or a silent node."""

    def __init__(self, rt: RtControl) -> None:
        self._rt = rt

    def is_set(self) -> bool:
        return self._rt.poll_stop()


class _RingOutbox(Outbox[Any]):
    """The loop's outbox whose released items go into a shared-memory ring (never blocks)."""

    def __init__(self, ring: Any, encode: Any, holdback: int = 0) -> None:
        super().__init__(capacity=ring.capacity, holdback=holdback)
        self._ring = ring
        self._encode = encode

    def _release(self, item: Any) -> None:
        if not self._ring.push(self._encode(item)):
            self.n_dropped_full += 1


def _encode_transition(t: Transition) -> bytes:
    return t.pack().tobytes()


def _encode_tick(t: TickSample) -> bytes:
    return TICK_RECORD.pack(t.dt_s, t.overrun_s, t.prev_work_s, t.strike)


class _EventLog(logging.Handler):
    """Library log records (the loop's, the client's) become ``log`` events for the node."""

    def __init__(self, rt: RtControl) -> None:
        super().__init__(logging.INFO)
        self._rt = rt

    def emit(self, record: logging.LogRecord) -> None:
        self._rt.event('log', level=record.levelname.lower(), text=record.getMessage())


class RtControl:
    """The RT process's state: its channels, the rig, the current actor, its counters.

    :param ch: the channels (RT side).
    :param config: what the node sent.
    """

    def __init__(self, ch: RtChannels, config: RtConfig) -> None:
        self.ch = ch
        self.task = config.task
        self.loop_config = config.loop
        # The regression guard's live actor and best evaluation outlive an activation.
        self.guard: RegressionGuard[NumpyActor] = self.loop_config.guard(self.task)
        self.config = config
        self.node_timeout_s = config.node_timeout_s
        self.status = RtStatus()
        self.client: LowLevelClient | None = None
        self.loop: ControlLoop | None = None
        self.signalled = False
        self.quit = False
        self.node_lost = False
        self._stop_run = False
        self._stop_ids: list[Any] = []  # ids of the stop commands the next 'stopped' answers
        self._activate: dict[str, Any] | None = None
        self._node_beat = (ch.node_beat.read(), time.monotonic())
        self.actor: NumpyActor | None = None

    # -- channels ----------------------------------------------------------------------------

    def event(self, name: str, /, **fields: Any) -> None:
        """Send an event to the node (dropped and counted if its ring is full)."""
        self.ch.events.push(encode_json({'event': name, **fields}))

    def _node_silent(self, now: float) -> bool:
        beat = self.ch.node_beat.read()
        if beat != self._node_beat[0]:
            self._node_beat = (beat, now)
            return False
        return now - self._node_beat[1] > self.node_timeout_s

    def poll_stop(self) -> bool:
        """Whether the current run must stop (checked once per tick and while idle)."""
        if self.signalled or self.quit or self._stop_run:
            return True
        now = time.monotonic()
        if self._node_silent(now):
            self.node_lost = True
            return True
        cmd = self.ch.commands.pop()
        if cmd is not None:
            self._on_command(decode_json(cmd))
        return self.signalled or self.quit or self._stop_run

    def _on_command(self, cmd: dict[str, Any]) -> None:
        kind = cmd.get('cmd')
        if kind == 'activate':
            self._activate = cmd
        elif kind == 'stop':
            self._stop_run = True
            self._stop_ids.append(cmd.get('id'))
        elif kind == 'quit':
            self.quit = True
        else:
            self.event('log', level='error', text=f'unknown command {cmd!r} ignored')

    def swap_weights(self) -> NumpyActor:
        """The actor for this tick: a newer one from the node, if complete, else the current."""
        t0 = time.perf_counter()
        got = self.ch.weights.read_if_newer()
        if got is not None:
            actor = decode_weights(got[1])  # views into the one copy read_if_newer made
            cost = time.perf_counter() - t0
            if self.actor is None or actor.version > self.actor.version:
                self.actor = actor
                st = self.status
                st.policy_version = actor.version
                st.policy_swapped_at_s = time.monotonic()
                st.swap_last_s = cost
                st.swap_max_s = max(st.swap_max_s, cost)
        assert self.actor is not None
        return self.actor

    def write_status(self) -> None:
        """Publish the counters and the heartbeat (every tick, and while idle)."""
        st = self.status
        loop = self.loop
        if loop is not None:
            ls = loop.status
            st.ticks = ls.ticks
            st.last_tick_s = ls.tick_mark[1]
            st.missed_ticks = ls.missed_ticks
            st.dt_n = ls.dt.n
            st.dt_mean_s = ls.dt.mean
            st.dt_std_s = ls.dt.std
            st.max_overrun_s = ls.max_overrun_s
            st.strikes_total = ls.strikes_total
            st.violations = ls.violations
            st.serial_errors = ls.serial_errors
            st.episodes = ls.episodes
            st.phase = RtStatus.PHASES.index(ls.phase) if ls.phase in RtStatus.PHASES else 0
            st.transitions_queued = loop.transitions.n_pushed
            st.transitions_dropped_full = loop.transitions.n_dropped_full
            st.transitions_withdrawn = loop.transitions.n_discarded
            st.transitions_dropped_late = ls.transitions_dropped_late
            st.ticks_dropped = loop.ticks.n_dropped_full
        if self.client is not None:
            stats = self.client.stats
            st.serial_timeouts = stats.timeouts
            st.serial_stale_replies = stats.stale_replies
            st.serial_bad_frames = self.client.parser_errors
            st.serial_bytes_skipped = self.client.bytes_skipped
        st.weights_torn = self.ch.weights.n_torn
        st.beat += 1
        st.written_at_s = time.monotonic()
        self.ch.status.write(st.pack())

    # -- life --------------------------------------------------------------------------------

    def realtime_setup(self) -> list[str]:
        """Lock memory, pin, SCHED_FIFO, freeze the collector; a note per step."""
        cfg = self.config
        notes = [lock_memory() or 'memory locked']  # at normal priority, before FIFO
        notes.append(pin_to_cpu(cfg.cpu) or f'pinned to cpu {cfg.cpu}')
        notes.append(hold_cpu_latency(cfg.cpu_idle_latency_us))
        if cfg.fifo_priority > 0:
            notes.append(set_fifo(cfg.fifo_priority) or f'SCHED_FIFO {cfg.fifo_priority}')
        sys.setswitchinterval(cfg.switch_interval_s)
        if cfg.gc_off:
            gc.collect()
            gc.freeze()
            gc.disable()
            notes.append('gc frozen and off')
        notes.append(f'pid {os.getpid()}, one thread')
        return notes

    def open_rig(self) -> dict[str, Any]:
        """Open the serial port and disengage; the device's info."""
        client = LowLevelClient(self.config.serial_port, timeout_s=self.config.serial_timeout_s)
        try:
            info = client.open()
            client.disengage_motor()
        except RigError:
            client.close()
            raise
        self.client = client
        return {'protocol_version': info.protocol_version, 'deadman_ms': info.deadman_timeout_ms}

    def disengage(self) -> tuple[bool, str]:
        """A disengage outside a run (a stop while idle): whether the rig confirmed it."""
        if self.client is None or not self.client.is_open:
            return True, 'no rig open'
        try:
            self.client.disengage_motor()
        except RigError as exc:
            return False, f'{type(exc).__name__}: {exc}'
        return True, ''

    def run_once(
        self, first_episode: int, train_episodes_done: int = 0, excitation_episodes_done: int = 0
    ) -> None:
        """One activation: engage, run episodes until stopped or faulted, disengage.

        :param train_episodes_done: by earlier activations (a re-activation after a trip runs
            only the training episodes still owed).
        :param excitation_episodes_done: likewise, the excitation episodes.
        """
        assert self.client is not None
        holdback = self.loop_config.max_strikes - 1
        env = RealRotaryInvertedPendulumEnv(self.client, self.task)
        transitions = _RingOutbox(self.ch.transitions, _encode_transition, holdback=holdback)
        ticks = _RingOutbox(self.ch.ticks, _encode_tick)
        episodes = _EpisodeEvents(self)
        self.loop = loop = ControlLoop(
            env,
            self.loop_config,
            self,
            transitions,
            ticks,
            episodes,
            first_episode=first_episode,
            train_episodes_done=train_episodes_done,
            guard=self.guard,
            excitation_episodes_done=excitation_episodes_done,
        )
        self.status.activation += 1
        self.status.motor_confirmed_off = 0
        fault: dict[str, str] | None = None
        try:
            loop.run(_Stop(self), after_tick=self.write_status)
        except Exception as exc:  # noqa: BLE001 - every fault goes to the node, named
            fault = {'type': type(exc).__name__, 'message': str(exc)}
        confirmed = loop.motor_confirmed_off
        detail = ''
        if not confirmed:  # the loop's own disengage failed: try once more
            confirmed, detail = self.disengage()
        self.write_status()  # the run's final counters
        self.loop = None
        self.status.motor_confirmed_off = int(confirmed)
        self.status.phase = RtStatus.PHASES.index('idle')
        self.write_status()
        answers, self._stop_ids = self._stop_ids, []
        self._stop_run = False  # the stop (if one ended the run) is answered here
        self.event(
            'stopped',
            fault=fault,
            confirmed=confirmed,
            detail=detail,
            ids=answers,
            activation=self.status.activation,
        )

    def read_from_rt(self) -> NumpyActor:
        """The policy hand-off the loop reads once per tick (see :meth:`swap_weights`)."""
        return self.swap_weights()

    def serve(self) -> int:
        """Idle between runs, run on ``activate``, exit on ``quit``, a signal or a lost node."""
        while True:
            self.write_status()
            stop = self.poll_stop()
            if self._activate is not None and not (self.signalled or self.quit or self.node_lost):
                cmd, self._activate = self._activate, None
                if not self._stop_run:  # (a stop that came after it: the run never begins)
                    self.run_once(
                        int(cmd.get('first_episode', 0)),
                        int(cmd.get('train_episodes_done', 0)),
                        int(cmd.get('excitation_episodes_done', 0)),
                    )
                    continue
            if self._stop_run:  # a stop while idle: disengage again, answer
                self._stop_run = False
                confirmed, detail = self.disengage()
                if confirmed:
                    self.status.motor_confirmed_off = 1
                self.write_status()
                answers, self._stop_ids = self._stop_ids, []
                self.event(
                    'stopped',
                    fault=None,
                    confirmed=confirmed,
                    detail=detail,
                    ids=answers,
                    activation=self.status.activation,
                )
                continue
            if stop:
                break
            time.sleep(IDLE_POLL_S)
        confirmed, detail = self.disengage()
        self.status.motor_confirmed_off = int(confirmed)
        self.status.phase = RtStatus.PHASES.index('stopped')
        self.write_status()
        why = 'node lost' if self.node_lost else 'signal' if self.signalled else 'quit'
        self.event('exit', why=why, confirmed=confirmed, detail=detail)
        if self.client is not None:
            self.client.close()
        if self.node_lost:
            return EXIT_NODE_LOST
        return 0 if confirmed else 1


class _EpisodeEvents(Outbox[EpisodeSummary]):
    """Episode summaries straight out as ``episode`` events."""

    def __init__(self, rt: RtControl) -> None:
        super().__init__(capacity=1)
        self._rt = rt

    def push_from_rt(self, item: EpisodeSummary) -> None:
        self.n_pushed += 1
        self._rt.event('episode', **asdict(item))


def _die_with_parent(parent_pid: int) -> bool:
    """Ask for SIGTERM when the parent dies; ``False`` if it already has."""
    request_parent_death_signal(signal.SIGTERM)
    return os.getppid() == parent_pid


def main(argv: list[str] | None = None) -> int:
    """Entry point of the RT process (started by the node)."""
    p = argparse.ArgumentParser(prog='rip_control.rt.process')
    p.add_argument('--fd', type=int, required=True, help='the shared memory descriptor')
    p.add_argument('--config', required=True, help="the node's RtConfig, as JSON")
    p.add_argument('--sizes', required=True, help='the channel sizes (ChannelSizes), as JSON')
    p.add_argument('--parent-pid', type=int, required=True, help='the node')
    a = p.parse_args(argv)
    config = RtConfig.from_json(a.config)
    rt_holder: list[RtControl] = []
    early: list[int] = []  # a signal before the state exists is kept, not lost

    def on_signal(signum: int, frame: object) -> None:
        if rt_holder:
            rt_holder[0].signalled = True
        else:
            early.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    if not _die_with_parent(a.parent_pid):
        return EXIT_NODE_LOST
    sizes = ChannelSizes(**json.loads(a.sizes))
    shm = SharedMemory(RtChannels.bytes_needed(sizes), fd=a.fd)
    ch = RtChannels(shm.buf, sizes)
    rt = RtControl(ch, config)
    rt.signalled = bool(early)
    rt_holder.append(rt)
    logging.basicConfig(level=logging.WARNING, handlers=[_EventLog(rt)], force=True)
    rt.write_status()
    try:
        rt.guard.start(rt.swap_weights())
    except (AssertionError, ValueError) as exc:
        rt.event('failed', message=f'no usable initial weights in the shared memory ({exc})')
        return EXIT_START_FAILED
    notes = rt.realtime_setup()
    try:
        info = rt.open_rig()
    except RigError as exc:
        rt.event('failed', message=f'{type(exc).__name__}: {exc}')
        return EXIT_START_FAILED
    rt.status.phase = RtStatus.PHASES.index('idle')
    rt.event('ready', realtime=notes, fifo=is_fifo(), **info)
    return rt.serve()


if __name__ == '__main__':
    sys.exit(main())
