"""SB3 SAC ``train()`` running flat out on a pre-filled buffer, in its own process.

The ``sac`` load of the timing benchmark, and the "SB3 alone" side of the learner
throughput benchmark. Prints ``READY`` once the buffer is filled and the first update ran,
then trains until ``--seconds`` pass or SIGINT/SIGTERM, and writes updates/s as JSON.

``python -m rip_bench.train_load --seconds 60 --json load.json``; the benchmarks build that
command line with :func:`command`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from rip_bench.common import module_command
from rip_control.params import LEARNER_PARAMETERS, defaults

if TYPE_CHECKING:  # torch and SB3 load in main(): the benchmarks import this module for command()
    from rip_learner.fast_sac import FastSacUpdate

IMPLS = ('sb3', 'fast', 'shipped')


def shipped_update(model: Any) -> FastSacUpdate:
    """fast_sac's update as the learner ships it, on the shipped 50 Hz prior data.

    The prior share and the smoothness weight are the parameter table's defaults; the
    smoothness term is measured against the initial actor's chatter.
    """
    from rip_control import buffer_file
    from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
    from rip_control.run_files import PRIOR_DATA, packaged_policy
    from rip_learner.fast_sac import FastSacUpdate

    shipped = defaults(LEARNER_PARAMETERS)
    path = packaged_policy(50.0).with_name(PRIOR_DATA)
    arrays, _ = buffer_file.load(path, rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE)
    return FastSacUpdate(
        model,
        prior=arrays,
        prior_ratio=float(shipped['prior_ratio']),
        smoothness=float(shipped['smoothness']),
        smoothness_reference=model.actor,
    )


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog='python -m rip_bench.train_load', description=__doc__)
    ap.add_argument('--hidden', default='64,64', help='hidden layer widths, e.g. 256,256')
    ap.add_argument('--batch', type=int, default=256)
    ap.add_argument('--threads', type=int, default=1, help='torch intra-op threads')
    ap.add_argument('--prefill', type=int, default=10_000)
    ap.add_argument('--chunk', type=int, default=4, help='gradient steps per train() call')
    ap.add_argument('--seconds', type=float, default=float('inf'))
    ap.add_argument('--json', default='')
    ap.add_argument('--nice', type=int, default=0, help='niceness to add')
    ap.add_argument('--avoid-cpu', type=int, default=-1, help='keep off this CPU (-1: none)')
    ap.add_argument(
        '--impl',
        choices=IMPLS,
        default='sb3',
        help="SB3's train(), fast_sac's, or fast_sac's with the shipped safeguards",
    )
    return ap


def command(**options: Any) -> list[str]:
    """The command line that runs this load with ``options`` (its long options' names).

    ``command(json='out.json', nice=10)`` is ``python -m rip_bench.train_load --json out.json
    --nice 10``; an option not given keeps its default here.

    :raises ValueError: an option it does not have, named.
    """
    return module_command('rip_bench.train_load', _parser(), options)


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring."""
    from rip_learner.fast_sac import FastSacUpdate
    from rip_learner.sac import SacConfig, build_sac, prefill_random

    a = _parser().parse_args(argv)
    if a.nice:
        os.nice(a.nice)
    cpus = os.sched_getaffinity(0) - {a.avoid_cpu}
    if cpus:
        os.sched_setaffinity(0, cpus)
    cfg = SacConfig.from_params(
        hidden_sizes=tuple(int(h) for h in a.hidden.split(',')),
        batch_size=a.batch,
        torch_threads=a.threads,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    model = build_sac(cfg)
    prefill_random(model, a.prefill)
    if a.impl == 'sb3':
        train = model.train
    elif a.impl == 'fast':
        train = FastSacUpdate(model).train
    else:
        train = shipped_update(model).train
    train(a.chunk, cfg.batch_size)
    print('READY', flush=True)
    start = time.perf_counter()
    updates = 0
    while not stop.is_set() and time.perf_counter() - start < a.seconds:
        train(a.chunk, cfg.batch_size)
        updates += a.chunk
    elapsed = time.perf_counter() - start
    result = {
        'hidden_sizes': list(cfg.hidden_sizes),
        'batch_size': cfg.batch_size,
        'torch_threads': cfg.torch_threads,
        'impl': a.impl,
        'chunk': a.chunk,
        'updates': updates,
        'seconds': elapsed,
        'updates_per_s': updates / elapsed if elapsed > 0 else 0.0,
    }
    print(json.dumps(result), flush=True)
    if a.json:
        with open(a.json, 'w') as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == '__main__':
    sys.exit(main())
