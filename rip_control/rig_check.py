"""Rig check: read the rig through the serial client at the control rate and report timing.

``python -m rip_control.rig_check [--port /dev/ttyUSB0] [--rate 50] [--seconds 5]``

With no ``--port`` it starts the rig emulator and talks to it through its pseudo-terminal
(the same serial code a physical rig uses). It engages the motor at 0 V (the heartbeat keeps
the firmware deadman fed), prints the rig state twice a second, disengages, and ends with
the measured loop rate and the serial round-trip latency (mean, p99, max).
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

from rip_control.rig.client import LowLevelClient, RigError
from rip_control.rig.emulator_process import EmulatorProcess
from rip_control.rt.pacer import Pacer


def _stats_ms(values_s: list[float]) -> dict[str, float]:
    a = np.asarray(values_s) * 1e3
    return {
        'mean': float(a.mean()),
        'std': float(a.std()),
        'p99': float(np.percentile(a, 99)),
        'max': float(a.max()),
    }


def run_check(port: str, rate_hz: float, seconds: float) -> dict[str, object]:
    """Run the paced read loop; return the measured figures."""
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
    try:
        client.engage()
        pacer.start()
        for i in range(n_ticks):
            timing = pacer.wait()
            if i:
                dts.append(timing.dt_s)
                overruns.append(timing.overrun_s)
            state = client.get_state()
            rtts.append(client.stats.last_rtt_s)
            client.set_voltage(0.0)  # heartbeat
            rtts.append(client.stats.last_rtt_s)
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
    }
    return result


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(prog='rig_check', description=__doc__.splitlines()[0])
    ap.add_argument('--port', default='', help='serial device; empty: start the emulator')
    ap.add_argument('--rate', type=float, default=50.0, help='loop rate, Hz (default %(default)s)')
    ap.add_argument('--seconds', type=float, default=5.0, help='duration (default %(default)s)')
    ap.add_argument('--json', default='', help='also write the figures to this JSON file')
    args = ap.parse_args(argv)
    if not (args.rate > 0 and args.seconds > 0):
        ap.error(f'--rate and --seconds must be > 0, got {args.rate} and {args.seconds}')

    emulator: EmulatorProcess | None = None
    port = args.port
    if not port:
        link = Path(tempfile.gettempdir()) / f'rip_rig_check_{os.getpid()}'
        emulator = EmulatorProcess(link).start()
        print(f'started rig emulator: {emulator.ready_line}', flush=True)
        port = str(link)
    try:
        result = run_check(port, args.rate, args.seconds)
    except RigError as exc:
        print(f'rig_check: {type(exc).__name__}: {exc}', file=sys.stderr)
        return 1
    finally:
        if emulator is not None:
            emulator.stop()
    dt = result['dt_ms']
    rtt = result['serial_rtt_ms']
    assert isinstance(dt, dict) and isinstance(rtt, dict)
    print(
        f'loop: target {args.rate:.1f} Hz, measured {result["measured_rate_hz"]:.3f} Hz over '
        f'{result["n_ticks"]} ticks; dt mean {dt["mean"]:.3f} ms std {dt["std"]:.3f} '
        f'p99 {dt["p99"]:.3f} max {dt["max"]:.3f}; missed {result["missed_ticks"]}'
    )
    print(
        f'serial round trip: mean {rtt["mean"]:.3f} ms, p99 {rtt["p99"]:.3f} ms, '
        f'max {rtt["max"]:.3f} ms; timeouts {result["serial_timeouts"]}'
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
