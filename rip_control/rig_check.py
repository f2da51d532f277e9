"""Rig check: read the rig through the serial client at the control rate and report timing.

``python -m rip_control.rig_check [--port /dev/ttyUSB0] [--rate 50] [--seconds 5]``
``python -m rip_control.rig_check --port /dev/ttyUSB0 --excitation excitation.safetensors``
``python -m rip_control.rig_check --port /dev/ttyUSB0 --direction``
``python -m rip_control.rig_check --port /dev/ttyUSB0 --deadman``

With no ``--port`` it starts the rig emulator and talks to it through its pseudo-terminal
(the same serial code a physical rig uses). It engages the motor at 0 V (the heartbeat keeps
the firmware deadman fed), prints the rig state twice a second, disengages, and ends with
the measured loop rate and the serial round-trip latency (mean, p99, max).

``--direction`` then drives the arm a little each way (a voltage ramp of at most
``--direction-v``, stopped once the arm has turned a quarter radian) and checks that the arm
turns with the voltage and the pendulum swings against the arm's acceleration, as the
conventions say (docs/serial_protocol.md): a reversed motor lead or encoder is found here,
before a policy drives the rig at up to ``max_action_v``; it exits 1 naming the likely fault.

``--deadman`` then checks that the firmware's deadman stops the motor: it engages at 0 V,
feeds the heartbeat for a moment, then only reads the state (GET_STATE does not feed it)
until the driver goes off. It exits 1 if the motor is still engaged ``DEADMAN_LATE_MS``
after the firmware's own deadman setting (the check's command then turns it off), or if
something other than the deadman turned it off.

``--excitation FILE`` then runs the excitation episode (:mod:`rip_control.rig.excitation`:
the pendulum hanging, the arm centred, at most ``--max-action-v`` volts) in the control
loop the control node runs, and writes its transitions as a replay-buffer file for
``python -m rip_learner.identify buffer:=FILE out:=my_rig.yaml``. Every way out disengages.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
import sys
import tempfile

import numpy as np

from rip_control.params import CONTROL_PARAMETERS, table_by_name
from rip_control.rig.client import LowLevelClient, RigError, RigProtocolError, RigTimeout
from rip_control.rig.dynamics import FurutaDynamics, PendulumParams
from rip_control.rig.emulator_process import EmulatorProcess
from rip_control.rt.pacer import Pacer

_MAX_ACTION_V = table_by_name(CONTROL_PARAMETERS)['max_action_v']


class DirectionFault(RigError):
    """The rig moves against the conventions, or too little to tell (``--direction``)."""


class DeadmanFault(RigError):
    """The firmware's deadman did not stop the motor in time (``--deadman``)."""


def _stats_ms(values_s: list[float]) -> dict[str, float]:
    a = np.asarray(values_s) * 1e3
    return {
        'mean': float(a.mean()),
        'std': float(a.std()),
        'p99': float(np.percentile(a, 99)),
        'max': float(a.max()),
    }


# Ticks in a row without an answer before the check gives up on the rig (0.5 s at 50 Hz): a
# single late or missing reply is what the check is there to count, not a reason to stop.
MAX_FAILED_TICKS_IN_ROW = 25


