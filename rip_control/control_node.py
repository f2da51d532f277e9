"""The ``rip_control`` lifecycle node: a dedicated, paced control thread inside ROS 2.

``ros2 run rip_control control_node`` (or ``python -m rip_control.control_node``).

Threads of this process:

* the **control thread** (:class:`~rip_control.control_loop.ControlLoop`): SCHED_FIFO and
  pinned where the OS allows; never touches rclpy;
* the **hung-loop watchdog** thread, started by the loop;
* the **publisher thread**: drains the loop's outboxes and publishes transitions, per-tick
  samples and episode summaries, and appends ``timing.csv`` rows;
* the **executor threads**: lifecycle services, diagnostics, the fault guard, and the
  ``policy_weights`` subscription in a callback group of its own.

Lifecycle: configure opens the rig and loads the initial policy; activate starts the control
thread (which engages); deactivate stops it and disengages; cleanup closes the rig; shutdown
and error processing disengage from any state. A fault inside the control thread
(TimingViolation, hung loop, serial failure) disengages at once and then takes the node to
inactive through the executor, from where an operator may activate again.
"""

from __future__ import annotations

from dataclasses import dataclass
import gc
import math
import os
from pathlib import Path
import sys
import threading
import time
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
import numpy as np
import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
)
from std_msgs.msg import (
    Float32MultiArray,
    Float64MultiArray,
    MultiArrayDimension,
    UInt8MultiArray,
)

from rip_control.control_loop import (
    ControlLoop,
    EpisodeSummary,
    LoopConfig,
    TickSample,
)
from rip_control.env import ACTION_SIZE, OBS_SIZE, RealRotaryInvertedPendulumEnv, TaskConfig
from rip_control.node_params import declare, spin_until_shutdown
from rip_control.outbox import Outbox
from rip_control.params import CONTROL_PARAMETERS
from rip_control.policy import (
    NumpyActor,
    PolicyRejected,
    PolicySnapshot,
    decode_actor,
    load_actor_file,
    random_actor,
)
from rip_control.realtime import is_fifo, lock_memory, pin_to_cpu, set_fifo
from rip_control.rig_client import LowLevelClient, RigError
from rip_control.telemetry import EpisodeTiming, TimingCsv
from rip_control.transitions import Transition, field_layout

