"""Which processes are still running (tests that check nothing outlives a stop)."""

from __future__ import annotations

from pathlib import Path


def describe(found: list[str]) -> str:
    """The processes :func:`processes_mentioning` found, with state, parent and wait channel.

    For the message of a failed "nothing outlives" check.
    """
    out = []
    for item in found:
        pid = item.split(':', 1)[0]
        try:
            status = (Path('/proc') / pid / 'status').read_text().splitlines()
            fields = {k: v.strip() for k, _, v in (line.partition(':') for line in status)}
            wchan = (Path('/proc') / pid / 'wchan').read_text()
            threads = len(list((Path('/proc') / pid / 'task').iterdir()))
        except OSError:
            out.append(f'{item} (gone)')
            continue
        out.append(
            f'{item} [state {fields.get("State")}, ppid {fields.get("PPid")}, '
            f'{threads} threads, wchan {wchan}, SigPnd {fields.get("ShdPnd")}]'
        )
    return '\n'.join(out)


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
