"""The `heedful` command: thin subcommands over the library.

Loading it imports no torch, so `heedful --help` answers at once: each command imports what
it uses when it runs, and the options whose choices and defaults live in modules that import
torch are declared when their command is used (options.Deferred). errors.py says which errors
print as one line and which exit statuses mean what.
"""

from __future__ import annotations

import click

from heedful import __version__
from heedful.cli.caption import caption
from heedful.cli.errors import Heedful
from heedful.cli.evaluate import evaluate
from heedful.cli.heads import heads
from heedful.cli.models import average, demo, export, train
from heedful.cli.prepare import prepare
from heedful.cli.recipes import init, recipes
from heedful.cli.see import attention, curves, explain, positional
from heedful.cli.serve import serve
from heedful.cli.translate import translate


def _show_our_warnings_as_one_line() -> None:
    """A fallback the user should know of (heedful.cpu.Int8Fallback) prints as one line on
    stderr, not as Python's file:line report; other warnings print as Python prints them."""
    import warnings

    from heedful.cpu import Int8Fallback

    python_way = warnings.showwarning
    if getattr(python_way, "heedful", False):  # main() ran before in this process
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, Int8Fallback):
            click.echo(f"warning: {message}", err=True)
        else:
            python_way(message, category, filename, lineno, file, line)

    show.heedful = True
    warnings.showwarning = show


@click.group(cls=Heedful, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="heedful")
def main() -> None:
    """heedful: attention-based sequence-to-sequence models you can see into."""
    _show_our_warnings_as_one_line()


for _command in (
    *(demo, train, average, export),  # models.py: make a model directory
    prepare,  # prepare.py: tokenize a large corpus once
    *(recipes, init),  # recipes.py: the shipped configs, listed and written out
    *(translate, evaluate, serve),  # translate.py, evaluate.py, serve.py: run a model on text
    caption,  # caption.py: run an image model on pictures
    *(attention, explain, positional, curves),  # see.py: draw what a model does
    heads,  # heads.py: mask each head, measure what it was worth
):
    main.add_command(_command)
