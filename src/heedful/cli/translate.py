"""`heedful translate`: a model run on lines of text, from a file or as they arrive on stdin
(translate_input.py says which, and in what pieces)."""

from __future__ import annotations

import sys

import click

from heedful.cli.options import (
    FILE,
    Deferred,
    given_settings,
    language_options,
    n_best_option,
    output_option,
    runtime_options,
    search_options,
    setting_options,
)


def _translate_options() -> list[click.Parameter]:
    from heedful.server import ServerLimits

    max_chars = click.Option(
        ["--max-chars"],
        type=click.IntRange(min=0),
        default=ServerLimits.max_chars,  # one limit for a line, whether translated or served
        show_default=True,
        help="Longest input line, in characters; a longer one stops the command (0: no limit).",
    )
    return [max_chars, *runtime_options()]


@click.command(
    cls=Deferred,
    later=_translate_options,
    short_help="Translate lines of text, one output line each.",
)
@click.argument("model_dirs", metavar="MODEL_DIR...", nargs=-1, required=True, type=click.Path())
@click.option(
    "-i",
    "--input",
    "input_path",
    type=FILE,
    default=None,
    help="Read sentences from FILE (read whole, batched by length) instead of stdin "
    "(translated as lines arrive); - is stdin.",
)
@output_option("translations")
@n_best_option("line")
@click.option(
    "--prefix",
    "prefix_path",
    type=FILE,
    default=None,
    help="FILE of target beginnings, one per input line or image (an empty line: none), or "
    "'tsv': each input line is SOURCE<TAB>PREFIX. Every output starts with its prefix.",
)
@language_options
@search_options
@setting_options
def translate(
    model_dirs,
    input_path,
    output_path,
    n_best,
    prefix_path,
    target,
    source,
    num_beams,
    batch_size,
    engine,
    quantize,
    max_chars,
    **settings,
) -> None:
    """Translate raw lines, one per line, in order (empty lines stay empty).

    Stdin and -i FILE are read alike: UTF-8, split on \\n only (a \\r\\n ending counts as
    one, the last line needs none; form feeds and U+2028 stay inside their line). A file is
    read whole and batched by length; stdin is translated as it arrives, each output line
    written as soon as it is done, so translate can sit in a pipe (with --seed or --prefix
    FILE stdin is read whole first: their outputs must not depend on what arrived together).
    Several MODEL_DIRs translate as one ensemble: their log-probabilities averaged at every
    step (their vocabularies must be equal; an RNN and a Transformer may be mixed).
    """
    from heedful.cli.translate_input import pieces
    from heedful.config import beams_for

    images = image_arguments(model_dirs)  # an image model: MODEL_DIR image.png ...
    given = given_settings(settings)  # the search settings' flags (setting_options)
    flagged = {"num_beams": num_beams, **given} if num_beams else given  # --beam too
    if images is not None:
        _check_engine("torch", flagged, prefix_path is not None, images=True)
        prefixes = _image_prefixes(prefix_path, len(images), max_chars)
        search = (num_beams, n_best, batch_size, given)
        return translate_images(model_dirs[0], images, *search, output_path, prefixes)
    _check_engine(engine, flagged, prefix_path is not None)
    translator = _load(model_dirs, engine, quantize)
    direct = director(model_dirs[0], target, source)
    beams = beams_for(num_beams or translator.generation.num_beams, n_best)
    asked = translator.generation.but(num_beams=beams, n_best=n_best, **given)
    whole = prefix_path not in (None, "tsv") or "seed" in given
    with _Output(output_path) as output:
        for first, lines in pieces(input_path, max_chars, batch_size, whole):
            lines, prefixes = _prefixes(lines, first, prefix_path, max_chars)
            results = translator.translate(
                direct(lines), batch_size=batch_size, prefixes=prefixes, settings=asked
            )
            output.write(_rows(results))


def _rows(results) -> list[str]:
    """One line per input: its output, then its n-best alternatives, tab-separated."""
    return ["\t".join([r.text] + [a.text for a in r.alternatives or []]) for r in results]


def image_arguments(paths: tuple[str, ...]) -> list[str] | None:
    """`translate`'s arguments as (model, images) when the first is an image model's directory:
    the images; None for text models, whose arguments must all be directories, as before."""
    from pathlib import Path

    from heedful.checkpoint.model_dir import source_kind

    if Path(paths[0]).is_dir() and source_kind(paths[0]) == "image":
        return list(paths[1:])
    for path in paths:
        if Path(path).is_file():
            raise click.BadParameter(f"Directory {path!r} is a file.", param_hint="'MODEL_DIR...'")
    return None


