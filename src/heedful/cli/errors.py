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

# The optional libraries, by the name they are imported as, and the extra of pyproject.toml
# that installs each: a command that finds one missing names the extra to install.
EXTRAS = {
    **dict.fromkeys(("fastapi", "starlette", "uvicorn", "fastapi_offline"), "serve"),
    **dict.fromkeys(("python_multipart", "multipart"), "serve"),
    "ctranslate2": "fast",
    "transformers": "hf",
    "rouge_score": "rouge",
    "torchvision": "vision",
    "tensorboard": "tensorboard",
}


def missing_extra(error: ModuleNotFoundError, command: str | None = None) -> str:
    """The one line for a library that is not installed: which command needs it and the
    `pip install 'heedful[extra]'` that brings it. A message that says how already (the
    library's own check: export.py, hf/layout.py, ...) is kept as it is."""
    if "pip install" in str(error):
        return str(error)
    module = (error.name or "").split(".")[0]
    who = f"heedful {command}" if command else "this"
    if module not in EXTRAS:
        return f"{who} needs the {module} package, which is not installed ({error})"
    return f"{who} needs {module}, which is not installed: pip install 'heedful[{EXTRAS[module]}]'"


def require_extra(command: str, *modules: str) -> None:
    """Import `modules` now, so that a missing one is said before any model is loaded (or a
    port opened), in one line naming the extra that installs it."""
    from importlib import import_module

    for module in modules:
        try:
            import_module(module)
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(missing_extra(error, command), name=error.name) from None


def _named_errors() -> tuple[type[ValueError], ...]:
    """heedful's own error classes, all ValueErrors: each means "fix your input". Imported
    here, once a ValueError has happened, so that loading the CLI stays light."""
    from heedful.config import ConfigError
    from heedful.data.corpus import CorpusError
    from heedful.data.prepared import PreparedError
    from heedful.io import CheckpointError
    from heedful.training.loop import TrainingError
    from heedful.training.run_dir import RunError

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
    docstring); everything else goes on to click (its own errors) or to Python (a bug). A
    missing optional library names its extra; --help lists every command's summary whole."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The Commands section of `heedful --help`, each summary whole: its short_help or the
        first sentence of its docstring, wrapped to the terminal. click would cut it to what
        fits one line, and a summary cut with "..." says less than one that wraps."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except Exception as error:
            if not is_users_mistake(error):
                raise
            if isinstance(error, ModuleNotFoundError):
                raise click.ClickException(missing_extra(error, ctx.invoked_subcommand)) from None
            raise click.ClickException(str(error)) from None
