"""Commands that run a model on text: translate, evaluate, serve."""

from __future__ import annotations

import sys

import click

from heedful.cli.options import (
    DIRECTORY,
    FILE,
    POSITIVE,
    Deferred,
    limit_options,
    runtime_options,
    search_options,
)
from heedful.config import MAX_LINE_BYTES


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


def sampling_options(f):
    """--sample and its settings: draw each token from the softmax (heedful.sampling)."""
    options = [
        click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=None,
                     help="Seed of the draws: the same input and seed give the same samples."),
        click.option("--top-p", type=click.FloatRange(0.0, 1.0, min_open=True), default=None,
                     help="Draw among the fewest tokens holding this much probability."),
        click.option("--top-k", type=POSITIVE, default=None,
                     help="Draw among the k most probable tokens only."),
        click.option("--temperature", type=click.FloatRange(0.0, min_open=True), default=None,
                     help="Divide log-probabilities by this: below 1 sharper, above 1 flatter."),
        click.option("--sample", is_flag=True,
                     help="Draw each token from the model's distribution instead of searching; "
                     "--n-best N draws N outputs per line."),
    ]  # fmt: skip
    for option in options:
        f = option(f)
    return f


def _sampling_settings(sample, temperature, top_k, top_p, seed) -> dict:
    """The GenerationConfig fields the sampling flags set; a setting without --sample is an
    error (it would silently do nothing)."""
    given = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}
    given = {name: value for name, value in given.items() if value is not None}
    if given and not sample:
        flag = "--" + next(iter(given)).replace("_", "-")
        raise click.UsageError(f"{flag} shapes the distribution --sample draws from; add --sample")
    return {"sample": True, **given} if sample else {}


@click.command(cls=Deferred, later=_translate_options)
@click.argument("model_dirs", metavar="MODEL_DIR...", nargs=-1, required=True, type=click.Path())
@click.option(
    "-i",
    "--input",
    "input_path",
    type=FILE,
    default=None,
    help="Read sentences from FILE instead of stdin.",
)
@click.option(
    "-o",
    "--output",
    "output_path",
    type=FILE,
    default=None,
    help="Write translations to FILE instead of stdout.",
)
@click.option(
    "--n-best",
    type=POSITIVE,
    default=1,
    show_default=True,
    help="Alternatives per line, tab-separated.",
)
@click.option(
    "--prefix",
    "prefix_path",
    type=FILE,
    default=None,
    help="FILE of target beginnings, one per input line (an empty line: none), or 'tsv': each "
    "input line is SOURCE<TAB>PREFIX. Every output starts with its prefix.",
)
@click.option(
    "--target",
    default=None,
    help="Language to write: a multilingual model reads its "
    "token (<2de>) before each line; required when it writes several.",
)
@click.option(
    "--source",
    default=None,
    help="Language of the input, checked against the pairs the model translates.",
)
@search_options
@sampling_options
def translate(
    model_dirs, input_path, output_path, n_best, prefix_path, target, source, num_beams,
    batch_size, engine, quantize, max_chars, **sampling,
) -> None:  # fmt: skip
    """Translate raw lines, one per line, in order (empty lines stay empty).

    Stdin and -i FILE are read alike: UTF-8, split on \\n only (a \\r\\n ending counts as
    one, the last line needs none; form feeds and U+2028 stay inside their line). Several
    MODEL_DIRs translate as one ensemble: their log-probabilities averaged at every step (their
    vocabularies must be equal; an RNN and a Transformer may be mixed).
    """
    from heedful.cli.caption import caption_images, image_arguments
    from heedful.config import beams_for

    images = image_arguments(model_dirs)  # an image model: MODEL_DIR image.png ... (caption.py)
    if images is not None:
        return caption_images(model_dirs[0], images, num_beams, n_best, batch_size, output_path)
    settings = _sampling_settings(**sampling)
    if engine != "torch" and (settings or prefix_path):
        raise click.UsageError(f"--sample and --prefix need the torch engine, not {engine}")
    translator = _load(model_dirs, engine, quantize)
    lines = _read_lines(input_path, max_chars)
    lines, prefixes = _prefixes(lines, prefix_path, max_chars)
    lines = _directed(model_dirs[0], lines, target, source)
    beams = beams_for(num_beams or translator.generation.num_beams, n_best)
    if prefixes is not None:
        settings["prefixes"] = prefixes
    results = translator.translate(
        lines, num_beams=beams, n_best=n_best, batch_size=batch_size, **settings
    )
    rows = ["\t".join([r.text] + [a.text for a in r.alternatives or []]) for r in results]
    text = "".join(row + "\n" for row in rows)
    if output_path:
        from pathlib import Path

        Path(output_path).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def _load(model_dirs: tuple[str, ...], engine: str, quantize: str | None):
    """One model directory: its translator; several: their ensemble (torch engine only)."""
    from heedful.runtime import load_translator

    if len(model_dirs) == 1:
        return load_translator(model_dirs[0], engine, quantize)
    if engine != "torch":
        raise click.UsageError(f"an ensemble runs on the torch engine, not --engine {engine}")
    from heedful.translator import load_ensemble

    return load_ensemble(model_dirs, quantize=quantize)


