"""Options that several commands share, and `Deferred`, which declares the options that take
their choices and defaults from modules that import torch only when a command is used."""

from __future__ import annotations

from collections.abc import Callable

import click

from heedful.config.search import SETTINGS, flag

FILE = click.Path(dir_okay=False)
DIRECTORY = click.Path(file_okay=False)
POSITIVE = click.IntRange(min=1)


def overrides_option(example: str):
    """--set KEY=VALUE (repeatable): a config value overridden from the command line."""
    return click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="KEY=VALUE",
        help=f"Override a config value, e.g. --set {example} (repeatable).",
    )


class Deferred(click.Command):
    """A command whose last options are declared by `later()` the first time the command is
    parsed or its --help shown, not when the CLI loads.

    Their choices and defaults live in the modules that own them (heedful.inference.runtime's
    engines, export formats, demo models, ...), most of which import torch: a second and more that
    `heedful --help` and every other command should not wait for.
    """

    def __init__(self, *args, later: Callable[[], list[click.Parameter]], **kwargs):
        super().__init__(*args, **kwargs)
        self.later: Callable[[], list[click.Parameter]] | None = later

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if self.later is not None:
            self.params.extend(self.later())
            self.later = None
        return super().get_params(ctx)


def _set_threads(ctx, param, value) -> None:
    from heedful.cpu import set_threads

    set_threads(value)


def threads_option() -> click.Option:
    """--threads, applied as soon as it is parsed (before any model is loaded)."""
    return click.Option(
        ["--threads"],
        type=POSITIVE,
        default=None,
        expose_value=False,
        callback=_set_threads,
        help="CPU threads for torch and CTranslate2 [default: one per core, or OMP_NUM_THREADS]. "
        "Fewer keeps a shared machine responsive.",
    )


def runtime_options() -> list[click.Parameter]:
    """--engine, --quantize and --threads: how the model runs
    (heedful.inference.runtime.load_translator)."""
    from heedful.inference.quantize import QUANTIZE
    from heedful.inference.runtime import ENGINES

    engine = click.Option(
        ["--engine"],
        type=click.Choice(ENGINES),
        default="torch",
        show_default=True,
        help="torch: our own search, with attention. ctranslate2: a `heedful export` (or the "
        "model directory, converted on loading) run by CTranslate2 on the CPU "
        "(pip install 'heedful[fast]').",
    )
    quantize = click.Option(
        ["--quantize"],
        type=click.Choice(QUANTIZE),
        default=None,
        help="Run the Linear layers in int8 on the CPU (torch: dynamic quantization; "
        "ctranslate2: int8 compute).",
    )
    return [engine, quantize, threads_option()]


def limit_options() -> list[click.Parameter]:
    """One flag per field of heedful.server.ServerLimits: --max-chars, --request-timeout, ..."""
    from dataclasses import fields

    from heedful.server import ServerLimits

    return [
        click.Option(
            ["--" + spec.name.replace("_", "-"), spec.name],
            type=type(spec.default),
            default=spec.default,
            show_default=True,
            help=spec.metadata["help"],
        )
        for spec in fields(ServerLimits)
    ]


def setting_option(name: str):
    """The flag of the search setting `name`, as config/search.py declares it: its spelling,
    its help and its bounds (click's, so that the help shows them and a value outside them is
    refused in the flag's own name); a switch is a flag without a value. Unset, it is None
    (False for a switch): the model's generation.json decides."""
    declared = SETTINGS[name]
    if declared.bounds is None:
        return click.option(flag(name), name, is_flag=True, help=declared.help)
    low, high = declared.bounds
    bounds = click.FloatRange if isinstance(low, float) else click.IntRange
    kind = bounds(low, high, min_open=declared.above)
    return click.option(flag(name), name, type=kind, default=None, help=declared.help)


def search_options(f):
    """--beam and --batch-size: how translate and evaluate search."""
    f = click.option(
        "--batch-size", type=POSITIVE, default=64, show_default=True, help="Sentences per batch."
    )(f)
    return setting_option("num_beams")(f)


def setting_options(f):
    """A flag for each search setting that declares one, in the declaration's order, but
    num_beams, whose --beam search_options gives evaluate too: --sample and what shapes its
    draws, and whatever setting is declared next."""
    for name in reversed([n for n, declared in SETTINGS.items() if declared.help]):
        f = f if name == "num_beams" else setting_option(name)(f)
    return f


def given_settings(flags: dict) -> dict:
    """The search settings that setting_options' flags were given, by name (a switch only
    when on); one that shapes sample's draws only, given without --sample, is a UsageError
    naming it, as it would silently change nothing."""
    given = {
        name: value for name, value in flags.items() if value is not None and value is not False
    }
    if not given.get("sample"):
        for name in given:
            if SETTINGS[name].draws:
                raise click.UsageError(
                    f"{flag(name)} shapes the distribution --sample draws from; add --sample"
                )
    return given


def language_options(f):
    """--target and --source: the language pair a multilingual model is asked for."""
    f = click.option(
        "--source",
        default=None,
        help="Language of the input, checked against the pairs the model translates.",
    )(f)
    return click.option(
        "--target",
        default=None,
        help="Language to write: a multilingual model reads its token (<2de>) before the "
        "text; required when it writes several.",
    )(f)


def where_options(f):
    """--layer and --head: which attention map of a trace a picture shows."""
    f = click.option(
        "--head", type=int, default=None, help="Head (from 1) [default: mean of heads]."
    )(f)
    return click.option(
        "--layer", type=int, default=None, help="Layer (from 1) [default: the last]."
    )(f)


def picture_option(help: str | None = None, required: bool = False):
    """--png/--svg/--pdf FILE: one picture, its format named by the suffix."""
    return click.option(
        "--png", "--svg", "--pdf", "picture", required=required, type=FILE, help=help
    )


def output_option(what: str):
    """-o/--output FILE: where a command's output lines go instead of stdout."""
    return click.option(
        "-o",
        "--output",
        "output_path",
        type=FILE,
        default=None,
        help=f"Write {what} to FILE instead of stdout (- is stdout).",
    )


def n_best_option(per: str):
    """--n-best: how many outputs each input gets, on its line, tab-separated."""
    return click.option(
        "--n-best",
        type=POSITIVE,
        default=1,
        show_default=True,
        help=f"Alternatives per {per}, tab-separated.",
    )
