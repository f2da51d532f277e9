"""Ask the OS for real-time treatment, and say plainly when it refuses.

Without root (or CAP_SYS_NICE / a non-zero RLIMIT_RTPRIO) SCHED_FIFO fails with EPERM; the
callers then carry on with normal scheduling, and the note returned here ends up in logs
and benchmark JSON so a timing figure is never read without knowing how it was obtained.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_MCL_CURRENT = 1
_MCL_FUTURE = 2


def set_fifo(priority: int, tid: int = 0) -> str | None:
    """Put a thread (0: the calling one) under SCHED_FIFO; return an error text or ``None``."""
    try:
        os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
    except (OSError, AttributeError) as exc:
        return f'SCHED_FIFO {priority} refused ({exc})'
    return None


def is_fifo(tid: int = 0) -> bool:
    """Whether a thread (0: the calling one) runs under SCHED_FIFO."""
    try:
        return os.sched_getscheduler(tid) == os.SCHED_FIFO
    except (OSError, AttributeError):
        return False


def pin_to_cpu(cpu: int, tid: int = 0) -> str | None:
    """Restrict a thread (0: the calling one) to one CPU; return an error text or ``None``."""
    try:
        os.sched_setaffinity(tid, {cpu})
    except (OSError, AttributeError, ValueError) as exc:
        return f'pinning to CPU {cpu} refused ({exc})'
    return None


def lock_memory() -> str | None:
    """``mlockall(MCL_CURRENT | MCL_FUTURE)`` so page faults cannot stall the loop."""
    path = ctypes.util.find_library('c')
    if not path:
        return 'mlockall unavailable (no libc found)'
    libc = ctypes.CDLL(path, use_errno=True)
    if libc.mlockall(_MCL_CURRENT | _MCL_FUTURE) != 0:
        return f'mlockall refused (errno {ctypes.get_errno()})'
    return None


def try_realtime(priority: int, cpu: int | None = None) -> str:
    """Best effort FIFO priority (0: skip) and pinning for the whole process; a one-line note."""
    notes = []
    if priority > 0:
        err = set_fifo(priority)
        notes.append(err or f'SCHED_FIFO {priority}')
    else:
        notes.append('normal scheduling')
    if cpu is not None:
        err = pin_to_cpu(cpu)
        notes.append(err or f'cpu {cpu}')
    return ', '.join(notes)