TRANSITIONS_QOS = QoSProfile(
    depth=1000,
    history=HistoryPolicy.KEEP_LAST,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
WEIGHTS_QOS = QoSProfile(
    depth=1,
    history=HistoryPolicy.KEEP_LAST,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
TICK_QOS = QoSProfile(
    depth=10, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT
)
EPISODE_FIELDS = (
    'episode',
    'return',
    'balance_s',
    'n_ticks',
    'dt_mean_ms',
    'dt_std_ms',
    'max_overrun_ms',
    'n_strikes',
    'policy_version',
    'terminated',
)


@dataclass(frozen=True)
class NodeSettings:
    """Everything read from parameters at configure time."""

    task: TaskConfig
    loop: LoopConfig
    serial_port: str
    serial_timeout_s: float
    policy: str
    allow_random_policy: bool
    hidden_sizes: tuple[int, ...]
    run_dir: Path
    control_cpu: int
    fifo_priority: int
    switch_interval_s: float
    tick_topic_max_hz: float
    tick_trace: str
    gc_off: bool


PARAMETERS = CONTROL_PARAMETERS


class ControlNode(LifecycleNode):
    """Lifecycle node running the rig's control loop at its configured rate."""

    def __init__(self, node_name: str = 'rip_control', **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        declare(self, PARAMETERS)
        self._settings: NodeSettings | None = None
        self._client: LowLevelClient | None = None
        # The rig confirmed the motor off and nothing engaged it since (configure or a
        # confirmed disengage sets it; activate clears it).
        self._motor_confirmed_off = True
        self._snapshot: PolicySnapshot | None = None
        self._loop: ControlLoop | None = None
        self._control_thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._fault: BaseException | None = None
        self._fault_count = 0
        self._publisher_thread: threading.Thread | None = None
        self._publisher_stop = threading.Event()
        self._csv: TimingCsv | None = None
        self._transitions_out: Outbox[Transition] = Outbox(1)
        self._ticks_out: Outbox[TickSample] = Outbox(1)
        self._episodes_out: Outbox[EpisodeSummary] = Outbox(1)
        self._entities: list[Any] = []
        self._weights_rejected = 0
        self._weights_accepted = 0
        self._last_reject_reason = ''
        self._transitions_published = 0
        self._transitions_unsent = 0
        self._transitions_unmatched = 0
        self._episodes_done = 0
        self._last_episode: EpisodeSummary | None = None
        self._rt_notes: list[str] = []
        self._mem_note = 'memory not locked'
        self._control_fifo = False
        self._diag_prev: tuple[float, int] = (time.monotonic(), 0)
        self._rate_warn_armed = False
        self._trace: list[tuple[float, float, float]] = []
        self._last_tick_pub = 0.0
        self._learner_stats = (0, 0.0)  # train calls, train seconds: from the weights metadata
        self._learner_at_episode = (0, 0.0)
        self._fault_guard = self.create_guard_condition(self._on_control_fault)
        self.create_timer(1.0, self._publish_diagnostics)
        self._diag_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)

    # -- parameters ------------------------------------------------------------------------

    def _read_settings(self) -> NodeSettings:
        p = self.get_parameter
        task = TaskConfig(
            rate_hz=p('rate_hz').value,
            episode_seconds=p('episode_seconds').value,
            max_action_v=p('max_action_v').value,
            arm_limit_rad=p('arm_limit_rad').value,
        )
        loop = LoopConfig(
            timing_violation_threshold_s=p('timing_violation_threshold_ms').value / 1e3,
            max_strikes=p('max_strikes').value,
            hung_timeout_s=p('hung_timeout_ms').value / 1e3,
            max_serial_errors=p('max_serial_errors').value,
            stochastic_actions=p('stochastic_actions').value,
            episodes=p('episodes').value,
            seed=p('seed').value,
            fault_tick_delay_s=p('fault_tick_delay_ms').value / 1e3,
            fault_after_ticks=p('fault_after_ticks').value,
        )
        cpu = p('control_cpu').value
        if cpu < 0:
            cpu = max(os.sched_getaffinity(0))
        port = p('serial_port').value
        if not port:
            raise ValueError('serial_port is empty: name the rig device (or start the emulator)')
        hidden = tuple(int(h) for h in p('hidden_sizes').value)
        return NodeSettings(
            task=task,
            loop=loop,
            serial_port=port,
            serial_timeout_s=p('serial_timeout_ms').value / 1e3,
            policy=p('policy').value,
            allow_random_policy=p('allow_random_policy').value,
            hidden_sizes=hidden,
            run_dir=Path(p('runs_dir').value) / p('run_name').value,
            control_cpu=cpu,
            fifo_priority=p('fifo_priority').value,
            switch_interval_s=p('switch_interval_us').value / 1e6,
            tick_topic_max_hz=p('tick_topic_max_hz').value,
            tick_trace=p('tick_trace').value,
            gc_off=p('gc_off').value,
        )

    # -- lifecycle -------------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Read parameters, open the rig, load the initial policy.

        SUCCESS: inactive, rig open, motor disengaged. FAILURE (bad parameter, no rig, bad
        policy): back to unconfigured with the reason logged; nothing left open.
        """
        try:
            s = self._read_settings()
            actor = self._initial_actor(s)
        except (ValueError, PolicyRejected) as exc:
            self.get_logger().error(f'configure failed: {exc}')
            return TransitionCallbackReturn.FAILURE
        client = LowLevelClient(s.serial_port, timeout_s=s.serial_timeout_s)
        try:
            info = client.open()
            client.disengage_motor()
        except RigError as exc:
            client.close()
            self.get_logger().error(f'configure failed: {type(exc).__name__}: {exc}')
            return TransitionCallbackReturn.FAILURE
        self._settings, self._client = s, client
        self._snapshot = PolicySnapshot(actor)
        self._csv = TimingCsv(s.run_dir / 'timing.csv')
        self._create_entities()
        # Lock the process's memory here, at normal priority, not in the control thread:
        # faulting in a few hundred MB takes ~0.4 s, which at SCHED_FIFO on the control CPU
        # starved everything else there (measured with 3 rigs: emulators timed out).
        # MCL_FUTURE covers what is allocated later.
        self._mem_note = lock_memory() or 'memory locked'
        self.get_logger().info(
            f'configured: {s.task.rate_hz:g} Hz on {s.serial_port} (protocol '
            f'v{info.protocol_version}, deadman {info.deadman_timeout_ms} ms), policy version '
            f'{actor.version} {actor.meta.hidden_sizes}, run dir {s.run_dir}'
        )
        return TransitionCallbackReturn.SUCCESS

    def _initial_actor(self, s: NodeSettings) -> NumpyActor:
        if s.policy:
            return load_actor_file(
                s.policy, rate_hz=s.task.rate_hz, obs_size=OBS_SIZE, action_size=ACTION_SIZE
            )
        if not s.allow_random_policy:
            raise ValueError(
                'no initial policy: set policy:=<file.safetensors> or allow_random_policy:=true'
            )
        return random_actor(
            OBS_SIZE, ACTION_SIZE, s.hidden_sizes, s.task.rate_hz, seed=s.loop.seed
        )

    def _create_entities(self) -> None:
        self._transitions_pub = self.create_publisher(
            Float32MultiArray, 'transitions', TRANSITIONS_QOS
        )
        self._tick_pub = self.create_publisher(Float64MultiArray, '~/tick', TICK_QOS)
        self._episode_pub = self.create_publisher(Float64MultiArray, '~/episode', 10)
        self._weights_group = MutuallyExclusiveCallbackGroup()
        self._weights_sub = self.create_subscription(
            UInt8MultiArray,
            'policy_weights',
            self._on_weights,
            WEIGHTS_QOS,
            callback_group=self._weights_group,
        )
        self._entities = [self._transitions_pub, self._tick_pub, self._episode_pub]
        layout = field_layout(OBS_SIZE, ACTION_SIZE)
        self._layout_dims = [
            MultiArrayDimension(label=label, size=size, stride=size) for label, size in layout
        ]
        self._episode_dims = [
            MultiArrayDimension(label=label, size=1, stride=1) for label in EPISODE_FIELDS
        ]
        self._tick_dims = [
            MultiArrayDimension(label='dt_ms', size=1, stride=1),
            MultiArrayDimension(label='overrun_ms', size=1, stride=1),
        ]

    def _destroy_entities(self) -> None:
        for pub in self._entities:
            self.destroy_publisher(pub)
        if getattr(self, '_weights_sub', None) is not None:
            self.destroy_subscription(self._weights_sub)
            self._weights_sub = None
        self._entities = []

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Start the control thread; it engages the motor and runs episodes.

        SUCCESS: active. FAILURE: stays inactive, motor disengaged.
        """
        s, client, snapshot = self._settings, self._client, self._snapshot
        assert s is not None and client is not None and snapshot is not None
        holdback = s.loop.max_strikes - 1
        self._transitions_out = Outbox(
            capacity=10 * round(s.task.rate_hz) + 100, holdback=holdback
        )
        self._ticks_out = Outbox(capacity=4 * round(s.task.rate_hz) + 100)
        self._episodes_out = Outbox(capacity=1000)
        env = RealRotaryInvertedPendulumEnv(client, s.task)
        self._loop = ControlLoop(
            env,
            s.loop,
            snapshot,
            self._transitions_out,
            self._ticks_out,
            self._episodes_out,
            first_episode=self._episodes_done,
        )
        self._fault = None
        self._stop.clear()
        self._motor_confirmed_off = False
        self._trace = []
        # The tick rate in the diagnostics counts from here; the first report after an
        # activation also spans the control thread's start-up, so it never warns.
        self._diag_prev = (time.monotonic(), 0)
        self._rate_warn_armed = False
        self._start_publisher_thread()
        self._control_thread = threading.Thread(
            target=self._control_main, name='rip-control-loop', daemon=True
        )
        self._control_thread.start()
        self.get_logger().info(f'activated: control thread running at {s.task.rate_hz:g} Hz')
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop the control thread and disengage the motor. Always SUCCESS (inactive)."""
        self._stop_control()
        self.get_logger().info('deactivated: motor disengaged')
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Close the rig and release everything configure made. SUCCESS: unconfigured."""
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Disengage from whatever state, then release. SUCCESS: finalized."""
        self._stop_control()
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Disengage and release; SUCCESS leads to unconfigured (configure again to retry)."""
        self.get_logger().error('error processing: disengaging and releasing the rig')
        self._stop_control()
        self._release()
        return TransitionCallbackReturn.SUCCESS

    # -- control thread --------------------------------------------------------------------

    def _control_main(self) -> None:
        s, loop = self._settings, self._loop
        assert s is not None and loop is not None
        self._rt_notes = self._tune_control_thread(s)
        self._control_fifo = is_fifo()
        try:
            loop.run(self._stop)
        except BaseException as exc:  # noqa: BLE001 - every fault must reach the executor
            self._fault = exc
            self._fault_count += 1
            self._fault_guard.trigger()
        finally:
            gc.enable()

    def _tune_control_thread(self, s: NodeSettings) -> list[str]:
        notes = []
        sys.setswitchinterval(s.switch_interval_s)
        err = pin_to_cpu(s.control_cpu)
        notes.append(err or f'pinned to cpu {s.control_cpu}')
        if s.fifo_priority > 0:
            err = set_fifo(s.fifo_priority)
            notes.append(err or f'SCHED_FIFO {s.fifo_priority}')
        notes.append(self._mem_note)  # locked at configure
        # Collect now, then keep the collector from pausing a tick: what exists is frozen
        # out of the young generations and automatic collection is off while active.
        if s.gc_off:
            gc.collect()
            gc.freeze()
            gc.disable()
            notes.append('gc frozen and off')
        for note in notes:
            if 'refused' in note or 'unavailable' in note:
                self.get_logger().warning(f'control thread: {note}; carrying on without it')
        self.get_logger().info('control thread: ' + ', '.join(notes))
        return notes

    def _stop_control(self, publish: bool = True) -> bool:
        """Stop the control thread and disengage; whether the rig confirmed the motor off.

        True also when no rig is open (nothing can be engaged through this node then).
        """
        self._stop.set()
        thread = self._control_thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        self._control_thread = None
        if self._loop is not None and self._loop.motor_confirmed_off:
            self._motor_confirmed_off = True  # the control thread's own last disengage
        confirmed = True
        if self._client is not None and self._client.is_open:
            try:
                self._client.disengage_motor()
                self._motor_confirmed_off = True
            except RigError as exc:
                if self._motor_confirmed_off:
                    # Inactive, and the rig confirmed the motor off when it got there: a rig
                    # that is gone by now (e.g. powered down first) leaves nothing engaged.
                    self.get_logger().warning(
                        f'repeat disengage not answered ({exc}); the motor was already '
                        'confirmed off'
                    )
                else:
                    confirmed = False
                    self.get_logger().error(f'disengage failed ({exc}); firmware deadman will act')
        self._stop_publisher_thread(publish)
        return confirmed

    def _release(self) -> None:
        self._destroy_entities()
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._csv is not None:
            self._csv.close()
            self._csv = None
        self._loop = None

    def _on_control_fault(self) -> None:
        """Executor side of a control-thread fault: leave active (motor already off)."""
        exc = self._fault
        if exc is None:
            return
        self.get_logger().error(f'control loop stopped: {type(exc).__name__}: {exc}')
        if self._state_machine.current_state[1] == 'active':
            self.trigger_deactivate()

    @property
    def last_fault(self) -> BaseException | None:
        """The exception that ended the control thread last, if any."""
        return self._fault

    def emergency_stop(self) -> bool:
        """Stop and disengage without the executor (signals, process exit).

        :returns: whether the motor is confirmed off (or no rig is open).
        """
        return self._stop_control(publish=False)

    # -- publisher thread ------------------------------------------------------------------

    def _start_publisher_thread(self) -> None:
        self._publisher_stop.clear()
        self._publisher_thread = threading.Thread(
            target=self._publisher_main, name='rip-control-publisher', daemon=True
        )
        self._publisher_thread.start()

    def _stop_publisher_thread(self, publish: bool = True) -> None:
        self._publisher_stop.set()
        thread = self._publisher_thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        self._publisher_thread = None
        # Whatever the loop produced before it stopped: files always, topics while ROS lives.
        self._drain_outboxes(publish=publish and self.context.ok())
        self._write_trace()

    def _write_trace(self) -> None:
        s, loop = self._settings, self._loop
        if s is None or loop is None or not s.tick_trace or not self._trace:
            return
        trace = np.asarray(self._trace, dtype=np.float64)
        st = loop.status
        arrays = {
            'dt_s': trace[:, 0],
            'overrun_s': trace[:, 1],
            'prev_work_s': trace[:, 2],
            'rate_hz': np.float64(s.task.rate_hz),
            'violations': np.int64(st.violations),
            'missed_ticks': np.int64(st.missed_ticks),
            'ticks_dropped': np.int64(self._ticks_out.n_dropped_full),
            'fifo': np.bool_(self._control_fifo),
        }
        path = Path(s.tick_trace)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + '.tmp')
        with open(tmp, 'wb') as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self.get_logger().info(f'tick trace of {len(trace)} ticks written to {path}')
        self._trace = []

    def _publisher_main(self) -> None:
        while not self._publisher_stop.wait(0.002):
            try:
                self._drain_outboxes()
            except Exception:
                if self.context.ok():
                    raise
                return  # a signal shut ROS down under a publish: the stop path drains the rest

    def _drain_outboxes(self, publish: bool = True) -> None:
        """Empty the loop's outboxes: publish (or count as unsent), trace, write timing rows."""
        s = self._settings
        if s is None or not self._entities:
            return
        while (t := self._transitions_out.pop_from_non_rt()) is not None:
            if not publish:
                self._transitions_unsent += 1
                continue
            msg = Float32MultiArray()
            msg.layout.dim = self._layout_dims
            msg.data = t.pack().tolist()
            if self._transitions_pub.get_subscription_count() == 0:
                # No learner (or recorder) matched: this one reaches nobody. DDS notices a
                # killed subscriber only when its lease runs out, so this lags such a death.
                self._transitions_unmatched += 1
            self._transitions_pub.publish(msg)
            self._transitions_published += 1
        min_gap = 1.0 / s.tick_topic_max_hz if s.tick_topic_max_hz > 0 else math.inf
        now = time.monotonic()
        while (tick := self._ticks_out.pop_from_non_rt()) is not None:
            if s.tick_trace:
                self._trace.append((tick.dt_s, tick.overrun_s, tick.prev_work_s))
            if publish and now - self._last_tick_pub >= min_gap * 0.999:
                self._last_tick_pub = now
                msg64 = Float64MultiArray()
                msg64.layout.dim = self._tick_dims
                msg64.data = [tick.dt_s * 1e3, tick.overrun_s * 1e3]
                self._tick_pub.publish(msg64)
        while (ep := self._episodes_out.pop_from_non_rt()) is not None:
            self._on_episode(ep, publish=publish)

    def _on_episode(self, ep: EpisodeSummary, publish: bool = True) -> None:
        self._last_episode = ep
        loop = self._loop
        violations = loop.status.violations if loop is not None else 0
        calls, secs = self._learner_stats
        calls0, secs0 = self._learner_at_episode
        self._learner_at_episode = self._learner_stats
        if self._csv is not None:
            self._csv.append(
                EpisodeTiming(
                    episode=ep.episode,
                    n_ticks=ep.n_ticks,
                    mean_tick_dt_ms=ep.dt_mean_s * 1e3,
                    std_tick_dt_ms=ep.dt_std_s * 1e3,
                    max_overrun_ms=ep.max_overrun_s * 1e3,
                    n_violations=violations,
                    learner_train_calls=max(calls - calls0, 0),
                    learner_total_train_s=max(secs - secs0, 0.0),
                    episode_return=ep.episode_return,
                    balance_s=ep.balance_s,
                    policy_version=ep.policy_version,
                )
            )
        self._episodes_done = max(self._episodes_done, ep.episode + 1)
        if not publish:
            return
        msg = Float64MultiArray()
        msg.layout.dim = self._episode_dims
        msg.data = [
            float(ep.episode),
            ep.episode_return,
            ep.balance_s,
            float(ep.n_ticks),
            ep.dt_mean_s * 1e3,
            ep.dt_std_s * 1e3,
            ep.max_overrun_s * 1e3,
            float(ep.n_strikes),
            float(ep.policy_version),
            float(ep.terminated),
        ]
        self._episode_pub.publish(msg)
        self.get_logger().info(
            f'episode {ep.episode}: return {ep.episode_return:.2f}, balance {ep.balance_s:.2f} s, '
            f'tick {ep.dt_mean_s * 1e3:.3f}±{ep.dt_std_s * 1e3:.3f} ms, max overrun '
            f'{ep.max_overrun_s * 1e3:.2f} ms, policy v{ep.policy_version}, '
            f'{ep.transitions_published} transitions ({ep.transitions_dropped_late} late dropped)'
        )

    # -- weights ---------------------------------------------------------------------------

    def _on_weights(self, msg: UInt8MultiArray) -> None:
        s, snapshot = self._settings, self._snapshot
        if s is None or snapshot is None:
            return
        try:
            actor = decode_actor(
                bytes(msg.data),
                rate_hz=s.task.rate_hz,
                obs_size=OBS_SIZE,
                action_size=ACTION_SIZE,
                min_version=snapshot.version,
            )
            snapshot.write_from_non_rt(actor, time.monotonic())
            md = actor.metadata
            self._learner_stats = (
                int(md.get('learner_train_calls', '0')),
                float(md.get('learner_total_train_s', '0')),
            )
        except (PolicyRejected, ValueError) as exc:
            self._weights_rejected += 1
            self._last_reject_reason = str(exc)
            self.get_logger().warning(
                f'policy weights rejected ({self._weights_rejected} so far): {exc}',
                throttle_duration_sec=5.0,
            )
            return
        self._weights_accepted += 1

    # -- diagnostics -----------------------------------------------------------------------

    def _transitions_subscribers(self) -> int:
        """Subscriptions (learners, recorders) this node's own publisher has matched."""
        return self._transitions_pub.get_subscription_count() if self._entities else 0

    def _link_counters(self) -> dict[str, int]:
        """The serial link's own counters (plain ints, safe to read from any thread)."""
        client = self._client
        if client is None:
            return {}
        return {
            'serial_timeouts': client.stats.timeouts,
            'serial_stale_replies': client.stats.stale_replies,
            'serial_bad_frames': client.parser_errors,
            'serial_bytes_skipped': client.bytes_skipped,
        }

    def _publish_diagnostics(self) -> None:
        status = DiagnosticStatus(
            name=f'{self.get_fully_qualified_name().lstrip("/")}: control loop',
            hardware_id=f'rip_rig{self.get_namespace().rstrip("/")}',
        )
        loop, s, snapshot = self._loop, self._settings, self._snapshot
        state = self._state_machine.current_state[1]
        values: dict[str, Any] = {'lifecycle_state': state}
        level, message = DiagnosticStatus.OK, state
        if s is not None and snapshot is not None:
            values.update(
                target_rate_hz=s.task.rate_hz,
                policy_version=snapshot.version,
                policy_age_s=(time.monotonic() - snapshot.swapped_at_s)
                if snapshot.swapped_at_s
                else -1.0,
                weights_accepted=self._weights_accepted,
                weights_rejected=self._weights_rejected,
                last_weights_rejection=self._last_reject_reason or 'none',
                transitions_published=self._transitions_published,
                transitions_subscribers=self._transitions_subscribers(),
                transitions_unmatched=self._transitions_unmatched,
                transitions_unsent=self._transitions_unsent,
            )
        if loop is not None and s is not None:
            st = loop.status
            now = time.monotonic()
            prev_t, prev_ticks = self._diag_prev
            ticks, tick_s = st.tick_mark
            if prev_ticks and ticks > prev_ticks:
                # Ticks over the span of their own deadlines: exact while none is missed. Over
                # the report's wall-clock window, one tick more or less (2 % at 50 Hz) would
                # come and go with the timer's jitter and cross the 1 % WARN threshold.
                rate = (ticks - prev_ticks) / (tick_s - prev_t)
            elif ticks > prev_ticks:  # the first report after an activation (never warns)
                rate = ticks / max(now - prev_t, 1e-9)
            else:
                rate = 0.0  # no tick since the last report
            self._diag_prev = (tick_s if ticks else now, ticks)
            values.update(
                tick_rate_hz=rate,
                dt_mean_ms=st.dt.mean * 1e3,
                dt_std_ms=st.dt.std * 1e3,
                max_overrun_ms=st.max_overrun_s * 1e3,
                strikes=st.strikes_total,
                violations=st.violations,
                missed_ticks=st.missed_ticks,
                serial_errors=st.serial_errors,
                **self._link_counters(),
                # Since the activation, each queued transition is published, withdrawn or
                # dropped by a full outbox; one dropped late was never queued.
                transitions_queued=self._transitions_out.n_pushed,
                outbox_dropped=self._transitions_out.n_dropped_full,
                transitions_withdrawn=self._transitions_out.n_discarded,
                transitions_dropped_late=st.transitions_dropped_late,
                episodes=st.episodes,
                phase=st.phase,
                realtime=', '.join(self._rt_notes),
                control_thread_fifo=self._control_fifo,
            )
            if st.violations or self._fault is not None:
                level = DiagnosticStatus.ERROR
                message = (
                    f'stopped: {type(self._fault).__name__}: {self._fault}'
                    if self._fault
                    else 'violation'
                )
            elif (
                state == 'active'
                and self._rate_warn_armed
                and abs(rate - s.task.rate_hz) > 0.01 * s.task.rate_hz
            ):
                level, message = DiagnosticStatus.WARN, f'tick rate {rate:.2f} Hz'
            elif (
                st.serial_errors
                or values.get('serial_bad_frames')
                or values.get('serial_bytes_skipped')
                or self._weights_rejected
            ):
                level = DiagnosticStatus.WARN
                message = 'serial errors, line noise or rejected weights'
            if state == 'active':
                self._rate_warn_armed = True
        status.level = level
        status.message = message
        status.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        arr = DiagnosticArray()
        arr.header.stamp = self.get_clock().now().to_msg()
        arr.status = [status]
        self._diag_pub.publish(arr)


def _raise_existing_threads(priority: int) -> None:
    """Give the threads that already exist (DDS, rclpy) the same low FIFO priority."""
    for tid in os.listdir('/proc/self/task'):
        if not is_fifo(int(tid)):
            set_fifo(priority, int(tid))


def main(args: list[str] | None = None) -> int:
    """Run the node until SIGINT/SIGTERM; the motor is disengaged on every way out.

    Exit status: 0 after a signal in any lifecycle state with the motor confirmed off (or no
    rig open), whenever it comes (while starting too); 1 if the executor failed or the rig
    did not confirm the disengage (the firmware deadman is then what stops the motor); 2 a
    parameter the table refuses.
    """
    from rip_control.node_params import init_rclpy
    from rip_control.signals import StopSignals

    # First: from here on a signal is a stop request, recorded; nothing is raised into the
    # set-up, and the finally below runs whatever the moment.
    stop = StopSignals().install()
    init_rclpy(args)
    node: ControlNode | None = None
    executor: MultiThreadedExecutor | None = None
    code = 0
    try:
        try:
            node = ControlNode()
        except ValueError as exc:  # a parameter the table refuses, named
            print(f'rip_control: {exc}', file=sys.stderr, flush=True)
            code = 2
        if node is not None:
            log = node.get_logger()
            # Threads created from here on (executor workers, the publisher thread) inherit it.
            prio = node.get_parameter('gil_holders_fifo_priority').value
            if prio > 0:
                err = set_fifo(prio)
                if err:
                    log.warning(f'other threads: {err}; a CPU load can then hold the GIL')
                else:
                    _raise_existing_threads(prio)
                    log.info(f'executor, publisher and DDS threads at SCHED_FIFO {prio}')
            executor = MultiThreadedExecutor(num_threads=2)
            executor.add_node(node)
            log.info(f'unconfigured, waiting for configure (pid {os.getpid()})')
            code = spin_until_shutdown(node, executor, stop)
    finally:
        confirmed = node is None or node.emergency_stop()  # at once, before anything else
        if executor is not None:
            executor.shutdown()  # waits for a transition in progress (configure, activate)
        if node is not None:
            if confirmed:  # that transition may have opened or engaged the rig since
                confirmed = node.emergency_stop()
            node._release()
            node.destroy_node()
        if not confirmed:
            code = 1
        rclpy.try_shutdown()
    return code


if __name__ == '__main__':
    sys.exit(main())