def translate_images(
    model_dir, images, num_beams, n_best, batch_size, given=None, output_path=None, prefixes=None
) -> None:
    """An image model's captions of `images`, one line each, in order, to stdout or
    output_path (`heedful translate MODEL image.png ...` and `heedful caption`): the one
    Translator's translate, as for text; an error names the image. given: the search
    settings of setting_options' flags; prefixes: one beginning per image, or None."""
    from heedful.checkpoint.model_dir import CheckpointError
    from heedful.config import beams_for
    from heedful.data.images import ImageError
    from heedful.inference.translator import Translator

    if not images:
        raise click.UsageError("give one or more images to caption after the model directory")
    try:
        translator = Translator.load(model_dir)
        beams = beams_for(num_beams or translator.generation.num_beams, n_best)
        settings = translator.generation.but(num_beams=beams, n_best=n_best, **(given or {}))
        found = translator.translate(
            images, batch_size=batch_size, prefixes=prefixes, settings=settings
        )
    except (CheckpointError, ImageError) as error:
        raise click.ClickException(str(error)) from None
    with _Output(output_path) as output:
        output.write(_rows(found))


def _image_prefixes(prefix_path: str | None, count: int, max_chars: int) -> list[str] | None:
    """--prefix FILE given with images: one beginning per image (an empty line: none)."""
    if prefix_path == "tsv":
        raise click.UsageError(
            "--prefix tsv reads SOURCE<TAB>PREFIX lines of text; for images give --prefix "
            "FILE, one beginning per image"
        )
    return None if prefix_path is None else _prefixes([""] * count, 1, prefix_path, max_chars)[1]


def _check_engine(engine: str, flagged: dict, prefixes: bool, images: bool = False) -> None:
    """What the engine cannot do, refused by its declared capabilities before a model loads
    (engine.check_supported, the check of the Python API and the server too). flagged: the
    search settings the flags give, on SearchSettings' defaults, not yet the model's."""
    from heedful.config import ConfigError
    from heedful.config.search import SearchSettings
    from heedful.inference.engine import CLI, Unsupported, check_supported
    from heedful.inference.runtime import engine_type

    if images:  # an image model's Translator (engine.py)
        from heedful.inference.engine import PICTURES as capabilities
    else:
        capabilities = engine_type(engine).capabilities
    try:
        asked = SearchSettings(**flagged)
    except ConfigError:  # at odds with a default the model's generation.json may not share
        return  # (n_best and num_beams): judged, with the engine, once the model's are known
    try:
        check_supported(engine, capabilities, asked, prefixes, names=CLI)
    except Unsupported as error:
        raise click.UsageError(str(error)) from None


class _Output:
    """Where the translations go: stdout, or a file opened when the first piece is done (a
    command that fails before leaves an existing file as it was); flushed after every piece,
    so that a reader on the other end of a pipe has each line as soon as it is translated."""

    def __init__(self, path: str | None):
        self.path = None if path == "-" else path
        self.file = None

    def __enter__(self) -> _Output:
        return self

    def write(self, rows: list[str]) -> None:
        if self.file is None and self.path is None:
            self.file = sys.stdout
        elif self.file is None:
            self.file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 (closed on exit)
        self.file.write("".join(row + "\n" for row in rows))
        self.file.flush()

    def __exit__(self, error_type, *_) -> None:
        if error_type is None and self.file is None:
            self.write([])  # no input at all: an empty file, as an empty -i FILE gives
        if self.file is not None and self.file is not sys.stdout:
            self.file.close()


def _load(model_dirs: tuple[str, ...], engine: str, quantize: str | None):
    """One model directory: its translator; several: their ensemble (torch engine only)."""
    from heedful.inference.runtime import load_translator

    if len(model_dirs) == 1:
        return load_translator(model_dirs[0], engine, quantize)
    if engine != "torch":
        raise click.UsageError(f"an ensemble runs on the torch engine, not --engine {engine}")
    from heedful.inference.translator import load_ensemble

    return load_ensemble(model_dirs, quantize=quantize)


def director(model_dir: str, target, source):
    """What puts lines as the model reads them into --target: after its token for a
    multilingual model (data/languages.py). A pair it does not translate is an error naming
    its pairs, said now, before any input is read."""
    from heedful.data.languages import source_texts
    from heedful.inference.translator import directions

    pairs, tokens = directions(model_dir)
    if not tokens and target is None and source is None:
        return list
    source_texts([], pairs, tokens, target, source)  # the check alone
    return lambda lines: source_texts(lines, pairs, tokens, target, source)


def _prefixes(lines: list[str], first: int, prefix_path: str | None, max_chars: int):
    """The lines to translate and their prefixes (None when there are none); `first` is the
    number of lines[0] in the input."""
    if prefix_path is None:
        return lines, None
    if prefix_path == "tsv":
        for number, line in enumerate(lines, start=first):
            if line and line.count("\t") != 1:
                raise click.ClickException(
                    f"--prefix tsv: input line {number} has {line.count(chr(9))} tabs; each "
                    "line is SOURCE<TAB>PREFIX"
                )
        pairs = [line.split("\t") if line else ["", ""] for line in lines]
        return [s for s, _ in pairs], [p for _, p in pairs]
    from pathlib import Path

    from heedful.cli.translate_input import line_limit, regular_file
    from heedful.data.corpus import read_lines

    regular_file(Path(prefix_path), "--prefix")
    prefixes = read_lines(Path(prefix_path), "--prefix", line_limit(max_chars))
    if len(prefixes) != len(lines):
        raise click.ClickException(
            f"--prefix {prefix_path} has {len(prefixes)} lines for {len(lines)} input lines; "
            "give one per line (an empty line: no prefix)"
        )
    return lines, prefixes
