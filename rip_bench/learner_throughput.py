"""``learner-throughput``: SAC updates/s per network size, torch threads and implementation.

``python -m rip_bench learner-throughput --seconds 10``

``sb3``: SB3's own ``train()``; ``fast``: :mod:`rip_learner.fast_sac`'s update; ``shipped``:
the same with the shipped safeguards (prior data, CAPS term). Each configuration runs in its
own process (:mod:`rip_bench.train_load`). With ``--control-loop-hz`` the bare pacer process
(:mod:`rip_bench.floor`, SCHED_FIFO, pinned to the last CPU) ticks at that rate throughout,
as a control loop would.
"""

from __future__ import annotations

import argparse
from contextlib import ExitStack
import itertools
import json
from pathlib import Path
import subprocess
import tempfile
from typing import Any

import numpy as np

from rip_bench import floor, train_load
from rip_bench.common import shipped
from rip_control.procs import child_env, stop_process

NAME = 'learner-throughput'
HELP = 'SAC updates/s by configuration'


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``learner-throughput`` options."""
    ap.add_argument('--hidden', nargs='+', default=['256,256', '128,128', '64,64'])
    ap.add_argument('--threads', nargs='+', type=int, default=[1, 2])
    ap.add_argument(
        '--impl',
        nargs='+',
        choices=train_load.IMPLS,
        default=['sb3', 'fast'],
        help="SB3's train(); fast_sac's; fast_sac's with the shipped prior data and CAPS",
    )
    ap.add_argument('--chunk', type=int, default=4, help='gradient steps per train() call')
    ap.add_argument('--repeat', type=int, default=1, help='runs of each configuration')
    ap.add_argument(
        '--control-loop-hz',
        type=float,
        default=0.0,
        help='run the bare pacer process at this rate throughout (0: none)',
    )
    ap.add_argument('--batch', type=int, default=shipped('batch_size'))
    ap.add_argument('--seconds', type=float, default=15.0)


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Every configuration, each in its own process: the JSON record (one row each)."""
    rows = []
    with ExitStack() as stack:
        loop_note = 'none'
        if a.control_loop_hz > 0:
            total = a.seconds * len(a.hidden) * len(a.threads) * len(a.impl) * a.repeat * 2 + 120
            out = Path(tempfile.mkdtemp(prefix='rip_thr_loop_')) / 'floor.npz'
            cmd = floor.command(rate=a.control_loop_hz, seconds=total, cpu_latency_us=0, out=out)
            loop = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.DEVNULL)
            stack.callback(stop_process, loop)
            loop_note = f'bare pacer process at {a.control_loop_hz:g} Hz on the last CPU'
        for hidden, threads, rep in itertools.product(a.hidden, a.threads, range(a.repeat)):
            by_impl = {}
            for impl in a.impl:
                out = Path(tempfile.mkdtemp(prefix='rip_thr_')) / 'r.json'
                cmd = train_load.command(
                    hidden=hidden,
                    threads=threads,
                    batch=a.batch,
                    seconds=a.seconds,
                    prefill=5000,
                    chunk=a.chunk,
                    impl=impl,
                    json=out,
                )
                subprocess.run(cmd, env=child_env(), check=True, stdout=subprocess.DEVNULL)
                row = json.loads(out.read_text())
                row['repeat'] = rep
                rows.append(row)
                by_impl[impl] = row['updates_per_s']
                print(
                    f'nets [{hidden}] batch {a.batch} torch threads {threads} {impl}: '
                    f'{row["updates_per_s"]:.0f} updates/s',
                    flush=True,
                )
            for impl in ('fast', 'shipped'):
                if impl in by_impl and by_impl.get('sb3', 0) > 0:
                    print(f'  {impl} / sb3: {by_impl[impl] / by_impl["sb3"]:.2f}x', flush=True)
    return {
        'benchmark': 'learner-throughput',
        'control_loop': loop_note,
        'chunk': a.chunk,
        'rows': rows,
    }


def table(records: list[dict[str, Any]]) -> str:
    """The throughput table of each file, one after the other."""
    return '\n\n'.join(throughput_table(doc) for doc in records)


def throughput_table(doc: dict[str, Any]) -> str:
    """Markdown: updates/s per implementation, and each repeat's against SB3's.

    The implementations of one repeat run back to back, so only they compare.
    """
    rows = [
        '| nets | batch | torch threads | implementation | updates/s, mean (min-max) | '
        'x SB3 train(), per repeat |',
        '|---|---|---|---|---|---|',
    ]
    groups: dict[tuple[Any, ...], dict[str, dict[int, float]]] = {}
    for r in doc['rows']:
        key = (tuple(r['hidden_sizes']), r['batch_size'], r['torch_threads'])
        groups.setdefault(key, {}).setdefault(r['impl'], {})[r.get('repeat', 0)] = r[
            'updates_per_s'
        ]
    for (hidden, batch, threads), impls in groups.items():
        for impl, by_rep in impls.items():
            v = list(by_rep.values())
            sb3 = impls.get('sb3', {})
            ratios = [f'{by_rep[k] / sb3[k]:.2f}' if sb3.get(k) else '-' for k in sorted(by_rep)]
            ratio = ', '.join(ratios) if impl != 'sb3' else ''
            rows.append(
                f'| {list(hidden)} | {batch} | {threads} | {impl} | {np.mean(v):.0f} '
                f'({min(v):.0f}-{max(v):.0f}) | {ratio} |'
            )
    return '\n'.join(rows)


TABLES = {NAME: table}
