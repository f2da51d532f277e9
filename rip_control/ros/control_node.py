"""The ``rip_control`` lifecycle node: ROS on one side, a real-time control process on the other.

``ros2 run rip_control control_node`` (or ``python -m rip_control.ros.control_node``).

The control loop does not run in this process. At configure the node starts a real-time
process of its own (:mod:`rip_control.rt.process`: one Python thread, SCHED_FIFO, pinned,
memory locked, no rclpy) that opens the rig and runs pacing, serial I/O, the policy, the
3-strike rule, episodes and resets. The two share memory only
(:mod:`rip_control.rt.link`), through channels that never block the real-time side.

Threads of this process:

* the **pump thread**: the only reader of the real-time process's rings; publishes
  transitions, per-tick samples and episode summaries, appends ``timing.csv`` rows, bumps
  the node's heartbeat, and watches the process: its heartbeat (the hung-loop watchdog)
  and its exit;
* the **executor threads**: lifecycle services, diagnostics, the fault guard, and the
  ``policy_weights`` subscription (decoded and validated here, then handed over as the
  latest value).

Lifecycle: configure starts the real-time process (which opens the rig, disengaged) with the
initial policy; activate tells it to run episodes (it engages); deactivate tells it to stop
(it disengages and confirms); cleanup ends it. A fault inside the loop (TimingViolation,
serial failure, a vanished rig) disengages there and takes the node to inactive, from where
an operator may activate again. If the real-time process dies or hangs, the node kills
what is left of it, opens the serial port itself, disengages, and goes through error
processing (to unconfigured) naming the cause. If the node dies or freezes, the real-time
process disengages and exits. The firmware deadman stays the last line.
"""

from __future__ import annotations

from dataclasses import dataclass
import io
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
from std_msgs.msg import (
    Float32MultiArray,
    Float64MultiArray,
    MultiArrayDimension,
    UInt8MultiArray,
)

from rip_control.files import atomic_write_bytes
from rip_control.policy import (
    NumpyActor,
    PolicyRejected,
    decode_actor,
    load_actor_file,
    random_actor,
)
from rip_control.rig.client import LowLevelClient, RigError
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE, TaskConfig
from rip_control.ros.node_params import declare, spin_until_shutdown
from rip_control.ros.qos import TICK_QOS, TRANSITIONS_QOS, WEIGHTS_QOS
from rip_control.rt.handle import RtProcess, RtStartFailed, describe_exit
from rip_control.rt.link import RtStatus
from rip_control.rt.loop import EpisodeSummary, LoopConfig
from rip_control.rt.realtime import is_fifo, set_fifo
from rip_control.run.params import CONTROL_PARAMETERS
from rip_control.telemetry import EpisodeTiming, TimingCsv
from rip_control.transitions import field_layout

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
    node_timeout_s: float
    cpu_idle_latency_us: int


PARAMETERS = CONTROL_PARAMETERS
PUMP_PERIOD_S = 0.002
PUMP_STALL_S = 0.02  # the pump itself late by this much: the host paused, not the loop
STOP_REPLY_TIMEOUT_S = 2.0


class RtProcessLost(RuntimeError):
    """The real-time process died or hung; the node disengaged the motor itself."""