def run_check(port: str, rate_hz: float, seconds: float) -> dict[str, object]:
    """Run the paced read loop; return the measured figures.

    A tick whose read or heartbeat gets no answer in time is counted and the loop goes on
    (re-engaging if the firmware deadman tripped meanwhile); only
    ``MAX_FAILED_TICKS_IN_ROW`` such ticks in a row end the check, with the last error.
    """
    client = LowLevelClient(port, timeout_s=0.02)
    info = client.open()
    print(
        f'rig: protocol v{info.protocol_version}, {info.counts_per_rev} counts/rev, '
        f'deadman {info.deadman_timeout_ms} ms, motor limit {info.max_voltage_mv / 1000:.1f} V',
        flush=True,
    )
    rad = 2.0 * math.pi / info.counts_per_rev
    pacer = Pacer(1.0 / rate_hz)
    n_ticks = max(1, round(seconds * rate_hz))
    dts: list[float] = []
    rtts: list[float] = []
    overruns: list[float] = []
    failed_ticks = failed_in_row = re_engaged = 0
    try:
        client.engage()
        pacer.start()
        for i in range(n_ticks):
            timing = pacer.wait()
            if i:
                dts.append(timing.dt_s)
                overruns.append(timing.overrun_s)
            try:
                state = client.get_state()
                rtts.append(client.stats.last_rtt_s)
                if not state.engaged:  # the deadman tripped while an answer was missing
                    client.engage()
                    re_engaged += 1
                client.set_voltage(0.0)  # heartbeat
                rtts.append(client.stats.last_rtt_s)
            except (RigTimeout, RigProtocolError) as exc:
                failed_ticks += 1
                failed_in_row += 1
                print(f'  tick {i}: {type(exc).__name__}: {exc}', flush=True)
                if failed_in_row >= MAX_FAILED_TICKS_IN_ROW:
                    raise
                continue
            failed_in_row = 0
            if i % max(1, round(rate_hz / 2)) == 0:
                print(
                    f'  t={state.timestamp_us / 1e6:7.3f}s arm={state.arm_counts * rad:+.3f} rad '
                    f'pendulum={state.pendulum_counts * rad:+.3f} rad status={state.status!r}',
                    flush=True,
                )
    finally:
        try:
            client.disengage_motor()
        finally:
            client.close()
    dt = _stats_ms(dts)
    result: dict[str, object] = {
        'target_rate_hz': rate_hz,
        'measured_rate_hz': 1e3 / dt['mean'],
        'n_ticks': n_ticks,
        'dt_ms': dt,
        'max_overrun_ms': max(overruns) * 1e3 if overruns else 0.0,
        'missed_ticks': pacer.n_missed,
        'serial_rtt_ms': _stats_ms(rtts),
        'serial_timeouts': client.stats.timeouts,
        'failed_ticks': failed_ticks,
        're_engaged': re_engaged,
    }
    return result


# The direction check (``--direction``): each move ramps the voltage up over RAMP_S until the
# arm has turned MOVE_RAD from where it started (or the ramp ends), then holds 0 V for HOLD_S.
DIRECTION_V = 3.0  # default top of the ramp, volts (above a worn motor's dead zone)
RAMP_S = 0.5
MOVE_RAD = 0.15
HOLD_S = 0.5
ARM_MOVED_RAD = 0.05  # an arm excursion below this is "did not move"
PENDULUM_SWUNG_RAD = 0.02  # the pendulum's first excursion beyond this gives its sign
PENDULUM_AT_REST_RAD = 0.1  # before the moves: still, and this close to its zero


def expected_signs(params: PendulumParams | None = None) -> tuple[int, int]:
    """The conventions, from the dynamics the emulator and the simulator share.

    ``(arm, pendulum)``: the sign of the arm's excursion under a positive voltage from rest
    hanging, and the sign of the pendulum's first excursion beyond ``PENDULUM_SWUNG_RAD``
    (it lags the arm: it swings against the arm's acceleration).
    """
    dyn = FurutaDynamics(params or PendulumParams())
    pend_sign = 0
    for _ in range(round(0.5 / dyn.params.physics_step_s)):
        dyn.step(dyn.params.physics_step_s, DIRECTION_V, True)
        if not pend_sign and abs(dyn.alpha) > PENDULUM_SWUNG_RAD:
            pend_sign = 1 if dyn.alpha > 0 else -1
    return (1 if dyn.theta > 0 else -1), pend_sign


#: What each pair of (arm agrees, pendulum agrees) means; None: the check passes.
DIRECTION_FAULTS = {
    (True, True): None,
    (False, False): 'the motor turns against the voltage: its leads are swapped (or both '
    'encoders count the wrong way)',
    (False, True): 'the arm encoder counts the wrong way (swap its A and B channels)',
    (True, False): 'the pendulum encoder counts the wrong way (swap its A and B channels)',
}


def _first_excursion(values: list[float], start: float, beyond: float) -> float:
    """The first value that is more than ``beyond`` from ``start``, less ``start`` (0.0: none)."""
    for v in values:
        if abs(v - start) > beyond:
            return v - start
    return 0.0


