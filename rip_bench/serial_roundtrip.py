"""Serial round trips to the rig: the Python emulator beside the C firmware's host build.

``python -m rip_bench serial-roundtrip --rate 500 --seconds 20 --repeats 3 --load sac``

For each repeat, each firmware in turn (the order alternates between repeats) is started
behind a pty, engaged, and driven as the control loop drives it: at ``--rate`` Hz, one
GET_STATE then one SET_VOLTAGE per tick through :class:`~rip_control.rig.client.LowLevelClient`.
Each request's round trip is timed on the host (write, the device's work, read back and
parse), and the device process's CPU use is read from ``/proc``. A request unanswered within
the client's 10 ms timeout (the control loop's) is counted, not timed; a deadman trip it
causes is counted and the rig engaged again. Figures per repeat and
pooled: mean, std, p50, p99, max in milliseconds; ``--load`` runs beside it throughout.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import tempfile
import time
from typing import Any

import numpy as np

from rip_bench.common import machine
from rip_bench.load import LOADS, Load
from rip_control.rig.client import LowLevelClient, RigProtocolError, RigTimeout
from rip_control.rig.emulator_process import EmulatorProcess
from rip_control.rig.host_firmware import FIRMWARES

NAME = 'serial-roundtrip'
HELP = 'serial round trips: the Python emulator beside the C firmware'


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``serial-roundtrip`` options."""
    ap.add_argument('--rate', type=float, default=500.0, help='requests pairs per second')
    ap.add_argument('--seconds', type=float, default=20.0, help='per firmware and repeat')
    ap.add_argument('--repeats', type=int, default=3)
    ap.add_argument('--load', choices=LOADS, default='none')


def _summary(ms: np.ndarray) -> dict[str, float]:
    return {
        'n': int(ms.size),
        'mean_ms': float(ms.mean()),
        'std_ms': float(ms.std()),
        'p50_ms': float(np.percentile(ms, 50)),
        'p99_ms': float(np.percentile(ms, 99)),
        'max_ms': float(ms.max()),
    }


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), in seconds."""
    fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def measure_one(firmware: str, rate: float, seconds: float, workdir: Path) -> dict[str, Any]:
    """Drive one firmware as the control loop does; its round trips and CPU use."""
    period = 1.0 / rate
    get_ms: list[float] = []
    set_ms: list[float] = []
    with EmulatorProcess(workdir / f'rig_{firmware}', [], firmware=firmware) as emu:
        assert emu.proc is not None
        with LowLevelClient(str(emu.link)) as client:
            client.engage()
            cpu0, wall0 = _cpu_seconds(emu.proc.pid), time.monotonic()
            deadline = wall0
            end = wall0 + seconds
            n_reengaged = 0
            while deadline < end:
                deadline += period
                t0 = time.perf_counter()
                try:
                    client.get_state()
                    t1 = time.perf_counter()
                    get_ms.append((t1 - t0) * 1e3)
                    client.set_voltage(0.0)
                    set_ms.append((time.perf_counter() - t1) * 1e3)
                except RigTimeout:
                    pass  # counted by the client (stats.timeouts)
                except RigProtocolError:  # NOT_ENGAGED: the deadman tripped meanwhile
                    client.engage()
                    n_reengaged += 1
                pause = deadline - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            cpu = (_cpu_seconds(emu.proc.pid) - cpu0) / (time.monotonic() - wall0)
            stats = client.stats
            client.disengage_motor()
    return {
        'firmware': firmware,
        'get_state': _summary(np.asarray(get_ms)),
        'set_voltage': _summary(np.asarray(set_ms)),
        'device_cpu_share': cpu,
        'timeouts': int(stats.timeouts),
        'reengaged': n_reengaged,
    }


def run(a: argparse.Namespace) -> dict[str, Any]:
    """All repeats under the load: the JSON record (printed as it goes, then as a table)."""
    workdir = Path(tempfile.mkdtemp(prefix='rip_rtt_'))
    with Load(a.load, workdir, 0) as load:
        doc = _measure(a, workdir)
        doc['load_result'] = load.result()
    doc['machine'] = machine()
    print(roundtrip_table(doc))
    return doc


def _measure(a: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Every repeat, each firmware in turn (alternating): the record without the load."""
    runs: list[dict[str, Any]] = []
    for repeat in range(a.repeats):
        order = FIRMWARES if repeat % 2 == 0 else FIRMWARES[::-1]
        for firmware in order:
            row = measure_one(firmware, a.rate, a.seconds, workdir)
            row['repeat'] = repeat
            runs.append(row)
            g = row['get_state']
            print(
                f'repeat {repeat} {firmware:>6}: GET_STATE {g["mean_ms"]:.3f} ms mean, '
                f'p99 {g["p99_ms"]:.3f}, max {g["max_ms"]:.3f}; device CPU '
                f'{100 * row["device_cpu_share"]:.1f} %, {row["timeouts"]} timeouts',
                flush=True,
            )
    return {
        'benchmark': 'serial-roundtrip',
        'rate_hz': a.rate,
        'seconds': a.seconds,
        'repeats': a.repeats,
        'load': a.load,
        'runs': runs,
    }


def table(records: list[dict[str, Any]]) -> str:
    """The round-trip table of each file, one after the other (a file is one rate and load)."""
    return '\n\n'.join(roundtrip_table(doc) for doc in records)


def roundtrip_table(doc: dict[str, Any]) -> str:
    """Markdown: per firmware, the spread over repeats of each figure (min-max)."""

    def spread(values: list[float], digits: int = 3) -> str:
        lo, hi = min(values), max(values)
        return (
            f'{lo:.{digits}f}'
            if f'{lo:.{digits}f}' == f'{hi:.{digits}f}'
            else (f'{lo:.{digits}f}-{hi:.{digits}f}')
        )

    rows = [
        f'| firmware ({doc["rate_hz"]:g} Hz, load {doc["load"]}, {doc["repeats"]} x '
        f'{doc["seconds"]:g} s) | GET_STATE mean | p99 | max | SET_VOLTAGE mean | p99 | max '
        '| device CPU | timeouts |',
        '|---|---|---|---|---|---|---|---|---|',
    ]
    for firmware in FIRMWARES:
        runs = [r for r in doc['runs'] if r['firmware'] == firmware]
        if not runs:
            continue
        cells = []
        for request in ('get_state', 'set_voltage'):
            for key in ('mean_ms', 'p99_ms', 'max_ms'):
                cells.append(spread([r[request][key] for r in runs]) + ' ms')
        cpu = spread([100 * r['device_cpu_share'] for r in runs], 1) + ' %'
        timeouts = sum(r['timeouts'] for r in runs)
        name = 'Python emulator' if firmware == 'python' else 'C firmware (host build)'
        rows.append(f'| {name} | {" | ".join(cells)} | {cpu} | {timeouts} |')
    return '\n'.join(rows)


TABLES = {NAME: table}
