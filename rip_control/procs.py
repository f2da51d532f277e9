"""Process helpers every entry point, the tests and the benchmarks share.

Starting a child (its environment, dying with its parent, signals held back across the
fork), stopping one (signal, bounded wait, kill), and keeping DDS on this machine in a
domain of the process's own. ``bench/dds_env.sh`` is the same domain rule for the shell.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
import ctypes
import ctypes.util
import os
from pathlib import Path
import signal
import subprocess

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]

PR_SET_PDEATHSIG = 1
AUTOMATIC_DOMAINS = (51, 100)
"""The ``ROS_DOMAIN_ID`` range a process picks from (by its pid) when none is set: below
Linux's ephemeral ports (ROS 2 docs: 0-101 are safe), 0-50 left to users."""


def automatic_domain(pid: int | None = None) -> int:
    """The domain id a process takes when the user set none: one of :data:`AUTOMATIC_DOMAINS`."""
    lo, hi = AUTOMATIC_DOMAINS
    return lo + (os.getpid() if pid is None else pid) % (hi - lo + 1)


def ensure_loopback_dds(default_domain: int | None = None) -> tuple[str, str]:
    """Keep DDS on this machine unless the user chose otherwise; return (range, domain)."""
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    if 'ROS_DOMAIN_ID' not in os.environ:
        domain = default_domain if default_domain is not None else automatic_domain()
        os.environ['ROS_DOMAIN_ID'] = str(domain)
    return os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'], os.environ['ROS_DOMAIN_ID']


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child Python process that must import this package from source."""
    env = dict(os.environ)
    paths = [str(_PACKAGE_ROOT)] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p]
    env['PYTHONPATH'] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault('PYTHONUNBUFFERED', '1')
    env.update(extra or {})
    return env


@contextmanager
def signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM held back while a child is forked, delivered right after.

    Python drops an exception that a signal handler raises inside an at-fork hook of
    ``subprocess.Popen`` ("Exception ignored"), so a Ctrl-C landing there would be lost.
    The child unblocks them again (:func:`die_with_parent`).
    """
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def request_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel for ``sig`` when this process's parent dies (Linux ``prctl``).

    :returns: False where it is not available (not Linux); the parent's own stop path remains.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library('c'), use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, sig) == 0
    except (OSError, AttributeError, TypeError):
        return False


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGTERM if the process that started it dies (Linux).

    A runner killed with SIGKILL then still stops its control node (which disengages on
    SIGTERM), its learner (which saves) and its emulator, instead of leaving orphans. It also
    unblocks SIGINT and SIGTERM, which :func:`signals_blocked` held back in the parent.
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    request_parent_death_signal(signal.SIGTERM)


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGINT, timeout_s: float = 15.0) -> int:
    """Signal a child (SIGINT: its clean exit path), wait bounded, kill if it hangs; its status."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return int(proc.returncode)
