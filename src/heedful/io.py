"""Files: written so that a crash leaves the old version or the new one, never half; read strictly.

A single file is written to a fresh temporary beside it, fsynced and renamed over it
(`atomic_write_bytes`). A directory (a model directory, a checkpoint, an export) is built in a
hidden staging directory beside it and renamed into place once complete (`staged`); what a kill
in between leaves, `recover_directories` puts right on the next start. Reading refuses, with the
file named, what is missing, not a regular file, too large, not UTF-8 or not JSON.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class CheckpointError(ValueError):
    """A model directory or checkpoint is missing, incomplete or not in our format."""


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def _create_unique(parent: Path, prefix: str, suffix: str, create: Callable[[Path], Any]):
    """(path, create(path)) for a new random name prefix + hex + suffix in `parent`.

    Not tempfile.mkstemp / mkdtemp: those make files 0600 and directories 0700, readable by
    their owner alone, and a model directory must be as readable as any file its user writes
    (a server running as another user reads it). os.open(path, ..., 0o666) and
    os.mkdir(path, 0o777) leave the permissions to the umask, as open() does.
    """
    for _ in range(100):
        path = parent / f"{prefix}{secrets.token_hex(4)}{suffix}"
        try:
            return path, create(path)
        except FileExistsError:  # O_EXCL / mkdir: the name was taken; draw another
            continue
    raise FileExistsError(f"{parent}: no free name {prefix}*{suffix} after 100 tries")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    tmp, fd = _create_unique(
        path.parent, f".{path.name}.", ".tmp", lambda name: os.open(name, flags, 0o666)
    )
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_bytes(path, json.dumps(data, indent=2, ensure_ascii=False).encode("utf-8"))


def readable_as_created(path: Path) -> None:
    """Give a file the permissions open() would have: safetensors (0.8) writes files 0600."""
    os.chmod(path, 0o666 & ~_umask())


def _umask() -> int:
    """The process's umask: Linux shows it in /proc; elsewhere os.umask sets it to read it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------------------------------------
# Directories: staged beside their place, published by rename
# ---------------------------------------------------------------------------------------------


@contextmanager
def staged(final: Path, check: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """Build a directory that appears at `final` whole or not at all; an old one is replaced.

        with staged(path) as build:
            ...write the files into build...

    `build` is a fresh hidden directory beside `final` (.NAME.tmp-RANDOM, same file system, so
    publishing is a rename). When the block ends, every file in it is fsynced and it is renamed
    to `final`; when the block raises, it is deleted and `final` stays as it was. `check(final)`
    (output_dirs.check_output) raises if `final` is not the caller's to replace: it runs before
    anything is made and again just before the old `final` is replaced.
    """
    final = Path(final)
    if check is not None:
        check(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    build, _ = _create_unique(
        final.parent, f".{final.name}.tmp-", "", lambda name: os.mkdir(name, 0o777)
    )
    try:
        yield build
        _fsync_tree(build)  # the data on disk before the rename makes it visible
        if check is not None:
            check(final)  # written into while we built, or made a link: still ours to replace?
        _publish(build, final)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise


def _publish(build: Path, final: Path) -> None:
    """Move a fully written directory into place; an existing `final` is replaced.

    Replacing takes two renames (final → .NAME.old-PID, build → final), so a kill between them
    leaves no `final`: recover_directories puts the kept old copy back.
    """
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        try:
            os.replace(build, final)
        except BaseException:
            os.replace(old, final)  # an error (not a kill) between the renames: undo the first
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(build, final)
    _fsync(final.parent)


def _fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            _fsync(Path(folder) / name)
        _fsync(Path(folder))


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# .NAME.tmp-RANDOM (staged) and .NAME.old-PID (_publish)
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-[A-Za-z0-9_]+$")


def recover_directories(
    parent: Path, complete: Callable[[Path], bool], needed: Collection[str] = ()
) -> list[str]:
    """Clean up what `staged` blocks cut off by a kill left in `parent`.

    A kill between _publish's two renames leaves NAME missing, with its previous copy as
    .NAME.old-PID and the new one as .NAME.tmp-*: the old copy is moved back. Without one, a
    NAME in `needed` (a link points there) gets the newest staging directory that `complete`
    accepts; other staging directories were never published, so none is. Every other leftover
    (staging directories of cut-off saves, old copies already replaced) is deleted: each can be
    a whole checkpoint. Only call this while no other process writes into `parent` (hold the
    run's lock). Returns one line per action, for the log.
    """
    found: dict[str, list[tuple[str, Path]]] = {}
    for path in sorted(parent.iterdir()) if parent.is_dir() else ():
        match = _LEFTOVER.match(path.name)
        if match and path.is_dir() and not path.is_symlink():
            found.setdefault(match["name"], []).append((match["kind"], path))
    notes = []
    for name, leftovers in found.items():
        final = parent / name
        if not os.path.lexists(final):
            olds = [p for kind, p in leftovers if kind == "old"]
            builds = [p for kind, p in leftovers if kind == "tmp" and name in needed]
            kept = _newest(olds) or _newest([p for p in builds if complete(p)])
            if kept is not None:
                os.replace(kept, final)
                notes.append(f"restored {final} from {kept.name}, left by an interrupted save")
        for _, path in leftovers:
            if path.exists():
                shutil.rmtree(path)
                notes.append(f"removed {path.name}, left by an interrupted save")
    if notes:
        _fsync(parent)
    return notes


def _newest(paths: list[Path]) -> Path | None:
    return max(paths, key=lambda p: p.stat().st_mtime, default=None)


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def regular_file(path: Path) -> os.stat_result:
    """stat(path) for a regular file; missing, a directory, a link loop or a pipe are named."""
    try:
        info = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            raise CheckpointError(f"{path}: a symbolic link to nothing") from None
        raise CheckpointError(f"{path.parent}: missing {path.name}") from None
    except OSError as error:  # ELOOP (a symbolic link loop), EACCES, ...
        raise CheckpointError(f"{path}: cannot read it ({error.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise CheckpointError(f"{path}: is a directory; it should be a file")
    if not stat.S_ISREG(info.st_mode):  # a FIFO would block the read forever
        raise CheckpointError(f"{path}: not a regular file")
    return info


def read_bytes(path: Path, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file; one over max_bytes is refused before it is read."""
    size = regular_file(path).st_size
    if max_bytes is not None and size > max_bytes:
        raise CheckpointError(
            f"{path}: {size:,} bytes, more than the {max_bytes:,} a heedful {path.name} may "
            "have; not read"
        )
    try:
        return path.read_bytes()
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read it ({error.strerror})") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """json.loads keeps the last of a repeated key silently; which one was meant is unknown."""
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        twice = next(key for key in keys if keys.count(key) > 1)
        raise ValueError(f"the key {twice!r} appears twice in one object")
    return dict(pairs)


def read_json(path: Path, max_bytes: int | None = None) -> Any:
    """A UTF-8 JSON file (a UTF-8 byte-order mark is allowed): CheckpointError naming it if not."""
    data = read_bytes(path, max_bytes)
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or b"\0" in data:
        raise CheckpointError(f"{path}: UTF-16 or binary, not UTF-8 text; save it as UTF-8")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise CheckpointError(
            f"{path}: not UTF-8 (invalid byte 0x{data[error.start]:02x} at byte offset "
            f"{error.start})"
        ) from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise CheckpointError(f"{path}: not valid JSON (nested too deeply)") from None
    except ValueError as error:  # JSONDecodeError, a repeated key, an integer of 4300+ digits
        raise CheckpointError(f"{path}: not valid JSON ({error})") from None