class ControlNode(LifecycleNode):
    """Lifecycle node running the rig's control loop at its configured rate."""

    def __init__(self, node_name: str = 'rip_control', **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        declare(self, PARAMETERS)
        self._settings: NodeSettings | None = None
        self._rt: RtProcess | None = None
        # The rig confirmed the motor off and nothing engaged it since (configure or a
        # confirmed disengage sets it; activate clears it).
        self._motor_confirmed_off = True
        self._fault: BaseException | None = None
        self._fault_count = 0
        self._rt_lost: str = ''  # why the real-time process is gone (set once)
        self._rt_lost_handled = threading.Event()  # ... and the node's own disengage is done
        self._rt_quitting = False  # the node ended it (cleanup): its exit is no loss
        self._pump_last = time.monotonic()  # when the pump last ran (the hung check's own clock)
        self._pump_resumed = 0.0  # when the pump ran again after a stall of its own
        self._rt_lock = threading.Lock()  # weights handed over vs. the mapping released
        self._pump_thread: threading.Thread | None = None
        self._pump_stop = threading.Event()
        self._stop_replies = 0  # 'stopped' events received (pump thread writes)
        self._stop_reply = threading.Condition()
        self._last_stop: dict[str, Any] = {}
        self._exit_event: dict[str, Any] = {}
        self._csv: TimingCsv | None = None
        self._entities: list[Any] = []
        self._publish_enabled = True
        self._weights_rejected = 0
        self._weights_accepted = 0
        self._last_reject_reason = ''
        self._transitions_published = 0
        self._transitions_unsent = 0
        self._transitions_unmatched = 0
        self._episodes_done = 0
        self._last_episode: EpisodeSummary | None = None
        self._rt_notes: list[str] = []
        self._control_fifo = False
        self._activation_base = 0  # the RT status's activation count when we last activated
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
            node_timeout_s=p('node_timeout_ms').value / 1e3,
            cpu_idle_latency_us=p('cpu_idle_latency_us').value,
        )

    # -- lifecycle -------------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Read parameters, start the real-time process (it opens the rig), hand it the policy.

        SUCCESS: inactive, rig open in the real-time process, motor disengaged. FAILURE (bad
        parameter, no rig, bad policy): back to unconfigured with the reason logged; no
        process left running.
        """
        try:
            s = self._read_settings()
            actor = self._initial_actor(s)
        except (ValueError, PolicyRejected) as exc:
            self.get_logger().error(f'configure failed: {exc}')
            return TransitionCallbackReturn.FAILURE
        rt = RtProcess(
            task=s.task,
            loop=s.loop,
            serial_port=s.serial_port,
            serial_timeout_s=s.serial_timeout_s,
            actor=actor,
            transition_floats=sum(n for _, n in field_layout(OBS_SIZE, ACTION_SIZE)),
            cpu=s.control_cpu,
            fifo_priority=s.fifo_priority,
            switch_interval_s=s.switch_interval_s,
            gc_off=s.gc_off,
            node_timeout_s=s.node_timeout_s,
            cpu_idle_latency_us=s.cpu_idle_latency_us,
        )
        try:
            ready = rt.start()
        except RtStartFailed as exc:
            rt.stop_process()
            rt.close()
            self.get_logger().error(f'configure failed: {exc}')
            return TransitionCallbackReturn.FAILURE
        self._settings, self._rt = s, rt
        self._rt_lost = ''
        self._rt_quitting = False
        self._last_stop = {}  # answers of an earlier process answer nothing of this one
        self._rt_lost_handled.clear()
        self._exit_event = {}
        self._fault = None
        self._motor_confirmed_off = True
        self._rt_notes = list(ready.get('realtime', []))
        self._control_fifo = bool(ready.get('fifo'))
        for note in self._rt_notes:
            if 'refused' in note or 'unavailable' in note:
                self.get_logger().warning(f'real-time process: {note}; carrying on without it')
        self.get_logger().info('real-time process: ' + ', '.join(self._rt_notes))
        self._csv = TimingCsv(s.run_dir / 'timing.csv')
        self._create_entities()
        self._start_pump()
        self.get_logger().info(
            f'configured: {s.task.rate_hz:g} Hz on {s.serial_port} (protocol '
            f'v{ready["protocol_version"]}, deadman {ready["deadman_ms"]} ms), policy version '
            f'{actor.version} {actor.meta.hidden_sizes}, run dir {s.run_dir}, control loop in '
            f'process {rt.pid}'
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
        """Tell the real-time process to run episodes; it engages the motor.

        SUCCESS: active. FAILURE (the process is gone): stays inactive, motor disengaged.
        """
        s, rt = self._settings, self._rt
        assert s is not None and rt is not None
        if self._rt_lost or rt.poll() is not None:
            self.get_logger().error(f'activate refused: {self._rt_lost or "no real-time process"}')
            return TransitionCallbackReturn.FAILURE
        self._fault = None
        self._motor_confirmed_off = False
        self._trace = []
        self._activation_base = rt.status_from_pump().activation
        # The tick rate in the diagnostics counts from here; the first report after an
        # activation also spans the start-up, so it never warns.
        self._diag_prev = (time.monotonic(), 0)
        self._rate_warn_armed = False
        if not rt.command('activate', first_episode=self._episodes_done):
            self._motor_confirmed_off = True
            self.get_logger().error('activate refused: the command ring is full')
            return TransitionCallbackReturn.FAILURE
        self.get_logger().info(
            f'activated: control loop running at {s.task.rate_hz:g} Hz in process {rt.pid}'
        )
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop the loop and disengage.

        SUCCESS: inactive. ERROR if the real-time process is lost (error processing then
        releases everything: unconfigured).
        """
        confirmed = self._stop_control()
        self._write_trace()
        if self._rt_lost:
            return TransitionCallbackReturn.ERROR
        if confirmed:
            self.get_logger().info('deactivated: motor disengaged')
        else:
            self.get_logger().error('deactivated: the rig did not confirm the disengage')
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """End the real-time process and release everything configure made.

        SUCCESS: unconfigured; ERROR when it is done because the process was lost.
        """
        lost = self._rt_lost
        self._release()
        return TransitionCallbackReturn.ERROR if lost else TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Disengage from whatever state, then release. SUCCESS: finalized."""
        self._stop_control()
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Disengage and release; SUCCESS leads to unconfigured (configure again to retry)."""
        cause = f' ({self._rt_lost})' if self._rt_lost else ''
        self.get_logger().error(f'error processing{cause}: disengaging and releasing the rig')
        self._stop_control()
        self._release()
        return TransitionCallbackReturn.SUCCESS

    # -- the real-time process -------------------------------------------------------------

    def _stop_control(self, publish: bool = True) -> bool:
        """Stop the loop and disengage; whether the motor is confirmed off.

        True also when no rig is open. The real-time process answers a ``stop`` with the
        rig's confirmation; if it is gone or does not answer, the node disengages itself.
        """
        rt = self._rt
        if not publish:
            self._publish_enabled = False
        if rt is None:
            return True
        if not self._rt_lost and rt.poll() is None:
            with self._stop_reply:
                cid = rt.command('stop')
                answered = self._stop_reply.wait_for(
                    lambda: cid in self._last_stop.get('ids', ()) or bool(self._rt_lost),
                    STOP_REPLY_TIMEOUT_S,
                )
            if answered and not self._rt_lost:
                reply = self._last_stop
                if reply.get('confirmed'):
                    self._motor_confirmed_off = True
                elif self._motor_confirmed_off:
                    # Inactive, and the rig confirmed the motor off when it got there: a rig
                    # that is gone by now (e.g. powered down first) leaves nothing engaged.
                    self.get_logger().warning(
                        f'repeat disengage not answered ({reply.get("detail")}); the motor '
                        'was already confirmed off'
                    )
                else:
                    self.get_logger().error(
                        f'disengage failed ({reply.get("detail")}); firmware deadman will act'
                    )
                return self._motor_confirmed_off
            if not answered and not self._rt_lost:
                self._lose_rt(
                    f'the real-time process did not answer a stop within '
                    f'{STOP_REPLY_TIMEOUT_S:g} s'
                )
        elif not self._rt_lost and not (
            self._pump_thread is not None and self._rt_lost_handled.wait(0.2)
        ):
            # Gone already (its own signal, say): the pump normally notices first, with the
            # process's last words (its exit event); without a pump, we do.
            self._lose_rt(f'the real-time process {describe_exit(rt.poll())}')
        # Lost: whoever noticed first is disengaging from here; its answer is the answer.
        self._rt_lost_handled.wait(STOP_REPLY_TIMEOUT_S + 2 * s_timeout(self._settings))
        return self._motor_confirmed_off

    def _lose_rt(self, why: str) -> None:
        """The real-time process is gone or hung: kill what is left, disengage from here.

        Called once (the first caller wins); from the pump thread or a stopping executor.
        """
        with self._stop_reply:
            if self._rt_lost or self._rt_quitting:
                return
            self._rt_lost = why
            self._stop_reply.notify_all()
        rt, s = self._rt, self._settings
        assert rt is not None and s is not None
        code = rt.poll()
        rt.kill()
        if code is None:
            code = rt.poll()
        log = self.get_logger()
        exit_ev = self._exit_event
        if exit_ev.get('confirmed'):
            # It stopped on its own (a signal to the process group, say) and the rig confirmed
            # its disengage before it went: a stop, not an accident.
            self._motor_confirmed_off = True
            log.warning(
                f'real-time process ended ({exit_ev.get("why")}), motor confirmed off by it'
            )
        else:
            log.error(f'real-time process lost: {why} ({describe_exit(code)})')
        client = LowLevelClient(s.serial_port, timeout_s=s.serial_timeout_s)
        try:
            client.open()
            client.disengage_motor()
            self._motor_confirmed_off = True
            log.warning('motor disengaged by the node itself')
        except RigError as exc:
            say = log.warning if self._motor_confirmed_off else log.error
            say(f'disengage failed ({type(exc).__name__}: {exc}); the firmware deadman will act')
        finally:
            client.close()
            self._rt_lost_handled.set()
        self._fault = RtProcessLost(why)
        self._fault_count += 1
        self._fault_guard.trigger()

    def _release(self) -> None:
        rt = self._rt
        if rt is not None:
            with self._stop_reply:
                self._rt_quitting = not self._rt_lost  # from here its exit is ours
            if self._rt_quitting:
                code = rt.stop_process()
                if code not in (0, None):
                    self.get_logger().warning(
                        f'real-time process {describe_exit(code)} at cleanup'
                    )
        self._stop_pump()
        self._destroy_entities()
        if rt is not None:
            rt.kill()
            with self._rt_lock:
                rt.close()
                self._rt = None
        if self._csv is not None:
            self._csv.close()
            self._csv = None

    def _on_control_fault(self) -> None:
        """Executor side of a fault: leave active (motor already off), or error out if lost."""
        exc = self._fault
        if exc is None:
            return
        state = self._state_machine.current_state[1]
        self.get_logger().error(f'control loop stopped: {fault_name(exc)}: {exc}')
        if state == 'active':
            self.trigger_deactivate()
        elif state == 'inactive' and self._rt_lost:
            self.trigger_cleanup()

    @property
    def last_fault(self) -> BaseException | None:
        """What ended the control loop last, if anything."""
        return self._fault

    def request_stop(self) -> None:
        """Ask the loop to disengage at its next tick; never blocks (signal handlers).

        The first thing a stop signal does: the executor's own teardown that follows can take
        a third of a second (measured), and the loop must not keep driving the motor through
        it. :meth:`emergency_stop` then waits for the confirmation.
        """
        rt = self._rt
        if rt is not None and not self._rt_lost and rt.poll() is None:
            rt.command('stop', blocking=False)

    def emergency_stop(self) -> bool:
        """Stop and disengage without the executor (signals, process exit).

        :returns: whether the motor is confirmed off (or no rig is open).
        """
        return self._stop_control(publish=False)

    # -- the pump thread -------------------------------------------------------------------

    def _start_pump(self) -> None:
        self._pump_stop.clear()
        self._publish_enabled = True
        self._pump_thread = threading.Thread(
            target=self._pump_main, name='rip-control-pump', daemon=True
        )
        self._pump_thread.start()

    def _stop_pump(self) -> None:
        self._pump_stop.set()
        thread = self._pump_thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        if thread is not None and thread.is_alive():
            self.get_logger().error('pump thread did not stop; its rings are left undrained')
            return
        self._pump_thread = None
        if self._rt is not None and self._rt.ch is not None:
            # Whatever the loop produced before it stopped: files always, topics while ROS lives.
            self._drain(publish=self._publish_enabled and self.context.ok())
        self._write_trace()

    def _pump_main(self) -> None:
        rt = self._rt
        assert rt is not None
        while not self._pump_stop.wait(PUMP_PERIOD_S):
            rt.beat()
            try:
                self._drain(publish=self._publish_enabled)
            except Exception as exc:  # noqa: BLE001 - never let the watch on the loop die
                if not self.context.ok():
                    self._publish_enabled = False  # a signal shut ROS down under a publish
                else:
                    self.get_logger().error(f'pump: {type(exc).__name__}: {exc}')
            if not self._rt_lost:
                self._watch(rt)

    def _watch(self, rt: RtProcess) -> None:
        """The hung-loop watchdog and the death check, on the process's own clock stamps."""
        s = self._settings
        assert s is not None
        code = rt.poll()
        if code is not None:
            self._drain(publish=self._publish_enabled)  # its last words
            self._lose_rt(f'the real-time process {describe_exit(code)}')
            return
        st = rt.status
        now = time.monotonic()
        if now - self._pump_last > PUMP_STALL_S:
            # This thread did not run either (the whole host paused: a VM's vCPUs descheduled,
            # a suspend): the process is not to blame for that gap, and gets its grace anew.
            self._pump_resumed = now
        self._pump_last = now
        silence = now - max(st.written_at_s, self._pump_resumed)
        if st.written_at_s and silence > s.loop.hung_timeout_s + s.task.period_s:
            self._lose_rt(
                f'the real-time process fell silent for {silence * 1e3:.0f} ms '
                f'(hung-loop watchdog, {s.loop.hung_timeout_s * 1e3:.0f} ms)'
            )

    def _drain(self, publish: bool = True) -> None:
        """Empty the rings: publish (or count as unsent), trace, write timing rows, events."""
        s, rt = self._settings, self._rt
        if s is None or rt is None or rt.ch is None or not self._entities:
            return
        rt.status_from_pump()  # first: the hung-loop watchdog reads it whatever fails below
        for raw in rt.transitions_from_pump():
            if not publish:
                self._transitions_unsent += 1
                continue
            msg = Float32MultiArray()
            msg.layout.dim = self._layout_dims
            msg.data = np.frombuffer(raw, np.float32).tolist()
            if self._transitions_pub.get_subscription_count() == 0:
                # No learner (or recorder) matched: this one reaches nobody. DDS notices a
                # killed subscriber only when its lease runs out, so this lags such a death.
                self._transitions_unmatched += 1
            self._transitions_pub.publish(msg)
            self._transitions_published += 1
        min_gap = 1.0 / s.tick_topic_max_hz if s.tick_topic_max_hz > 0 else math.inf
        now = time.monotonic()
        for dt_s, overrun_s, prev_work_s, _strike in rt.ticks_from_pump():
            if s.tick_trace:
                self._trace.append((dt_s, overrun_s, prev_work_s))
            if publish and now - self._last_tick_pub >= min_gap * 0.999:
                self._last_tick_pub = now
                msg64 = Float64MultiArray()
                msg64.layout.dim = self._tick_dims
                msg64.data = [dt_s * 1e3, overrun_s * 1e3]
                self._tick_pub.publish(msg64)
        for ev in rt.events_from_pump():
            try:
                self._on_event(ev, publish)
            except Exception as exc:  # noqa: BLE001 - one bad event must not lose the others
                if not self.context.ok():
                    raise
                self.get_logger().error(f'event {ev.get("event")!r}: {type(exc).__name__}: {exc}')

    def _on_event(self, ev: dict[str, Any], publish: bool) -> None:
        kind = ev.get('event')
        log = self.get_logger()
        if kind == 'episode':
            fields = {k: v for k, v in ev.items() if k != 'event'}
            self._on_episode(EpisodeSummary(**fields), publish=publish)
        elif kind == 'stopped':
            fault = ev.get('fault')
            if fault and int(ev.get('activation', 0)) > self._activation_base:
                self._fault = _LoopFault(fault['type'], fault['message'])
                self._fault_count += 1
                self._fault_guard.trigger()
            with self._stop_reply:
                self._last_stop = ev
                # A run's own end (activation after ours) or an answer to a stop confirms the
                # motor off; a late report of an earlier run's end says nothing about this one.
                current = int(ev.get('activation', 0)) > self._activation_base
                if ev.get('confirmed') and (ev.get('ids') or current):
                    self._motor_confirmed_off = True
                self._stop_replies += 1
                self._stop_reply.notify_all()
        elif kind == 'exit':
            self._exit_event = ev
            if ev.get('confirmed'):
                self._motor_confirmed_off = True
        elif kind == 'log':
            level = ev.get('level', 'info')
            text = f'[rt] {ev.get("text", "")}'
            if level in ('error', 'critical'):
                log.error(text)
            elif level == 'warning':
                log.warning(text, throttle_duration_sec=1.0)
            else:
                log.info(text)

    def _write_trace(self) -> None:
        s, rt = self._settings, self._rt
        if s is None or not s.tick_trace or not self._trace:
            return
        trace = np.asarray(self._trace, dtype=np.float64)
        st = rt.status if rt is not None else RtStatus()
        arrays = {
            'dt_s': trace[:, 0],
            'overrun_s': trace[:, 1],
            'prev_work_s': trace[:, 2],
            'rate_hz': np.float64(s.task.rate_hz),
            'violations': np.int64(st.violations),
            'missed_ticks': np.int64(st.missed_ticks),
            'ticks_dropped': np.int64(st.ticks_dropped),
            'fifo': np.bool_(self._control_fifo),
            'swap_max_s': np.float64(st.swap_max_s),
        }
        path = Path(s.tick_trace)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        atomic_write_bytes(path, buf.getvalue())
        self.get_logger().info(f'tick trace of {len(trace)} ticks written to {path}')
        self._trace = []

    def _on_episode(self, ep: EpisodeSummary, publish: bool = True) -> None:
        self._last_episode = ep
        rt = self._rt
        violations = rt.status.violations if rt is not None else 0
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
        with self._rt_lock:  # the mapping stays while the weights go in
            self._take_weights(msg)

    def _take_weights(self, msg: UInt8MultiArray) -> None:
        s, rt = self._settings, self._rt
        if s is None or rt is None or rt.ch is None or self._rt_lost:
            return
        try:
            actor = decode_actor(
                bytes(msg.data),
                rate_hz=s.task.rate_hz,
                obs_size=OBS_SIZE,
                action_size=ACTION_SIZE,
                min_version=rt.weights_version,
            )
            rt.write_weights(actor)
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

    def _publish_diagnostics(self) -> None:
        status = DiagnosticStatus(
            name=f'{self.get_fully_qualified_name().lstrip("/")}: control loop',
            hardware_id=f'rip_rig{self.get_namespace().rstrip("/")}',
        )
        rt, s = self._rt, self._settings
        state = self._state_machine.current_state[1]
        values: dict[str, Any] = {'lifecycle_state': state}
        level, message = DiagnosticStatus.OK, state
        if self._rt_lost:
            level, message = DiagnosticStatus.ERROR, f'real-time process lost: {self._rt_lost}'
        if s is not None and rt is not None:
            st = rt.status
            values.update(
                target_rate_hz=s.task.rate_hz,
                policy_version=st.policy_version,
                policy_age_s=(time.monotonic() - st.policy_swapped_at_s)
                if st.policy_swapped_at_s
                else -1.0,
                policy_swap_max_ms=st.swap_max_s * 1e3,
                weights_accepted=self._weights_accepted,
                weights_rejected=self._weights_rejected,
                last_weights_rejection=self._last_reject_reason or 'none',
                transitions_published=self._transitions_published,
                transitions_subscribers=self._transitions_subscribers(),
                transitions_unmatched=self._transitions_unmatched,
                transitions_unsent=self._transitions_unsent,
                control_process=f'pid {rt.pid} ({describe_exit(rt.poll())})',
                realtime=', '.join(self._rt_notes),
                control_thread_fifo=self._control_fifo,
            )
        if rt is not None and s is not None and st.activation > self._activation_base:
            now = time.monotonic()
            prev_t, prev_ticks = self._diag_prev
            ticks, tick_s = st.ticks, st.last_tick_s
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
                dt_mean_ms=st.dt_mean_s * 1e3,
                dt_std_ms=st.dt_std_s * 1e3,
                max_overrun_ms=st.max_overrun_s * 1e3,
                strikes=st.strikes_total,
                violations=st.violations,
                missed_ticks=st.missed_ticks,
                serial_errors=st.serial_errors,
                serial_timeouts=st.serial_timeouts,
                serial_stale_replies=st.serial_stale_replies,
                serial_bad_frames=st.serial_bad_frames,
                serial_bytes_skipped=st.serial_bytes_skipped,
                # Since the activation, each queued transition is published, withdrawn or
                # dropped by a full ring; one dropped late was never queued.
                transitions_queued=st.transitions_queued,
                outbox_dropped=st.transitions_dropped_full,
                transitions_withdrawn=st.transitions_withdrawn,
                transitions_dropped_late=st.transitions_dropped_late,
                episodes=st.episodes,
                phase=st.phase_name,
            )
            if self._rt_lost:
                pass
            elif st.violations or self._fault is not None:
                level = DiagnosticStatus.ERROR
                message = (
                    f'stopped: {fault_name(self._fault)}: {self._fault}'
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
                or st.serial_bad_frames
                or st.serial_bytes_skipped
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


def s_timeout(s: NodeSettings | None) -> float:
    """The serial timeout of the settings (0 without settings)."""
    return s.serial_timeout_s if s is not None else 0.0


def fault_name(exc: BaseException) -> str:
    """The name of a fault: the real-time process's exception type for one it reported."""
    return getattr(exc, 'name', type(exc).__name__)


class _LoopFault(RuntimeError):
    """A fault the real-time process reported, under its own exception's name."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


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
    from rip_control.ros.node_params import init_rclpy
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
            # Threads created from here on (executor workers, the pump thread) inherit it.
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
            stop.at_first_signal(node.request_stop)
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