def _directed(model_dir: str, lines: list[str], target, source) -> list[str]:
    """The lines as the model reads them into --target: after its token for a multilingual
    model (data/languages.py); a pair it does not translate is an error naming its pairs."""
    from heedful.data.languages import source_texts
    from heedful.translator import directions

    pairs, tokens = directions(model_dir)
    if not tokens and target is None and source is None:
        return lines
    return source_texts(lines, pairs, tokens, target, source)


def _regular_file(path, option: str) -> None:
    """A FIFO would block until something writes to it (for ever, if nothing does), a device
    or a directory is no file of lines: refused by name before opening (issue 26)."""
    import stat

    try:
        mode = path.stat().st_mode
    except OSError:  # missing or unreadable: the reader says which
        return
    if not stat.S_ISREG(mode):
        kinds = {stat.S_IFIFO: "a FIFO", stat.S_IFDIR: "a directory"}
        kind = kinds.get(stat.S_IFMT(mode), "a device or socket")
        raise click.ClickException(
            f"{option} {path}: {kind}, not a regular file; give a file, one line per input line"
        )


def _line_limit(max_chars: int):
    """The bytes a line is read to before it is refused: 4 per --max-chars character (UTF-8's
    longest) and 16 MiB at least, so that a line a little over --max-chars is still counted
    for its message, and /dev/zero (no line end at all) is stopped, never held whole."""
    from heedful.data.lines import MAX_LINE_BYTES, LineLimit

    setting = "--max-chars (a line may have 4 bytes per character, and 16 MiB whatever it is)"
    return LineLimit(max(MAX_LINE_BYTES, 4 * max_chars), setting)


def _prefixes(lines: list[str], prefix_path: str | None, max_chars: int):
    """The lines to translate and their prefixes (None when there are none)."""
    if prefix_path is None:
        return lines, None
    if prefix_path == "tsv":
        for number, line in enumerate(lines, start=1):
            if line and line.count("\t") != 1:
                raise click.ClickException(
                    f"--prefix tsv: input line {number} has {line.count(chr(9))} tabs; each "
                    "line is SOURCE<TAB>PREFIX"
                )
        pairs = [line.split("\t") if line else ["", ""] for line in lines]
        return [s for s, _ in pairs], [p for _, p in pairs]
    from pathlib import Path

    from heedful.data.corpus import read_lines

    _regular_file(Path(prefix_path), "--prefix")
    prefixes = read_lines(Path(prefix_path), "--prefix", _line_limit(max_chars))
    if len(prefixes) != len(lines):
        raise click.ClickException(
            f"--prefix {prefix_path} has {len(prefixes)} lines for {len(lines)} input lines; "
            "give one per line (an empty line: no prefix)"
        )
    return lines, prefixes


def _read_lines(path: str | None, max_chars: int) -> list[str]:
    """The lines to translate: stdin read exactly as a file is (data/corpus.py's line rules,
    strict UTF-8), the whole input refused when a line is longer than max_chars (0: no limit).

    A long line is an error, not a skipped line: output line N stays the translation of input
    line N, and an exit status is harder to miss than one refusal among many outputs.
    """
    from pathlib import Path

    from heedful.data.corpus import read_lines, split_lines

    limit = _line_limit(max_chars)  # read in bounded pieces: /dev/zero is an error, not memory
    if path is None:
        lines = split_lines(sys.stdin.buffer, "<stdin>", "input", limit)
    else:
        lines = read_lines(Path(path), "--input", limit)
    for number, line in enumerate(lines, start=1):
        if max_chars and len(line) > max_chars:
            raise click.ClickException(
                f"{path or '<stdin>'}: line {number} has {len(line):,} characters, more than "
                f"--max-chars {max_chars:,}; split it, or raise --max-chars (0: no limit)"
            )
    return lines


