"""Which processes are still running (tests that check nothing outlives a stop)."""

from __future__ import annotations

from pathlib import Path


def processes_mentioning(text: str) -> list[str]:
    """``'pid: command line'`` of every process whose command line contains ``text``."""
    found = []
    for entry in Path('/proc').iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / 'cmdline').read_bytes().replace(b'\0', b' ').decode()
            except (OSError, ValueError):
                continue  # ended meanwhile
            if text in cmdline:
                found.append(f'{entry.name}: {cmdline}')
    return found