class _DirectionTicks:
    """The direction check's paced ticks: a state read and a voltage each, at the loop rate."""

    def __init__(self, client: LowLevelClient, rate_hz: float, counts_per_rev: int) -> None:
        self.client = client
        self.rad = 2.0 * math.pi / counts_per_rev
        self.pacer = Pacer(1.0 / rate_hz)
        self.last = (0.0, 0.0)  # (arm, pendulum) rad, the last answered reading
        self.failed_in_row = 0

    def tick(self, voltage: float) -> tuple[float, float]:
        """One paced read and voltage; a tick without an answer repeats the last reading."""
        client = self.client
        self.pacer.wait()
        try:
            state = client.get_state()
            if not state.engaged:
                raise DirectionFault(
                    'the motor was disengaged during the check (the deadman after the rig '
                    'stopped answering, or the emergency stop): run it again'
                )
            client.set_voltage(voltage)
        except (RigTimeout, RigProtocolError) as exc:
            self.failed_in_row += 1  # one late answer is this VM or a busy USB bus, not the rig
            print(f'  direction: {type(exc).__name__}: {exc}', flush=True)
            if self.failed_in_row >= MAX_FAILED_TICKS_IN_ROW:
                raise
            return self.last
        self.failed_in_row = 0
        self.last = (state.arm_counts * self.rad, state.pendulum_counts * self.rad)
        return self.last


def run_direction(port: str, rate_hz: float, volts: float) -> dict[str, object]:
    """Drive the arm a little both ways; check the signs against the conventions.

    From rest, the pendulum hanging: a ramp of positive voltage (at most ``volts``) until the
    arm has turned ``MOVE_RAD``, 0 V, then the same negative. Each move's arm excursion and
    the first move's pendulum swing (from rest; the second move starts with the pendulum
    still swinging) are compared with :func:`expected_signs`.

    :raises DirectionFault: the pendulum not at rest at its zero, the arm not moving, or a sign
        against the conventions, named with the likely wiring fault.
    """
    want_arm, want_pend = expected_signs()
    client = LowLevelClient(port, timeout_s=0.02)
    info = client.open()
    ticks = _DirectionTicks(client, rate_hz, info.counts_per_rev)
    moves: list[dict[str, float]] = []
    try:
        client.engage()
        ticks.pacer.start()
        _check_hanging_still(ticks, rate_hz)
        for sign in (1.0, -1.0):
            moves.append(_direction_move(ticks, sign * volts, rate_hz, from_rest=not moves))
    finally:
        try:
            client.disengage_motor()
        finally:
            client.close()
    _print_moves(moves, want_arm, want_pend)
    _check_signs(moves, volts, want_arm, want_pend)
    print('direction: the motor, the arm encoder and the pendulum encoder follow the conventions')
    return {'moves': moves, 'arm': 'agrees', 'pendulum': 'agrees'}


def _check_hanging_still(ticks: _DirectionTicks, rate_hz: float) -> None:
    """Half a second at 0 V: the pendulum must hang still at its zero, or DirectionFault."""
    rest = [ticks.tick(0.0) for _ in range(max(2, round(0.5 * rate_hz)))]
    pend = [p for _, p in rest]
    swing, mean = swing_peak_to_peak(pend), float(np.mean(pend))
    if swing > PENDULUM_SWUNG_RAD or abs(mean) > PENDULUM_AT_REST_RAD:
        raise DirectionFault(
            f'the pendulum is not hanging still at its zero (it reads {mean:+.3f} rad, '
            f'swinging {swing:.3f} rad peak to peak): its encoder counts from where it hung '
            'at power-on; let it hang still and power the rig up again'
        )


def swing_peak_to_peak(readings: list[float]) -> float:
    """The peak-to-peak of the sine swing with the readings' spread: 2 sqrt(2) times their std.

    Not max - min: that grows with a noisy encoder's extreme counts (at 1 count of noise,
    25 readings span 7 counts once in about 600 checks), while the spread of a swing is
    its amplitude over sqrt(2) and a few counts of noise barely move it.
    """
    return 2.0 * math.sqrt(2.0) * float(np.std(readings))


