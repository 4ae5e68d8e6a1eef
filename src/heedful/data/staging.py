"""What a killed `heedful prepare` leaves beside its directory, and how it is put right.

io.staged builds DIR as .DIR.tmp-XXXXXXXX and publishes it with two renames (DIR →
.DIR.old-PID, build → DIR). A kill leaves the staging directory (a whole corpus's shards) for
ever, and a kill between the renames leaves no DIR at all: on a node whose corpus is gone,
.DIR.old-PID is then the only copy. `recover` puts the old copy back and deletes the leftovers
of DIR alone. Not io.recover_directories: that one cleans every name in the parent and relies
on a run's lock, and a prepared directory's parent has no lock; a `prepare` still running
into DIR (`building` holds a lock on its staging directory) keeps its work.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from heedful.io import staged


@contextmanager
def building(directory: Path, check: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """io.staged(directory, check), its staging directory locked until it is published or
    deleted: the kernel drops the lock when the process dies, so `recover` tells a leftover
    from a live build."""
    locks = []
    try:
        with staged(directory, check) as build:
            locks.append(os.open(build, os.O_RDONLY))
            fcntl.flock(locks[0], fcntl.LOCK_EX)
            yield build
    finally:
        for fd in locks:
            os.close(fd)


def _alive(pid: int) -> bool:
    """Whether another process with this id runs (it may be between its two renames)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_unless_held(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a live `prepare` is building it
            return False
        shutil.rmtree(path, ignore_errors=True)
        return True
    finally:
        os.close(fd)


def recover(directory: Path) -> list[str]:
    """Put back DIR from .DIR.old-PID when DIR is missing; delete DIR's other leftovers that
    no live process owns. -> one line per action, for the log."""
    parent, name = directory.parent, re.escape(directory.name)
    pattern = re.compile(rf"\.{name}\.(?:tmp-(?P<tmp>[0-9a-f]{{8}})|old-(?P<pid>[0-9]+))")
    found = [
        (match, path)
        for path in (sorted(parent.iterdir()) if parent.is_dir() else ())
        if (match := pattern.fullmatch(path.name)) and path.is_dir() and not path.is_symlink()
    ]
    dead_olds = [p for m, p in found if m["pid"] and not _alive(int(m["pid"]))]
    notes = []
    if dead_olds and not os.path.lexists(directory):
        kept = max(dead_olds, key=lambda p: p.stat().st_mtime)
        os.replace(kept, directory)
        notes.append(f"restored {directory} from {kept.name}, left by an interrupted prepare")
    for match, path in found:
        if not path.exists() or (match["pid"] and path not in dead_olds):
            continue
        if match["pid"]:
            shutil.rmtree(path, ignore_errors=True)
        elif not _remove_unless_held(path):
            continue
        notes.append(f"removed {path.name}, left by an interrupted prepare")
    return notes
