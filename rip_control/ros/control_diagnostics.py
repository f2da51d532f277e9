"""The control node's ``/diagnostics`` report: one status a second, its level and its values.

Levels: ERROR when the real-time process is lost or the loop stopped on a fault (a timing
violation, a serial failure); WARN when the tick rate is more than 1 % off its target, or
on serial errors, line noise or refused weights; OK otherwise. The values are the contract
the README documents (``tick_rate_hz``, ``policy_version``, ``transitions_*``, ...).
"""

from __future__ import annotations

import time
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

from rip_control.ros.loop_outputs import LoopOutputs
from rip_control.ros.qos import DIAGNOSTICS, STATUS_QOS
from rip_control.ros.weights_intake import WeightsIntake
from rip_control.rt.handle import RtHandle, describe_exit
from rip_control.rt.layout import RtStatus


def fault_name(exc: BaseException) -> str:
    """The name of a fault: the real-time process's exception type for one it reported."""
    return getattr(exc, 'name', type(exc).__name__)


class TickRate:
    """The loop's tick rate between two reports, counted over its own deadlines.

    Over a report's wall-clock window one tick more or less (2 % at 50 Hz) would come and go
    with the timer's jitter and cross the 1 % WARN threshold; ticks over the span of their
    own deadlines are exact while none is missed. The first report after an activation also
    spans the start-up: it is reported but never warns (:attr:`settled` is False for it).
    """

    def __init__(self) -> None:
        self.restart(time.monotonic())

    def restart(self, now: float) -> None:
        """An activation: count from ``now``."""
        self._prev_t, self._prev_ticks = now, 0
        self._reports = 0

    @property
    def settled(self) -> bool:
        """A report before this one was made while active: the rate may warn."""
        return self._reports > 0

    def update(self, ticks: int, last_tick_s: float, now: float) -> float:
        """The rate since the previous call, from the tick count and the last tick's deadline."""
        if self._prev_ticks and ticks > self._prev_ticks:
            rate = (ticks - self._prev_ticks) / (last_tick_s - self._prev_t)
        elif ticks > self._prev_ticks:  # the first report after an activation
            rate = ticks / max(now - self._prev_t, 1e-9)
        else:
            rate = 0.0  # no tick since the last report
        self._prev_t, self._prev_ticks = (last_tick_s if ticks else now), ticks
        return rate

    def reported(self, active: bool) -> None:
        """A report went out; from the next one on, an active loop's rate may warn."""
        if active:
            self._reports += 1


def _loop_values(st: RtStatus, rate: float) -> dict[str, Any]:
    return {
        'tick_rate_hz': rate,
        'ticks': st.ticks,  # since the activation
        'dt_mean_ms': st.dt_mean_s * 1e3,
        'dt_std_ms': st.dt_std_s * 1e3,
        'max_overrun_ms': st.max_overrun_s * 1e3,
        'strikes': st.strikes_total,
        'violations': st.violations,
        'missed_ticks': st.missed_ticks,
        'serial_errors': st.serial_errors,
        'serial_timeouts': st.serial_timeouts,
        'serial_stale_replies': st.serial_stale_replies,
        'serial_bad_frames': st.serial_bad_frames,
        'serial_bytes_skipped': st.serial_bytes_skipped,
        # Since the activation, each queued transition is published, withdrawn or dropped by
        # a full ring; one dropped late was never queued.
        'transitions_queued': st.transitions_queued,
        'outbox_dropped': st.transitions_dropped_full,
        'transitions_withdrawn': st.transitions_withdrawn,
        'transitions_dropped_late': st.transitions_dropped_late,
        'episodes': st.episodes,
        'phase': st.phase_name,
    }


