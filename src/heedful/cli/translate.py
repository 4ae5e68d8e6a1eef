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


@click.command(cls=Deferred, later=_translate_options)
@click.argument("model_dir", type=DIRECTORY)
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
@search_options
def translate(
    model_dir, input_path, output_path, n_best, max_chars, num_beams, batch_size, engine, quantize
) -> None:
    """Translate raw lines, one per line, in order (empty lines stay empty).

    Stdin and -i FILE are read alike: UTF-8, split on \\n only (a \\r\\n ending counts as
    one, the last line needs none; form feeds and U+2028 stay inside their line).
    """
    from heedful.config import beams_for
    from heedful.runtime import load_translator

    translator = load_translator(model_dir, engine, quantize)
    lines = _read_lines(input_path, max_chars)
    beams = beams_for(num_beams or translator.generation.num_beams, n_best)
    results = translator.translate(lines, num_beams=beams, n_best=n_best, batch_size=batch_size)
    rows = ["\t".join([r.text] + [a.text for a in r.alternatives or []]) for r in results]
    text = "".join(row + "\n" for row in rows)
    if output_path:
        from pathlib import Path

        Path(output_path).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def _read_lines(path: str | None, max_chars: int) -> list[str]:
    """The lines to translate: stdin read exactly as a file is (data/corpus.py's line rules,
    strict UTF-8), the whole input refused when a line is longer than max_chars (0: no limit).

    A long line is an error, not a skipped line: output line N stays the translation of input
    line N, and an exit status is harder to miss than one refusal among many outputs.
    """
    from pathlib import Path

    from heedful.data.corpus import read_lines, split_lines

    if path is None:
        lines = split_lines(sys.stdin.buffer.read(), "<stdin>", "input")
    else:
        lines = read_lines(Path(path), "--input")
    for number, line in enumerate(lines, start=1):
        if max_chars and len(line) > max_chars:
            raise click.ClickException(
                f"{path or '<stdin>'}: line {number} has {len(line):,} characters, more than "
                f"--max-chars {max_chars:,}; split it, or raise --max-chars (0: no limit)"
            )
    return lines


@click.command(cls=Deferred, later=runtime_options)
@click.argument("model_dir", type=DIRECTORY)
@click.option("--src", "src_path", required=True, type=FILE)
@click.option("--ref", "ref_path", required=True, type=FILE)
@click.option(
    "--output",
    "output_path",
    type=FILE,
    default=None,
    help="Also write the translations to FILE.",
)
@search_options
def evaluate(
    model_dir, src_path, ref_path, output_path, num_beams, batch_size, engine, quantize
) -> None:
    """Translate --src and score it against --ref: BLEU, chrF, TER and BLEU per source length."""
    from pathlib import Path

    from heedful.data.corpus import read_parallel
    from heedful.evaluation import bleu_by_length, corpus_scores, format_length_table
    from heedful.runtime import load_translator

    translator = load_translator(model_dir, engine, quantize)
    pairs = read_parallel(Path(src_path), Path(ref_path), "--src", "--ref")
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    outputs = [
        t.text for t in translator.translate(sources, num_beams=num_beams, batch_size=batch_size)
    ]
    if output_path:
        Path(output_path).write_text("".join(o + "\n" for o in outputs), encoding="utf-8")
    click.echo(str(corpus_scores(outputs, references)))
    click.echo(format_length_table(bleu_by_length(sources, outputs, references)))


@click.command(cls=Deferred, later=lambda: [*runtime_options(), *limit_options()])
@click.argument("model_dir", type=DIRECTORY)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, help="Port to listen on.")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
@click.option("--access-log/--no-access-log", default=False, help="Log every request.")
def serve(model_dir, host, port, log_level, access_log, engine, quantize, **limits) -> None:
    """Serve MODEL_DIR over HTTP: LibreTranslate's POST /translate, /languages, a web page at /."""
    from heedful.server import ServerLimits
    from heedful.server import serve as run_server

    run_server(
        model_dir, host, port, ServerLimits(**limits), log_level, access_log, engine, quantize
    )
