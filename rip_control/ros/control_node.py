"""The ``rip_control`` lifecycle node: ROS on one side, a real-time control process on the other.

``ros2 run rip_control control_node`` (or ``python -m rip_control.ros.control_node``).

The control loop does not run in this process. At configure the node starts a real-time
process of its own (:mod:`rip_control.rt.process`: one Python thread, SCHED_FIFO, pinned,
memory locked, no rclpy) that opens the rig and runs pacing, serial I/O, the policy, the
3-strike rule, episodes and resets. The two share memory only
(:mod:`rip_control.rt.layout`), through channels that never block the real-time side.

Threads of this process:

* the **pump thread**: the only reader of the real-time process's rings; publishes
  transitions, per-tick samples and episode summaries, appends ``timing.csv`` rows, bumps
  the node's heartbeat, and watches the process: its heartbeat (the hung-loop watchdog)
  and its exit;
* the **executor threads**: lifecycle services, diagnostics, the fault guard, and the
  ``policy_weights`` subscription (decoded and validated here, then handed over as the
  latest value).

What it does is in modules of their own: :mod:`~rip_control.ros.control_settings` (the
parameters, read at configure), :mod:`~rip_control.ros.loop_outputs` (topics and files of
what the loop produced), :mod:`~rip_control.ros.weights_intake` (``policy_weights`` checked
and handed over), :mod:`~rip_control.ros.control_diagnostics` (``/diagnostics``). This module
is the lifecycle and the watch over the real-time process.

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

import os
from pathlib import Path
import sys
import threading
import time
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from std_msgs.msg import UInt8MultiArray

from rip_control.params import CONTROL_PARAMETERS
from rip_control.policy import (
    NumpyActor,
    PolicyRejected,
    encode_actor,
    load_actor_file,
    random_actor,
)
from rip_control.rig.client import LowLevelClient, RigError
from rip_control.rig.env import ACTION_SIZE
from rip_control.ros.control_diagnostics import ControlDiagnostics, fault_name
from rip_control.ros.control_settings import NodeSettings
from rip_control.ros.loop_outputs import LoopOutputs
from rip_control.ros.node_params import declare
from rip_control.ros.qos import POLICY_WEIGHTS, WEIGHTS_QOS
from rip_control.ros.weights_intake import WeightsIntake
from rip_control.rt.handle import RtHandle, RtStartFailed, describe_exit
from rip_control.rt.layout import RtStatus
from rip_control.rt.loop import EpisodeSummary
from rip_control.rt.realtime import is_fifo, set_fifo
from rip_control.transitions import field_layout

PUMP_PERIOD_S = 0.002
PUMP_STALL_S = 0.02  # the pump itself late by this much: the host paused, not the loop
STOP_REPLY_TIMEOUT_S = 2.0


class RtProcessLost(RuntimeError):
    """The real-time process died or hung; the node disengaged the motor itself."""


class ControlNode(LifecycleNode):
    """Lifecycle node running the rig's control loop at its configured rate."""

    def __init__(self, node_name: str = 'rip_control', **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        declare(self, CONTROL_PARAMETERS)
        self._settings: NodeSettings | None = None
        self._rt: RtHandle | None = None
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
        self._stop_reply = threading.Condition()
        self._last_stop: dict[str, Any] = {}
        self._exit_event: dict[str, Any] = {}
        self._outputs: LoopOutputs | None = None  # topics and files, while configured
        self._weights_sub: Any = None
        self._weights = WeightsIntake(self.get_logger())
        self._diagnostics = ControlDiagnostics(self)
        self._publish_enabled = True
        self._episodes_done = 0  # the next activation's first episode number
        self._train_episodes_done = 0  # over every activation: what ``episodes`` counts
        self._excitation_episodes_done = 0  # ... and what ``excitation_episodes`` counts
        self._rt_notes: list[str] = []
        self._control_fifo = False
        self._activation_base = 0  # the RT status's activation count when we last activated
        self._fault_guard = self.create_guard_condition(self._on_control_fault)
        self.create_timer(1.0, self._publish_diagnostics)
        self.add_on_set_parameters_callback(self._on_set_parameters)

    def _on_set_parameters(self, params: list[Any]) -> Any:
        """Refuse every change while configured: the node reads its parameters at configure.

        A limit (``max_action_v``) or a fault injection set on a configured node would not
        act until the next configure, yet read back as if it did; on an active one it is what
        nobody may change under an engaged motor. Deactivate and clean up first.
        """
        from rcl_interfaces.msg import SetParametersResult

        state = self._state_machine.current_state[1]
        if state == 'unconfigured':
            return SetParametersResult(successful=True)
        names = ', '.join(p.name for p in params)
        return SetParametersResult(
            successful=False,
            reason=(
                f'{names} cannot change while the node is configured (now {state}): parameters '
                'take effect at configure; deactivate and clean up first'
            ),
        )

    # -- lifecycle -------------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Read parameters, start the real-time process (it opens the rig), hand it the policy.

        SUCCESS: inactive, rig open in the real-time process, motor disengaged. FAILURE (bad
        parameter, no rig, bad policy): back to unconfigured with the reason logged; no
        process left running.
        """
        try:
            s = NodeSettings.from_node(self)
            actor = self._initial_actor(s)
            self._weights.remember(actor.version, self._initial_bytes(s, actor))
        except (ValueError, PolicyRejected, OSError) as exc:
            self.get_logger().error(f'configure failed: {exc}')
            return TransitionCallbackReturn.FAILURE
        rt = RtHandle(
            s.rt_config(),
            actor=actor,
            transition_floats=sum(n for _, n in field_layout(s.task.obs_size, ACTION_SIZE)),
        )
        try:
            ready = rt.start()
            if int(ready['deadman_ms']) > s.max_deadman_ms:
                # A host that stalls leaves the motor driven for this long.
                raise RtStartFailed(
                    f"the rig's firmware deadman is {ready['deadman_ms']} ms, more than "
                    f'max_deadman_ms {s.max_deadman_ms}: set its deadman shorter (SET_DEADMAN, '
                    'docs/serial_protocol.md) or raise max_deadman_ms'
                )
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
        self._outputs = LoopOutputs(
            self,
            s.run_dir,
            s.task.obs_size,
            s.tick_topic_max_hz,
            s.tick_trace,
            self._weights.learner_stats,
            s.run_id,
        )
        self._weights_sub = self.create_subscription(
            UInt8MultiArray,
            POLICY_WEIGHTS,
            self._on_weights,
            WEIGHTS_QOS,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
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
                s.policy,
                rate_hz=s.task.rate_hz,
                obs_size=s.task.obs_size,
                action_size=ACTION_SIZE,
                action_history=s.task.action_history,
            )
        if not s.allow_random_policy:
            raise ValueError(
                'no initial policy: set policy:=<file.safetensors> or allow_random_policy:=true'
            )
        return random_actor(
            s.task.obs_size,
            ACTION_SIZE,
            s.hidden_sizes,
            s.task.rate_hz,
            seed=s.loop.seed,
            action_history=s.task.action_history,
        )

    @staticmethod
    def _initial_bytes(s: NodeSettings, actor: NumpyActor) -> bytes:
        """The initial actor as a file's bytes (what ``policy_best`` starts as)."""
        if s.policy:
            return Path(s.policy).read_bytes()
        return encode_actor(actor.meta, actor.tensors)

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
        if self._outputs is not None:
            self._outputs.start_trace()
        self._activation_base = rt.status_from_pump().activation
        self._diagnostics.activated()  # the tick rate in the diagnostics counts from here
        if not rt.command(
            'activate',
            first_episode=self._episodes_done,
            train_episodes_done=self._train_episodes_done,
            excitation_episodes_done=self._excitation_episodes_done,
        ):
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
        if self._weights_sub is not None:
            self.destroy_subscription(self._weights_sub)
            self._weights_sub = None
        if self._outputs is not None:
            self._outputs.destroy()
            self._outputs = None
        if rt is not None:
            rt.kill()
            with self._rt_lock:
                rt.close()
                self._rt = None

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

    def _watch(self, rt: RtHandle) -> None:
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
        s, rt, out = self._settings, self._rt, self._outputs
        if s is None or rt is None or rt.ch is None or out is None or not out.alive:
            return
        rt.status_from_pump()  # first: the hung-loop watchdog reads it whatever fails below
        out.transitions(rt.transitions_from_pump(), publish)
        out.ticks(rt.ticks_from_pump(), publish)
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
            ep = EpisodeSummary(**{k: v for k, v in ev.items() if k != 'event'})
            rt, out = self._rt, self._outputs
            if out is not None:
                violations = rt.status.violations if rt is not None else 0
                out.episode(ep, violations, self._weights.learner_stats, publish)
            self._episodes_done = max(self._episodes_done, ep.episode + 1)
            if ep.kind == 'training':
                self._train_episodes_done += 1
            elif ep.kind == 'excitation':
                self._excitation_episodes_done += 1
            if ep.evaluation and self._settings is not None:
                log.info(self._weights.judged(ep, self._settings.run_dir))
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
        s, rt, out = self._settings, self._rt, self._outputs
        if s is not None and out is not None:
            st = rt.status if rt is not None else RtStatus()
            out.write_trace(s.task.rate_hz, st, self._control_fifo)

    # -- weights ---------------------------------------------------------------------------

    def _on_weights(self, msg: UInt8MultiArray) -> None:
        with self._rt_lock:  # the mapping stays while the weights go in
            self._take_weights(msg)

    def _take_weights(self, msg: UInt8MultiArray) -> None:
        s, rt = self._settings, self._rt
        if s is None or rt is None or rt.ch is None or self._rt_lost:
            return
        self._weights.take(msg.data, rt, s.task, s.run_id)

    # -- diagnostics -----------------------------------------------------------------------

    def _publish_diagnostics(self) -> None:
        s = self._settings
        self._diagnostics.publish(
            state=self._state_machine.current_state[1],
            rate_hz=s.task.rate_hz if s is not None else None,
            rt=self._rt,
            activation_base=self._activation_base,
            rt_lost=self._rt_lost,
            fault=self._fault,
            realtime_notes=self._rt_notes,
            fifo=self._control_fifo,
            weights=self._weights,
            outputs=self._outputs,
            motor_confirmed_off=self._motor_confirmed_off,
        )


def s_timeout(s: NodeSettings | None) -> float:
    """The serial timeout of the settings (0 without settings)."""
    return s.serial_timeout_s if s is not None else 0.0


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
    from rip_control.ros.node_params import run_node

    def start(node: ControlNode, stop: Any) -> MultiThreadedExecutor:
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
        return executor

    def way_out(node: ControlNode | None, executor: Any, code: int) -> int:
        confirmed = node is None or node.emergency_stop()  # at once, before anything else
        if executor is not None:
            executor.shutdown()  # waits for a transition in progress (configure, activate)
        if node is not None:
            if confirmed:  # that transition may have opened or engaged the rig since
                confirmed = node.emergency_stop()
            node._release()
            node.destroy_node()
        return code if confirmed else 1

    return run_node('rip_control', args, lambda stop: ControlNode(), start, way_out)


if __name__ == '__main__':
    sys.exit(main())
