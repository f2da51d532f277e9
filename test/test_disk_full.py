"""A full disk for each writer: a named error, no half-written file, the rest goes on.

The disk is made full for the test's own child process with ``RLIMIT_FSIZE`` (SIGXFSZ
ignored, so a write past the limit fails with EFBIG as on a full device).
"""

from __future__ import annotations

import csv
import resource
import signal
import subprocess
import sys

from rip_control.procs import child_env


def _small_disk(limit_bytes: int):
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return limit


_ROWS = """
import sys
from rip_control.telemetry import EpisodeTiming, TimingCsv

out = TimingCsv(sys.argv[1])
for i in range(1000):
    row = EpisodeTiming(
        episode=i, n_ticks=300, mean_tick_dt_ms=20.0, std_tick_dt_ms=0.01,
        max_overrun_ms=0.2, n_violations=0, learner_train_calls=10,
        learner_total_train_s=1.5, episode_return=250.0, balance_s=5.3,
        policy_version=i, kind='training', verdict='none', live_version=1,
    )
    try:
        out.append(row)
    except OSError as exc:
        print(f'row {i}: {exc.strerror}', flush=True)
        break
out.close()
"""


def test_timing_csv_keeps_whole_rows_when_the_disk_fills(tmp_path):
    path = tmp_path / 'timing.csv'
    proc = subprocess.run(
        [sys.executable, '-c', _ROWS, str(path)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_small_disk(4000),
    )
    assert proc.returncode == 0, proc.stderr
    failed_at = int(proc.stdout.split()[1].rstrip(':'))
    # Past the limit: a write cut short, or refused whole (EFBIG) at it.
    assert 'short write' in proc.stdout or 'File too large' in proc.stdout, proc.stdout
    assert 5 < failed_at < 1000, proc.stdout
    with path.open(newline='') as f:
        rows = list(csv.DictReader(f))
    # Every row before the failing one, whole; nothing of the failing one.
    assert [int(r['episode']) for r in rows] == list(range(failed_at))
    assert all(r['live_version'] == '1' for r in rows)
    assert path.stat().st_size <= 4000 and path.read_bytes().endswith(b'\n')
