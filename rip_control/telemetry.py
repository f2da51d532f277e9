"""Timing telemetry: running statistics and the per-episode ``timing.csv``."""

from __future__ import annotations

import contextlib
import csv
from dataclasses import asdict, dataclass, fields
import errno
import io
import math
import os
from pathlib import Path
import time


class RunningStats:
    """Welford mean/std plus min/max, O(1) per sample, no allocation (control-thread safe)."""

    def __init__(self) -> None:
        self.n = 0
        self.mean = 0.0
        self._m2 = 0.0
        self.min = math.inf
        self.max = -math.inf

    def add(self, x: float) -> None:
        """Add one sample."""
        self.n += 1
        delta = x - self.mean
        self.mean += delta / self.n
        self._m2 += delta * (x - self.mean)
        if x < self.min:
            self.min = x
        if x > self.max:
            self.max = x

    @property
    def std(self) -> float:
        """Population standard deviation (0 with fewer than two samples)."""
        return math.sqrt(self._m2 / self.n) if self.n > 1 else 0.0


#: What drove an episode, as ``~/episode``, ``timing.csv`` and the replay buffer name it:
#: the policy, learning (``training``); the regression guard's deterministic test of a policy
#: (``evaluation``, no training data); the identification input of
#: :mod:`rip_control.rig.excitation` (``excitation``, its transitions marked by
#: :data:`rip_control.transitions.EXCITATION_VERSION`).
EPISODE_KINDS = ('training', 'evaluation', 'excitation')


@dataclass(frozen=True)
class EpisodeTiming:
    """One row of ``timing.csv`` (column names are a contract, see DESIGN.md)."""

    episode: int
    n_ticks: int
    mean_tick_dt_ms: float
    std_tick_dt_ms: float
    max_overrun_ms: float
    n_violations: int
    learner_train_calls: int
    learner_total_train_s: float
    episode_return: float
    balance_s: float
    policy_version: int
    kind: str = 'training'  # one of EPISODE_KINDS
    verdict: str = ''  # of an evaluation: baseline, promoted, rejected
    live_version: int = -1  # the live policy after the episode (guard off: the first)
    reset_s: float = math.nan  # the reset before the episode, rig seconds
    transitions_dropped_late: int = 0  # its ticks whose dt was off: no transition sent


class TimingCsv:
    """Appends :class:`EpisodeTiming` rows to ``runs/<run>/timing.csv`` (flushed per row)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        columns = [f.name for f in fields(EpisodeTiming)]
        new = not self.path.exists() or self.path.stat().st_size == 0
        if not new:
            with self.path.open(newline='') as f:
                header = next(csv.reader(f), [])
            if header != columns:  # written by an older version: kept, a new file started
                stamp = time.strftime('%Y%m%d-%H%M%S')
                kept = self.path.with_name(f'{self.path.stem}.{stamp}.csv')
                n = 1
                while kept.exists():
                    kept = self.path.with_name(f'{self.path.stem}.{stamp}-{n}.csv')
                    n += 1
                self.path.rename(kept)
                new = True
        self._file = self.path.open('a', newline='')
        self._writer = csv.DictWriter(self._file, columns)
        if new:
            self._writer.writeheader()
            self._file.flush()

    def append(self, row: EpisodeTiming) -> None:
        """Write one row and push it to disk; whole or not at all.

        :raises OSError: the write failed (a full disk): the file is cut back to the rows
            before, so a reader never meets half a row.
        """
        text = io.StringIO()
        csv.DictWriter(text, self._writer.fieldnames).writerow(asdict(row))
        fd = self._file.fileno()
        before = os.lseek(fd, 0, os.SEEK_END)
        try:
            data = text.getvalue().encode()
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, 'short write', str(self.path))
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, before)
            raise

    def close(self) -> None:
        """Close the file."""
        self._file.close()
