"""Ask the OS for real-time treatment, and say plainly when it refuses.

Without root (or CAP_SYS_NICE / a non-zero RLIMIT_RTPRIO) SCHED_FIFO fails with EPERM; the
callers then carry on with normal scheduling, and the note returned here ends up in logs
and benchmark JSON so a timing figure is never read without knowing how it was obtained.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct

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


CPU_LATENCY_DEVICE = '/dev/cpu_dma_latency'

_held_latency_fd: int | None = None


def hold_cpu_latency(max_us: int, device: str = CPU_LATENCY_DEVICE) -> str:
    """Ask the kernel to keep every CPU's idle exit latency at most ``max_us`` (-1: don't ask).

    Linux's PM QoS interface: the request holds while the file stays open, and ends with the
    process (however it ends), so it is held in a module global, never closed by hand. At 0
    the cpuidle governor picks only its polling state: an idle CPU spins instead of halting,
    and a timer wake-up is served at once. Without it a virtual machine whose idle vCPUs halt
    (``haltpoll`` with ``guest_halt_poll_ns=0``) wakes a pacer milliseconds late, and deep
    C-states on bare metal (a Jetson's, a laptop's) add tens to hundreds of microseconds. The
    price is power: idle CPUs spin while it is held. Needs root (the device is 0600).

    :returns: a one-line note for logs and benchmark JSON.
    """
    global _held_latency_fd
    if max_us < 0:
        return 'cpu idle latency not requested'
    if _held_latency_fd is not None:
        os.close(_held_latency_fd)
        _held_latency_fd = None
    try:
        fd = os.open(device, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        return f'cpu idle latency {max_us} us refused ({exc.strerror}: {device})'
    try:
        os.write(fd, struct.pack('=i', max_us))
    except OSError as exc:
        os.close(fd)
        return f'cpu idle latency {max_us} us refused ({exc.strerror}: {device})'
    _held_latency_fd = fd
    return f'cpu idle latency <= {max_us} us held'


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
