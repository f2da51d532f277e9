"""Files that must survive a crash: written whole or not at all.

:func:`atomic_write_bytes` is the one way the package writes such a file (replay buffers,
policies, checkpoints, summaries, tick traces, benchmark JSON).
"""

from __future__ import annotations

import glob
import os
from pathlib import Path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        pass
    return True


def remove_stale_temps(path: str | Path) -> list[Path]:
    """Delete the temporary files of saves to ``path`` whose writer process is dead.

    A writer killed mid-save (SIGKILL, power loss) leaves its ``.<name>.<pid>.tmp`` behind;
    nothing reads it, but a learner killed now and then would fill the disk with copies of
    its buffer. A temp file of a live process (a save in progress) is left alone.

    :returns: the files removed.
    """
    path = Path(path)
    removed = []
    prefix = f'.{path.name}.'
    for tmp in path.parent.glob(f'{glob.escape(prefix)}*.tmp'):
        pid_text = tmp.name[len(prefix) : -len('.tmp')]
        if not pid_text.isdigit() or _pid_alive(int(pid_text)):
            continue
        try:
            tmp.unlink()
            removed.append(tmp)
        except FileNotFoundError:  # another writer cleaned it up first
            pass
    return removed


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves either the old or the new file.

    The data goes to ``.<name>.<pid>.tmp`` beside ``path`` (fsynced), which is then renamed
    over ``path`` and the directory fsynced. Temp files that killed writers left behind are
    removed first (:func:`remove_stale_temps`).

    :raises OSError: the write or the rename failed (e.g. a full disk), naming ``path``; the
        old file is then untouched and no temp file is left.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    tmp = path.with_name(f'.{path.name}.{os.getpid()}.tmp')
    try:
        with open(tmp, 'wb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # a full disk: name the file it was for (a write does not)
        if exc.errno is None:
            raise OSError(f'{path}: {exc}') from exc
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    finally:
        if tmp.exists():
            tmp.unlink()
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
