"""Which errors are the user's to fix, printed as one line, and which are bugs, with a traceback.

`heedful` exits 0 when a command succeeds, 1 for a mistake in what the user gave it (a bad
config, corpus, model directory or value: one line, `Error: ...`), 2 for a command line click
cannot parse (its usage message), and 1 with Python's traceback for anything else: a bug
should show where it happened, not pass for a mistake of the user's.
"""

from __future__ import annotations

import traceback
from pathlib import Path

import click

_PACKAGE = Path(__file__).resolve().parents[1]  # src/heedful


def _named_errors() -> tuple[type[ValueError], ...]:
    """heedful's own error classes, all ValueErrors: each means "fix your input". Imported
    here, once a ValueError has happened, so that loading the CLI stays light."""
    from heedful.config import ConfigError
    from heedful.data.corpus import CorpusError
    from heedful.data.prepared import PreparedError
    from heedful.io import CheckpointError
    from heedful.run_dir import RunError
    from heedful.training import TrainingError

    return (ConfigError, CheckpointError, CorpusError, PreparedError, RunError, TrainingError)


def _raised_on_purpose(error: BaseException) -> bool:
    """Raised by a `raise` statement in heedful's own code: a check that we wrote, not a
    ValueError from torch, numpy or a stray int("x") in our code."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return False
    where = frames[-1]
    inside = Path(where.filename).resolve().is_relative_to(_PACKAGE)
    return inside and (where.line or "").lstrip().startswith("raise")


def is_users_mistake(error: Exception) -> bool:
    """Whether `error` is a mistake in what the user gave, said in one line."""
    if isinstance(error, FileNotFoundError):
        return True
    if isinstance(error, ModuleNotFoundError):  # an optional extra that is not installed
        return not (error.name or "").startswith("heedful")
    if not isinstance(error, ValueError):
        return False
    return isinstance(error, _named_errors()) or _raised_on_purpose(error)


class Heedful(click.Group):
    """The `heedful` group: a user's mistake becomes one line and exit status 1 (module
    docstring); everything else goes on to click (its own errors) or to Python (a bug)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except Exception as error:
            if not is_users_mistake(error):
                raise
            raise click.ClickException(str(error)) from None