def _direction_move(
    ticks: _DirectionTicks, top_v: float, rate_hz: float, from_rest: bool
) -> dict[str, float]:
    """One move: a ramp towards ``top_v`` until the arm turns ``MOVE_RAD``, then 0 V held.

    Returns the last voltage, the arm's largest excursion (0.0 below ``ARM_MOVED_RAD``) and,
    ``from_rest`` only, the pendulum's first swing (NaN otherwise).
    """
    arm0, pend0 = ticks.tick(0.0)
    arms, pends = [arm0], [pend0]
    voltage = 0.0
    for i in range(1, round(RAMP_S * rate_hz) + 1):
        voltage = top_v * i / (RAMP_S * rate_hz)
        arm, p = ticks.tick(voltage)
        arms.append(arm)
        pends.append(p)
        if abs(arm - arm0) >= MOVE_RAD:
            break
    for _ in range(round(HOLD_S * rate_hz)):
        arm, p = ticks.tick(0.0)
        arms.append(arm)
        pends.append(p)
    turned = max((a - arm0 for a in arms), key=abs)
    return {
        'volts': voltage,
        'arm_rad': turned if abs(turned) >= ARM_MOVED_RAD else 0.0,
        # from rest only: the first move (the second starts with it still swinging)
        'pendulum_rad': _first_excursion(pends, pend0, PENDULUM_SWUNG_RAD)
        if from_rest
        else math.nan,
    }


def _print_moves(moves: list[dict[str, float]], want_arm: int, want_pend: int) -> None:
    """One line per move: what the arm (and the pendulum) did, and what was expected."""
    for m in moves:
        v = m['volts']
        swing = (
            f' and swung the pendulum first {m["pendulum_rad"]:+.3f} rad (expected '
            f'{"+" if want_pend * v > 0 else "-"})'
            if not math.isnan(m['pendulum_rad'])
            else ''
        )
        print(
            f'direction: {v:+.2f} V turned the arm {m["arm_rad"]:+.3f} rad (expected '
            f'{"+" if want_arm * v > 0 else "-"}){swing}',
            flush=True,
        )


def _check_signs(
    moves: list[dict[str, float]], volts: float, want_arm: int, want_pend: int
) -> None:
    """Raise DirectionFault, naming the likely fault, unless both moves follow the conventions."""
    still = [m for m in moves if m['arm_rad'] == 0.0]
    if still:
        raise DirectionFault(
            f'the arm did not move {ARM_MOVED_RAD} rad at up to {volts:g} V: the driver off or '
            'unpowered, the motor unplugged, or a dead zone or friction above that (try '
            '--direction-v with more)'
        )
    arm_ok = all(m['arm_rad'] * m['volts'] * want_arm > 0 for m in moves)
    first = moves[0]
    pend_ok = first['pendulum_rad'] * first['volts'] * want_pend > 0
    if first['pendulum_rad'] == 0.0:
        raise DirectionFault(
            'the pendulum did not swing when the arm moved: its encoder is not counting '
            '(unplugged?)'
        )
    fault = DIRECTION_FAULTS[(arm_ok, pend_ok)]
    if fault is not None:
        raise DirectionFault(f'{fault}; a policy would drive this rig the wrong way')


# The deadman check (``--deadman``): the heartbeat fed this long first, then the state read
# every DEADMAN_POLL_S; the motor must be off within the firmware's own setting plus this
# much (a poll, a serial round trip, a USB frame).
DEADMAN_FEED_S = 0.3
DEADMAN_POLL_S = 0.002
DEADMAN_LATE_MS = 50.0


def run_deadman(port: str, rate_hz: float) -> dict[str, object]:
    """Stop the heartbeat with the motor engaged at 0 V; the firmware's deadman must act.

    :raises DeadmanFault: the motor still engaged ``DEADMAN_LATE_MS`` after the deadman
        setting (turned off by this check's command then), or turned off without the
        deadman's status bit (the emergency stop, a reset).
    """
    import time

    from rip_control.rig.protocol import Status

    client = LowLevelClient(port, timeout_s=0.02)
    info = client.open()
    setting_ms = float(info.deadman_timeout_ms)
    pacer = Pacer(1.0 / rate_hz)
    try:
        client.engage()
        pacer.start()
        for _ in range(max(2, round(DEADMAN_FEED_S * rate_hz))):
            pacer.wait()
            client.set_voltage(0.0)
        fed = time.monotonic()  # the last heartbeat's answer: the deadman counts from before it
        if not client.get_state().engaged:
            raise DeadmanFault('the motor was off before the heartbeat stopped: run it again')
        while True:
            # The time first, then the state: a pause of this process between the two (a
            # busy host) makes the reading later, never the motor look on for longer.
            waited_ms = (time.monotonic() - fed) * 1e3
            state = client.get_state()  # not a heartbeat
            if not state.engaged:
                break
            if waited_ms > setting_ms + DEADMAN_LATE_MS:
                raise DeadmanFault(
                    f'the motor was still engaged {waited_ms:.0f} ms after the last heartbeat; '
                    f'the firmware says its deadman is {setting_ms:.0f} ms: it does not act. '
                    'Do not run a policy on this rig (this check has turned the motor off)'
                )
            time.sleep(DEADMAN_POLL_S)
    finally:
        try:
            client.disengage_motor()
        finally:
            client.close()
    if not state.status & Status.DEADMAN_TRIPPED:
        raise DeadmanFault(
            f'the motor went off {waited_ms:.0f} ms after the last heartbeat, but not by the '
            'deadman (its status bit is clear): the emergency stop, or a reset; run it again'
        )
    print(
        f'deadman: the motor went off {waited_ms:.0f} ms after the last heartbeat (the '
        f"firmware's setting: {setting_ms:.0f} ms)",
        flush=True,
    )
    return {'setting_ms': setting_ms, 'off_after_ms': waited_ms}