class ControlDiagnostics:
    """Publishes the node's status on ``/diagnostics`` (the caller's timer calls :meth:`publish`).

    :param node: the control node (name, namespace, clock, publisher).
    """

    def __init__(self, node: Any) -> None:
        self._node = node
        self._pub = node.create_publisher(DiagnosticArray, DIAGNOSTICS, STATUS_QOS)
        self.rate = TickRate()

    def activated(self) -> None:
        """The loop was (re)activated: the tick rate counts from now."""
        self.rate.restart(time.monotonic())

    def publish(
        self,
        *,
        state: str,
        rate_hz: float | None,
        rt: RtHandle | None,
        activation_base: int,
        rt_lost: str,
        fault: BaseException | None,
        realtime_notes: list[str],
        fifo: bool,
        weights: WeightsIntake,
        outputs: LoopOutputs | None,
        motor_confirmed_off: bool = False,
    ) -> None:
        """One report: the lifecycle state, and with a loop configured its figures.

        :param rate_hz: the configured rate (None: not configured).
        :param activation_base: the process's activation count when the node last activated
            (the loop's figures are reported once it has started that activation).
        :param rt_lost: why the real-time process is gone ('' while it is not).
        :param fault: what stopped the loop in this activation, if anything.
        :param motor_confirmed_off: the rig confirmed the disengage of the last stop.
        """
        node = self._node
        status = DiagnosticStatus(
            name=f'{node.get_fully_qualified_name().lstrip("/")}: control loop',
            hardware_id=f'rip_rig{node.get_namespace().rstrip("/")}',
        )
        # Why the loop stopped, apart from the message (which warnings overwrite): a
        # supervisor tells an operator's deactivate (no fault) from a trip by these.
        values: dict[str, Any] = {
            'lifecycle_state': state,
            'fault': fault_name(fault) if fault is not None else ('lost' if rt_lost else 'none'),
            'motor_confirmed_off': motor_confirmed_off,
        }
        level, message = DiagnosticStatus.OK, state
        if rt_lost:
            level, message = DiagnosticStatus.ERROR, f'real-time process lost: {rt_lost}'
        if rate_hz is not None and rt is not None:
            st = rt.status
            values.update(_process_values(rate_hz, rt, weights, outputs, realtime_notes, fifo))
            if st.activation > activation_base:
                rate = self.rate.update(st.ticks, st.last_tick_s, time.monotonic())
                values.update(_loop_values(st, rate))
                verdict = (
                    None
                    if rt_lost
                    else _verdict(st, fault, state, rate, rate_hz, self.rate.settled, weights)
                )
                if verdict is not None:
                    level, message = verdict
                self.rate.reported(state == 'active')
        status.level = level
        status.message = message
        status.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        arr = DiagnosticArray()
        arr.header.stamp = node.get_clock().now().to_msg()
        arr.status = [status]
        self._pub.publish(arr)


def _process_values(
    rate_hz: float,
    rt: RtHandle,
    weights: WeightsIntake,
    outputs: LoopOutputs | None,
    realtime_notes: list[str],
    fifo: bool,
) -> dict[str, Any]:
    """The configured loop's figures: policy, weights and guard, outputs, the process."""
    st = rt.status
    return dict(
        target_rate_hz=rate_hz,
        policy_version=st.policy_version,
        policy_age_s=(time.monotonic() - st.policy_swapped_at_s)
        if st.policy_swapped_at_s
        else -1.0,
        policy_swap_max_ms=st.swap_max_s * 1e3,
        weights_accepted=weights.accepted,
        weights_rejected=weights.rejected,
        last_weights_rejection=weights.last_rejection or 'none',
        live_policy_version=weights.live_version,
        best_policy_version=weights.best_version,
        best_eval_return=weights.best_score,
        guard_promoted=weights.promoted,
        guard_rejected=weights.rejected_by_guard,
        last_guard_verdict=weights.last_verdict,
        transitions_published=outputs.published if outputs else 0,
        transitions_subscribers=outputs.subscribers() if outputs else 0,
        transitions_unmatched=outputs.unmatched if outputs else 0,
        transitions_unsent=outputs.unsent if outputs else 0,
        files_unwritten=outputs.unwritten if outputs else 0,
        last_file_error=(outputs.last_file_error if outputs else '') or 'none',
        control_process=f'pid {rt.pid} ({describe_exit(rt.poll())})',
        realtime=', '.join(realtime_notes),
        control_thread_fifo=fifo,
    )


def _verdict(
    st: Any,
    fault: BaseException | None,
    state: str,
    rate: float,
    rate_hz: float,
    settled: bool,
    weights: WeightsIntake,
) -> tuple[Any, str] | None:
    """The report's level and message for a running activation (None: all is well).

    ``settled``: the tick rate has been measured long enough to be judged.
    """
    if st.violations or fault is not None:
        return DiagnosticStatus.ERROR, (
            f'stopped: {fault_name(fault)}: {fault}' if fault else 'violation'
        )
    if state == 'active' and settled and abs(rate - rate_hz) > 0.01 * rate_hz:
        return DiagnosticStatus.WARN, f'tick rate {rate:.2f} Hz'
    if st.serial_errors or st.serial_bad_frames or st.serial_bytes_skipped or weights.rejected:
        return DiagnosticStatus.WARN, 'serial errors, line noise or rejected weights'
    return None