def _evaluation_reader(src_path, ref_path, jsonl_path, fields: str, max_line_bytes: int):
    """What reads the (source, reference) pairs, from --src and --ref or from --jsonl's two
    --fields; the options are checked now, the files read when it is called."""
    from functools import partial
    from pathlib import Path

    from heedful.data.corpus import LineLimit, read_jsonl, read_parallel

    limit = LineLimit(max_line_bytes, "--max-line-bytes")
    ctx = click.get_current_context()
    if jsonl_path is None:
        if src_path is None or ref_path is None:
            raise click.UsageError("give --src and --ref (aligned files), or --jsonl", ctx)
        return partial(read_parallel, Path(src_path), Path(ref_path), "--src", "--ref", limit=limit)
    if src_path is not None or ref_path is not None:
        raise click.UsageError("--jsonl holds the sources and references: leave out --src and "
                               "--ref", ctx)  # fmt: skip
    names = fields.split(",")
    if len(names) != 2 or not all(names):
        raise click.BadParameter(f"expected two names with a comma between, got {fields!r}",
                                 ctx, param_hint="--fields")  # fmt: skip
    return partial(read_jsonl, Path(jsonl_path), "--jsonl", *names, limit=limit)


@click.command(cls=Deferred, later=runtime_options)
@click.argument("model_dir", type=DIRECTORY)
@click.option("--src", "src_path", type=FILE, help="Source lines, aligned with --ref.")
@click.option("--ref", "ref_path", type=FILE, help="Reference lines.")
@click.option(
    "--jsonl",
    "jsonl_path",
    type=FILE,
    help="Instead of --src and --ref: a JSON Lines file of both (summarization test sets).",
)
@click.option(
    "--fields",
    default="document,summary",
    show_default=True,
    help="--jsonl's source and reference fields (CNN/DailyMail: article,highlights).",
)
@click.option(
    "--output",
    "output_path",
    type=FILE,
    default=None,
    help="Also write the translations to FILE.",
)
@click.option(
    "--metric",
    type=click.Choice(["bleu", "rouge"]),
    default="bleu",
    show_default=True,
    help="bleu: BLEU, chrF and TER; rouge: ROUGE-1/2/L F1 (rouge-score, for summaries) too.",
)
@click.option("--target", default=None, help="Language to write, for a multilingual model.")
@click.option(
    "--max-line-bytes",
    type=POSITIVE,
    default=MAX_LINE_BYTES,
    show_default=True,
    help="Longest line of --src, --ref or --jsonl, in bytes; a longer one is an error.",
)
@search_options
def evaluate(
    model_dir, src_path, ref_path, jsonl_path, fields, output_path, metric, target,
    max_line_bytes, num_beams, batch_size, engine, quantize,
) -> None:  # fmt: skip
    """Translate --src and score it against --ref: BLEU, chrF, TER (with --metric rouge also
    ROUGE-1/2/L) and BLEU per source length."""
    from pathlib import Path

    from heedful.evaluation import bleu_by_length, corpus_scores, format_length_table
    from heedful.runtime import load_translator

    if metric == "rouge":  # before any translating: say now if the package is missing
        from heedful.evaluation import require_rouge, rouge_scores

        require_rouge()
    read_pairs = _evaluation_reader(src_path, ref_path, jsonl_path, fields, max_line_bytes)
    translator = load_translator(model_dir, engine, quantize)
    pairs = read_pairs()
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    read = _directed(model_dir, sources, target, None)  # after <2xx> for a multilingual model
    outputs = [
        t.text for t in translator.translate(read, num_beams=num_beams, batch_size=batch_size)
    ]
    if output_path:
        Path(output_path).write_text("".join(o + "\n" for o in outputs), encoding="utf-8")
    click.echo(str(corpus_scores(outputs, references)))
    if metric == "rouge":
        click.echo(str(rouge_scores(outputs, references)))
    click.echo(format_length_table(bleu_by_length(sources, outputs, references)))


@click.command(cls=Deferred, later=lambda: [*runtime_options(), *limit_options()])
@click.argument("model_dirs", metavar="MODEL_DIR...", nargs=-1, required=True, type=DIRECTORY)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, help="Port to listen on.")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
@click.option("--access-log/--no-access-log", default=False, help="Log every request.")
def serve(model_dirs, host, port, log_level, access_log, engine, quantize, **limits) -> None:
    """Serve MODEL_DIR over HTTP: LibreTranslate's POST /translate, /languages, a web page at /.

    Several MODEL_DIRs (or one multilingual model) serve every language pair they have, each
    request going to the model of its source and target; two models of one pair are an error.
    """
    from heedful.server import ServerLimits
    from heedful.server import serve as run_server

    dirs = model_dirs[0] if len(model_dirs) == 1 else list(model_dirs)
    run_server(dirs, host, port, ServerLimits(**limits), log_level, access_log, engine, quantize)