def run_excitation(port: str, rate_hz: float, max_action_v: float, out: Path) -> dict[str, object]:
    """Run the excitation episode and save its transitions.

    The excitation episode in the control loop (reset first, as every episode); its
    transitions saved as a replay-buffer file at ``out``. Returns what it did.
    """
    import threading

    from rip_control import buffer_file
    from rip_control.rig.env import (
        ACTION_SIZE,
        RealRotaryInvertedPendulumEnv,
        TaskConfig,
    )
    from rip_control.rt.loop import ControlLoop, EpisodeSummary, LoopConfig, TickSample
    from rip_control.rt.outbox import Outbox
    from rip_control.transitions import Transition

    class _NoActor:  # the excitation needs none; a training episode never starts here
        def read_from_rt(self) -> object:
            raise RuntimeError('rig_check drives no policy')

    task = TaskConfig.from_params(rate_hz=rate_hz, max_action_v=max_action_v)
    cfg = LoopConfig.from_params({'excitation_episodes': 1})
    client = LowLevelClient(port, timeout_s=0.02)
    client.open()
    transitions: Outbox[Transition] = Outbox(100_000, holdback=cfg.max_strikes - 1)
    episodes: Outbox[EpisodeSummary] = Outbox(10)
    ticks: Outbox[TickSample] = Outbox(1)  # per-tick samples are not kept here
    done: list[EpisodeSummary] = []
    stop = threading.Event()

    def after_tick() -> None:
        while ticks.pop_from_non_rt() is not None:
            pass
        while (ep := episodes.pop_from_non_rt()) is not None:
            done.append(ep)
            stop.set()  # the excitation is the only episode

    print(f'excitation: {cfg.excitation_episodes} episode, at most {max_action_v:g} V', flush=True)
    try:
        env = RealRotaryInvertedPendulumEnv(client, task)
        loop = ControlLoop(env, cfg, _NoActor(), transitions, ticks, episodes)  # type: ignore[arg-type]
        loop.run(stop, after_tick=after_tick)
        after_tick()
    finally:
        client.close()
    got = []
    while (t := transitions.pop_from_non_rt()) is not None:
        got.append(t)
    if not done or not got:
        raise RigError('the excitation episode did not finish: nothing written')
    arrays = buffer_file.arrays_from_transitions(got)
    meta = buffer_file.BufferMeta(rate_hz, task.obs_size, ACTION_SIZE, len(got), 0)
    buffer_file.save(out, arrays, meta)
    ep, st = done[0], loop.status
    # A failed tick cuts the episode (what it recorded stays, the episode runs again); a late
    # tick's transition is dropped for its dt. Either changes the count: said, not hidden.
    troubles = []
    if st.serial_errors:
        troubles.append(f'{st.serial_errors} serial error(s), the episode run again')
    if st.transitions_dropped_late:
        troubles.append(f'{st.transitions_dropped_late} late transition(s) dropped')
    print(
        f'excitation: {ep.n_ticks} ticks, tick {ep.dt_mean_s * 1e3:.3f} ± '
        f'{ep.dt_std_s * 1e3:.3f} ms, {len(got)} transitions written to {out}'
        + (f' ({"; ".join(troubles)})' if troubles else '')
        + ('; it ENDED AT THE ARM LIMIT' if ep.terminated else ''),
        flush=True,
    )
    return {
        'ticks': ep.n_ticks,
        'transitions': len(got),
        'terminated': ep.terminated,
        'serial_errors': st.serial_errors,
        'transitions_dropped_late': st.transitions_dropped_late,
    }


