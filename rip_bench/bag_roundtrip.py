"""``bag-roundtrip``: transitions written into a rosbag2 bag (MCAP) and imported back.

``python -m rip_bench bag-roundtrip --transitions 30000``

The recorder's writer and the learner's importer with its checks
(:mod:`rip_control.bags`): transitions per second each way and bytes per transition.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import tempfile
import time
from typing import Any

import numpy as np

from rip_bench.common import shipped

NAME = 'bag-roundtrip'
HELP = 'write and import a rosbag2 bag of transitions'


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``bag-roundtrip`` options."""
    ap.add_argument('--transitions', type=int, default=30_000)
    ap.add_argument('--rate', type=float, default=shipped('rate_hz'))


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Write ``--transitions`` into a bag and import them again: the JSON record."""
    from rip_control.bags import BagWriter, read_transitions, serialize
    from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
    from rip_control.transitions import Transition, field_layout

    layout = list(field_layout(OBS_SIZE, ACTION_SIZE))
    rng = np.random.default_rng(0)
    path = Path(tempfile.mkdtemp(prefix='rip_bag_')) / 'bag'
    period = 1.0 / a.rate
    t0 = time.perf_counter()
    writer = BagWriter(path, a.rate, OBS_SIZE, ACTION_SIZE)
    for i in range(a.transitions):
        t = Transition(
            i // 300,
            i % 300,
            rng.uniform(-1, 1, OBS_SIZE).astype(np.float32),  # inside the task's spaces
            rng.uniform(-1, 1, ACTION_SIZE).astype(np.float32),
            float(rng.uniform(-0.25, 1)),
            rng.uniform(-1, 1, OBS_SIZE).astype(np.float32),
            False,
            i % 300 == 299,
            period + float(rng.normal(0.0, 1e-4)),
            1,
        )
        writer.write(serialize(layout, t.pack()), time.time_ns())
    writer.close()
    write_s = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in path.iterdir())
    t0 = time.perf_counter()
    got = read_transitions(
        [path], rate_hz=a.rate, obs_size=OBS_SIZE, action_size=ACTION_SIZE, dt_tolerance_s=0.005
    )
    read_s = time.perf_counter() - t0
    doc = {
        'benchmark': 'bag-roundtrip',
        'transitions': a.transitions,
        'rate_hz': a.rate,
        'write_s': write_s,
        'write_per_s': a.transitions / write_s,
        'read_and_check_s': read_s,
        'read_per_s': a.transitions / read_s,
        'imported': len(got.transitions),
        'rejected': dict(got.rejected),
        'bytes': size,
        'bytes_per_transition': size / a.transitions,
    }
    print(
        f'{a.transitions} transitions: written {doc["write_per_s"]:.0f}/s, read and checked '
        f'{doc["read_per_s"]:.0f}/s, {doc["bytes_per_transition"]:.0f} B each, '
        f'{doc["imported"]} imported, rejected {doc["rejected"] or "none"}'
    )
    return doc
