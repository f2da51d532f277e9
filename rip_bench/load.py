"""Background CPU load for a benchmark: none, a busy process per core, or SAC training.

:class:`Load` runs it around a measurement; the ``sac`` load is :mod:`rip_bench.train_load`,
started as its own program.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys
from typing import Any

from rip_bench import train_load
from rip_control.procs import child_env

LOADS = ('none', 'hog', 'sac')


class Load:
    """Background CPU load for a benchmark, from ``__enter__`` to ``__exit__``.

    ``none``; ``hog``: a busy process per core; ``sac``: SB3 SAC ``train()`` flat out on a
    pre-filled buffer in another process (:mod:`rip_bench.train_load`).
    """

    def __init__(self, kind: str, workdir: Path, nice: int = 0) -> None:
        if kind not in LOADS:
            raise ValueError(f'unknown load {kind!r}: use {", ".join(LOADS)}')
        self.kind = kind
        self.nice = nice
        self.procs: list[subprocess.Popen[str]] = []
        self.json_path = workdir / 'load.json'

    def __enter__(self) -> Load:
        if self.kind == 'hog':
            for _ in range(os.cpu_count() or 1):
                self.procs.append(
                    subprocess.Popen([sys.executable, '-c', 'while True: pass'], text=True)
                )
        elif self.kind == 'sac':
            # Plain SB3 train() in another process: normal priority, no pinning (the
            # learner node itself runs at nice +10, a kinder neighbour than this load).
            cmd = train_load.command(json=self.json_path, nice=self.nice)
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=child_env())
            self.procs.append(proc)
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line.startswith('READY'):
                self.__exit__()
                raise RuntimeError(f'the SAC load did not start: {line!r}')
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def result(self) -> dict[str, Any]:
        """The ``sac`` load's own figures (updates/s), once it stopped; ``{}`` for the others."""
        if self.json_path.exists():
            return dict(json.loads(self.json_path.read_text()))
        return {}
