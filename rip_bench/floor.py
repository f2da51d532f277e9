"""The timing floor of this machine: the bare single-threaded pacer process.

``python -m rip_bench.floor --rate 100 --seconds 60 --cpu 1 --out floor.npz`` (the
benchmarks build that command line with :func:`command`).

One Python thread, SCHED_FIFO, pinned, memory locked, collector off, the same two-stage
pacer as the control loop, and a 64x64 MLP forward pass per tick - no serial I/O, no
channels. ``python -m rip_bench timing --baseline floor`` runs it under the same load as the
control node, so every figure of the node is also reported as a ratio to what this machine
can do at all.
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import signal
import sys
import time
from typing import Any

import numpy as np

from rip_bench.common import module_command
from rip_control.files import atomic_write_bytes
from rip_control.policy import random_actor
from rip_control.rt.pacer import Pacer
from rip_control.rt.realtime import hold_cpu_latency, is_fifo, lock_memory, pin_to_cpu, set_fifo


def run(
    rate_hz: float,
    seconds: float,
    cpu: int,
    fifo_priority: int,
    spin_s: float = 0.001,
    cpu_idle_latency_us: int = -1,
) -> dict[str, Any]:
    """Tick for ``seconds``; the per-tick dt, overrun and previous work."""
    notes = [lock_memory() or 'memory locked', pin_to_cpu(cpu) or f'cpu {cpu}']
    notes.append(hold_cpu_latency(cpu_idle_latency_us))
    if fifo_priority > 0:
        notes.append(set_fifo(fifo_priority) or f'SCHED_FIFO {fifo_priority}')
    actor = random_actor(5, 1, (64, 64), rate_hz)
    obs = np.zeros(5, np.float32)
    rng = np.random.default_rng(0)
    n = int(rate_hz * seconds)
    dt = np.zeros(n)
    overrun = np.zeros(n)
    work = np.zeros(n)
    gc.collect()
    gc.freeze()
    gc.disable()
    pacer = Pacer(1.0 / rate_hz, spin_s=spin_s)
    last_release = pacer.start()
    work_end = last_release
    for i in range(n):
        work_end = time.monotonic()
        t = pacer.wait()
        work[i] = work_end - last_release
        last_release = t.tick_time_s + t.overrun_s
        dt[i], overrun[i] = t.dt_s, t.overrun_s
        actor.act(obs, rng.standard_normal(1).astype(np.float32))
    gc.enable()
    print('floor: ' + ', '.join(notes), flush=True)
    return {
        'dt_s': dt,
        'overrun_s': overrun,
        'prev_work_s': work,
        'fifo': np.bool_(is_fifo()),
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='python -m rip_bench.floor', description=__doc__)
    p.add_argument('--rate', type=float, required=True)
    p.add_argument('--seconds', type=float, required=True)
    p.add_argument('--cpu', type=int, default=max(os.sched_getaffinity(0)))
    p.add_argument('--fifo', type=int, default=80)
    p.add_argument('--spin-ms', type=float, default=1.0, help='busy-wait before each deadline')
    p.add_argument(
        '--cpu-latency-us', type=int, default=-1, help='idle exit latency to hold (-1: leave it)'
    )
    p.add_argument('--out', required=True, help='.npz with the per-tick figures')
    return p


def command(**options: Any) -> list[str]:
    """The command line that runs the floor with ``options`` (its long options' names).

    ``command(rate=100, seconds=60, out='f.npz')``; an option not given keeps its default.

    :raises ValueError: an option it does not have, named.
    """
    return module_command('rip_bench.floor', _parser(), options)


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    a = _parser().parse_args(argv)
    # A stop signal (a benchmark that used it as a stand-in control loop) ends it quietly,
    # with nothing written: its figures are only kept from a run of the full length.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        arrays = run(a.rate, a.seconds, a.cpu, a.fifo, a.spin_ms / 1e3, a.cpu_latency_us)
    except KeyboardInterrupt:
        return 130
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(a.out, buf.getvalue())
    return 0


if __name__ == '__main__':
    sys.exit(main())