def _arg_parser() -> argparse.ArgumentParser:
    """The command line: port, rate and duration, then the optional checks."""
    ap = argparse.ArgumentParser(prog='rig_check', description=__doc__.splitlines()[0])
    ap.add_argument('--port', default='', help='serial device; empty: start the emulator')
    ap.add_argument('--rate', type=float, default=50.0, help='loop rate, Hz (default %(default)s)')
    ap.add_argument('--seconds', type=float, default=5.0, help='duration (default %(default)s)')
    ap.add_argument('--json', default='', help='also write the figures to this JSON file')
    ap.add_argument(
        '--excitation',
        default='',
        metavar='FILE',
        help='then run the excitation episode and write its transitions (a replay-buffer file) '
        'here, for rip_learner.identify',
    )
    ap.add_argument(
        '--max-action-v',
        type=float,
        default=_MAX_ACTION_V.default,
        help="the excitation's voltage limit (default %(default)s, the control node's)",
    )
    ap.add_argument(
        '--direction',
        action='store_true',
        help='then drive the arm a little both ways and check the motor and encoder signs '
        'against the conventions (docs/serial_protocol.md)',
    )
    ap.add_argument(
        '--deadman',
        action='store_true',
        help='then stop the heartbeat with the motor engaged at 0 V and check that the '
        "firmware's deadman turns it off in time",
    )
    ap.add_argument(
        '--direction-v',
        type=float,
        default=DIRECTION_V,
        help="top of the direction check's voltage ramp (default %(default)s, at most "
        '--max-action-v)',
    )
    return ap


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The arguments, validated (a bad one ends the program with status 2, named)."""
    ap = _arg_parser()
    args = ap.parse_args(argv)
    if not (args.rate > 0 and args.seconds > 0):
        ap.error(f'--rate and --seconds must be > 0, got {args.rate} and {args.seconds}')
    try:
        _MAX_ACTION_V.convert(args.max_action_v, f'--max-action-v {args.max_action_v:g}')
    except ValueError as exc:
        ap.error(str(exc))
    if not 0 < args.direction_v <= args.max_action_v:
        ap.error(
            f'--direction-v must be in (0, --max-action-v {args.max_action_v:g}], '
            f'got {args.direction_v:g}'
        )
    return args


def _print_figures(result: dict[str, object], rate_hz: float) -> None:
    """The loop's timing, the serial round trip and any ticks without an answer."""
    dt = result['dt_ms']
    rtt = result['serial_rtt_ms']
    assert isinstance(dt, dict) and isinstance(rtt, dict)
    print(
        f'loop: target {rate_hz:.1f} Hz, measured {result["measured_rate_hz"]:.3f} Hz over '
        f'{result["n_ticks"]} ticks; dt mean {dt["mean"]:.3f} ms std {dt["std"]:.3f} '
        f'p99 {dt["p99"]:.3f} max {dt["max"]:.3f}; missed {result["missed_ticks"]}'
    )
    print(
        f'serial round trip: mean {rtt["mean"]:.3f} ms, p99 {rtt["p99"]:.3f} ms, '
        f'max {rtt["max"]:.3f} ms; timeouts {result["serial_timeouts"]}'
    )
    if result['failed_ticks']:
        print(
            f'rig_check: warning: {result["failed_ticks"]} of {result["n_ticks"]} ticks got no '
            f'answer in time (re-engaged after the deadman {result["re_engaged"]} time(s))'
        )


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = _parse_args(argv)
    emulator: EmulatorProcess | None = None
    port = args.port
    if not port:
        link = Path(tempfile.gettempdir()) / f'rip_rig_check_{os.getpid()}'
        emulator = EmulatorProcess(link).start()
        print(f'started rig emulator: {emulator.ready_line}', flush=True)
        port = str(link)
    try:
        result = run_check(port, args.rate, args.seconds)
        if args.direction:
            result['direction'] = run_direction(port, args.rate, args.direction_v)
        if args.deadman:
            result['deadman'] = run_deadman(port, args.rate)
        if args.excitation:
            result['excitation'] = run_excitation(
                port, args.rate, args.max_action_v, Path(args.excitation)
            )
    except RigError as exc:
        print(f'rig_check: {type(exc).__name__}: {exc}', file=sys.stderr)
        return 1
    finally:
        if emulator is not None:
            emulator.stop()
    _print_figures(result, args.rate)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
