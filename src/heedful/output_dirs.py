"""Output directories: which ones a command may replace, so that it deletes only what it made.

`heedful export`, `average` and `train --force` replace a whole directory (io.staged renames
the old one away, then deletes it). Each says what kind of directory it writes (a
`DirectoryKind`: how to recognise one, by the marker heedful wrote there, and which entries
belong to it), and `check_output` lets it replace only a missing or empty directory or one of
that kind holding nothing else, never one of its inputs, one inside them or one around them.
Anything else stops with an `OutputError` naming the directory before anything is touched.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from heedful.io import CheckpointError

SHOWN = 3  # foreign entries named in an error


class OutputError(CheckpointError):
    """An output directory heedful will not replace: not of its kind, or one of its inputs."""


@dataclass(frozen=True)
class DirectoryKind:
    """A kind of directory heedful writes. `recognise(dir)`: the marker heedful wrote is there
    (config.json's format, a marker file, train.lock); `owns(entry)`: heedful writes an entry
    of that name and type there (a file a user adds beside them is not one)."""

    name: str  # for messages: "a heedful model directory"
    recognise: Callable[[Path], bool]
    owns: Callable[[Path], bool]


def foreign_entries(directory: Path, kind: DirectoryKind) -> list[str]:
    """The entries of `directory` that `kind` does not write, by name."""
    return sorted(path.name for path in directory.iterdir() if not kind.owns(path))


def listed(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(repr(name) for name in names[:SHOWN]) + more


def check_output(final: str | Path, kind: DirectoryKind, inputs: Iterable[str | Path] = ()):
    """Refuse to replace `final` unless it is missing, empty, or `kind` and nothing else.

    Also refused: a symbolic link (it would be replaced, not what it points to), a file, a
    path under a file, the current directory or one around it, and any `final` that is one of
    `inputs`, holds one or lies inside one (replacing it would delete what is being read).
    """
    final = Path(final)
    where = Path(os.path.abspath(final))  # `.`, `..` and `a/../b` as the directories they name
    _check_not_an_input(final, where, inputs)
    if Path.cwd().resolve().is_relative_to(where.resolve()):  # `.`, `..`, `/`
        raise OutputError(
            f"{final}: the current directory is inside it; heedful does not replace the "
            "directory it runs in: give another output directory"
        )
    if final.is_symlink():
        raise OutputError(
            f"{final}: a symbolic link; heedful would replace the link, not what it points to: "
            f"give the directory itself ({os.path.realpath(final)})"
        )
    for above in (where, *where.parents):
        if os.path.lexists(above) and not above.is_dir():
            raise OutputError(f"{above}: a file, not a directory; give a directory to write")
        if above.is_dir():
            break
    if not final.is_dir():
        return  # missing: nothing to lose
    try:
        names = sorted(path.name for path in final.iterdir())
    except OSError as error:  # unreadable: what it holds is unknown
        raise OutputError(f"{final}: cannot list it ({error.strerror})") from None
    if not names:
        return  # empty: nothing to lose
    if not kind.recognise(final):
        raise OutputError(
            f"{final}: not empty, and not {kind.name} (it holds {listed(names)}); heedful "
            f"replaces only {kind.name} that it wrote: give a new or empty directory"
        )
    foreign = foreign_entries(final, kind)
    if foreign:
        raise OutputError(
            f"{final}: {kind.name}, but it also holds {listed(foreign)}, not part of one; "
            "replacing it would delete them: move them out or give another directory"
        )


def replaceable(kind: DirectoryKind, inputs: Iterable[str | Path] = ()) -> Callable[[Path], None]:
    """check_output for this kind and these inputs, as io.staged's `check` takes it."""
    inputs = list(inputs)
    return lambda final: check_output(final, kind, inputs)


def _check_not_an_input(final: Path, where: Path, inputs: Iterable[str | Path]) -> None:
    """The paths as given and as resolved: RUN/best lies in RUN, though it points elsewhere."""
    outputs = {where, where.resolve()}
    for given in inputs:
        read = Path(os.path.abspath(given))
        for path in {read, read.resolve()}:
            for out in outputs:
                if out == path:
                    how = "is the input"
                elif out in path.parents:
                    how = "holds the input"
                elif path in out.parents:
                    how = "lies inside the input"
                else:
                    continue
                raise OutputError(
                    f"{final}: the output directory {how} {given}; replacing it would delete "
                    "what is being read: give another output directory"
                )
