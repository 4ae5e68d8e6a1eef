"""The `heedful` command: thin subcommands over the library."""

from __future__ import annotations

import sys

import click

from heedful.demo import DEMO_MODELS
from heedful.export import FORMATS, QUANTIZATIONS
from heedful.runtime import ENGINES, load_translator
from heedful.translator import QUANTIZE


class _Errors(click.Group):
    """Our own errors (bad config, bad corpus, bad checkpoint) print as one clear line, exit 1."""

    def invoke(self, ctx):
        from heedful.checkpoint import CheckpointError
        from heedful.config import ConfigError

        try:
            return super().invoke(ctx)
        except (ConfigError, CheckpointError, ValueError, FileNotFoundError) as error:
            raise click.ClickException(str(error)) from None
        except ModuleNotFoundError as error:  # an optional extra that is not installed
            raise click.ClickException(str(error)) from None


@click.group(cls=_Errors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="heedful")
def main() -> None:
    """heedful: attention-based sequence-to-sequence models you can see into."""
    _show_our_warnings_as_one_line()


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


def _set_threads(ctx, param, value) -> None:
    from heedful.cpu import set_threads

    set_threads(value)


def _threads_option(f):
    """--threads, applied as soon as it is parsed (before any model is loaded)."""
    return click.option(
        "--threads",
        type=click.IntRange(min=1),
        default=None,
        expose_value=False,
        callback=_set_threads,
        help="CPU threads for torch and CTranslate2 [default: one per core, or OMP_NUM_THREADS]. "
        "Fewer keeps a shared machine responsive.",
    )(f)


@main.command()
@click.option(
    "--model",
    "model_name",
    type=click.Choice(list(DEMO_MODELS)),
    default="transformer",
    show_default=True,
    help="Which model learns the task.",
)
@click.option("--out", default="heedful-demo", show_default=True, help="Where the heatmap goes.")
@click.option("--train-size", default=40_000, show_default=True, help="Generated training pairs.")
@click.option("--max-steps", type=int, default=None, help="Stop after this many steps.")
@click.option("--max-time", type=float, default=None, help="Stop after this many seconds.")
@click.option("--seed", default=1, show_default=True)
@click.option("--progress/--no-progress", default=True, help="Show a progress bar.")
@_threads_option
def demo(model_name, out, train_size, max_steps, max_time, seed, progress) -> None:
    """Learn to turn human-written dates into ISO dates, then draw the attention."""
    from heedful.demo import run_demo

    run_demo(
        model_name,
        out,
        train_size=train_size,
        max_steps=max_steps,
        max_time=max_time,
        seed=seed,
        progress=progress,
        echo=click.echo,
    )


@main.command()
@click.argument("config_path", type=click.Path(dir_okay=False))
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a config value, e.g. --set train.max_steps=200 (repeatable).",
)
@click.option("--run-dir", default=None, help="Run directory [default: runs/<config name>].")
@click.option("--force", is_flag=True, help="Delete an existing run directory and start over.")
@click.option("--progress/--no-progress", default=True)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="CPU threads, as --set train.threads=N [default: the config's, else one per core].",
)
def train(config_path, overrides, run_dir, force, progress, threads) -> None:
    """Train (or resume) a model from a YAML config."""
    if threads is not None:
        overrides = (*overrides, f"train.threads={threads}")
    from pathlib import Path

    from heedful.config import load_config
    from heedful.experiment import train_from_config

    config = load_config(config_path, list(overrides))
    run_dir = run_dir or str(Path("runs") / Path(config_path).stem)
    click.echo(f"run directory: {run_dir}")
    train_from_config(config, run_dir, force=force, progress=progress, echo=click.echo)


def _runtime_options(f):
    """--engine, --quantize and --threads: how the model runs (heedful.runtime.load_translator)."""
    f = _threads_option(f)
    f = click.option(
        "--engine",
        type=click.Choice(ENGINES),
        default="torch",
        show_default=True,
        help="torch: our own search, with attention. ctranslate2: a `heedful export` (or the "
        "model directory, converted on loading) run by CTranslate2 on the CPU "
        "(pip install 'heedful[fast]').",
    )(f)
    f = click.option(
        "--quantize",
        type=click.Choice(QUANTIZE),
        default=None,
        help="Run the Linear layers in int8 on the CPU (torch: dynamic quantization; "
        "ctranslate2: int8 compute).",
    )(f)
    return f


def _serve_default(name: str):
    """The default of one of `heedful serve`'s limits (heedful.server.ServerLimits)."""
    from heedful.server import ServerLimits

    return getattr(ServerLimits, name)


def _search_options(f):
    f = click.option(
        "--beam",
        "num_beams",
        type=int,
        default=None,
        help="Beam size (1 = greedy) [default: the model's generation.json].",
    )(f)
    f = click.option("--batch-size", default=64, show_default=True, help="Sentences per batch.")(f)
    return f


@main.command()
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.option(
    "-i",
    "--input",
    "input_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Read sentences from FILE instead of stdin.",
)
@click.option(
    "-o",
    "--output",
    "output_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write translations to FILE instead of stdout.",
)
@click.option(
    "--n-best", default=1, show_default=True, help="Alternatives per line, tab-separated."
)
@click.option(
    "--max-chars",
    type=click.IntRange(min=0),
    default=_serve_default("max_chars"),  # one limit for a line, whether translated or served
    show_default=True,
    help="Longest input line, in characters; a longer one stops the command (0: no limit).",
)
@_search_options
@_runtime_options
def translate(
    model_dir, input_path, output_path, n_best, max_chars, num_beams, batch_size, engine, quantize
) -> None:
    """Translate raw lines, one per line, in order (empty lines stay empty).

    Stdin and -i FILE are read alike: UTF-8, split on \\n only (a \\r\\n ending counts as
    one, the last line needs none; form feeds and U+2028 stay inside their line).
    """
    translator = load_translator(model_dir, engine, quantize)
    lines = _read_lines(input_path, max_chars)
    beams = max(num_beams or translator.generation.num_beams, n_best)
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


@main.command()
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.option("--src", "src_path", required=True, type=click.Path(dir_okay=False))
@click.option("--ref", "ref_path", required=True, type=click.Path(dir_okay=False))
@click.option(
    "--output",
    "output_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the translations to FILE.",
)
@_search_options
@_runtime_options
def evaluate(
    model_dir, src_path, ref_path, output_path, num_beams, batch_size, engine, quantize
) -> None:
    """Translate --src and score it against --ref: BLEU, chrF, TER and BLEU per source length."""
    from pathlib import Path

    from heedful.data.corpus import read_parallel
    from heedful.evaluation import bleu_by_length, corpus_scores, format_length_table

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


@main.command()
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.option(
    "--format",
    "format_",
    type=click.Choice(FORMATS),
    default=FORMATS[0],
    show_default=True,
    help="What to export to.",
)
@click.option(
    "-o",
    "--output",
    "output_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="The directory to write (replaced if it exists).",
)
@click.option(
    "--quantization",
    type=click.Choice(QUANTIZATIONS),
    default=None,
    help="Weight type of the export [default: float32, as trained].",
)
def export(model_dir, format_, output_dir, quantization) -> None:
    """Export a Transformer MODEL_DIR for a faster runtime: translate the result with
    `heedful translate OUTPUT --engine ctranslate2` (needs pip install 'heedful[fast]')."""
    from heedful.export import export_ctranslate2

    out = export_ctranslate2(model_dir, output_dir, quantization)
    click.echo(f"exported {model_dir} to {out} ({format_}, {quantization or 'float32'} weights)")


@main.command()
@click.argument("model_dirs", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("-o", "--output", "output_dir", required=True, type=click.Path(file_okay=False))
def average(model_dirs, output_dir) -> None:
    """Average the weights of several checkpoints of one model into OUTPUT."""
    from heedful.checkpoint import average_checkpoints

    out = average_checkpoints(list(model_dirs), output_dir)
    click.echo(f"averaged {len(model_dirs)} checkpoints into {out}")


def _where_options(f):
    f = click.option("--layer", type=int, default=None, help="Layer (from 1) [default: the last].")(
        f
    )
    f = click.option(
        "--head", type=int, default=None, help="Head (from 1) [default: mean of heads]."
    )(f)
    return f


@main.command()
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.argument("sentence")
@click.option(
    "--png",
    "--svg",
    "--pdf",
    "picture",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a heatmap (format from the suffix: .png, .svg or .pdf).",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the self-contained interactive viewer.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the attention trace as JSON (docs/trace-schema.md).",
)
@click.option(
    "--kind",
    type=click.Choice(["cross", "encoder", "decoder"]),
    default="cross",
    show_default=True,
    help="Which attention the picture shows.",
)
@click.option("--grid", is_flag=True, help="All layers × heads in one picture.")
@click.option("--beam", "num_beams", type=int, default=1, show_default=True)
@click.option("--n-best", type=int, default=1, show_default=True, help="Hypotheses in the trace.")
@_where_options
def attention(
    model_dir, sentence, picture, html_path, json_path, kind, grid, num_beams, n_best, layer, head
) -> None:
    """Translate SENTENCE and show where the model looked."""
    from heedful.translator import Translator
    from heedful.visualize.trace import build_trace

    if not (picture or html_path or json_path):
        raise click.UsageError("give at least one of --png/--svg/--pdf, --html or --json")
    translator = Translator.load(model_dir)
    trace = build_trace(translator, sentence, num_beams=num_beams, n_best=max(n_best, 1))
    click.echo(f"{sentence} -> {trace.hypotheses[0].text}")
    if json_path:
        trace.save(json_path)
        click.echo(f"trace: {json_path}")
    if picture:
        from heedful.visualize.heatmap import plot_trace

        plot_trace(trace, picture, kind=kind, layer=layer, head=head, grid=grid)
        click.echo(f"heatmap: {picture}")
    if html_path:
        from pathlib import Path

        from heedful.visualize.html import render_html

        Path(html_path).write_text(render_html(trace), encoding="utf-8")
        click.echo(f"viewer: {html_path}")


@main.command()
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.argument("sentence")
@click.option(
    "--kind", type=click.Choice(["cross", "encoder", "decoder"]), default="cross", show_default=True
)
@click.option("--layer", type=int, default=None, help="Layer (from 1) [default: the last].")
@click.option("--head", type=int, default=1, show_default=True, help="Head (from 1).")
@click.option(
    "--position",
    type=int,
    default=1,
    show_default=True,
    help="Query position (from 1): an output step, or a source token for --kind encoder.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the explanation as a web page.",
)
def explain(model_dir, sentence, kind, layer, head, position, html_path) -> None:
    """Print one attention computation with the model's real numbers."""
    from heedful.translator import Translator
    from heedful.visualize.explain import explain as run_explain

    result = run_explain(
        Translator.load(model_dir), sentence, layer=layer, head=head, position=position, kind=kind
    )
    click.echo(result.text(), nl=False)
    if html_path:
        from pathlib import Path

        Path(html_path).write_text(result.html(), encoding="utf-8")
        click.echo(f"page: {html_path}")


@main.command()
@click.option("--d-model", default=128, show_default=True)
@click.option("--length", default=50, show_default=True)
@click.option("--png", "--svg", "--pdf", "picture", required=True, type=click.Path(dir_okay=False))
def positional(d_model, length, picture) -> None:
    """Draw the sinusoidal positional-encoding matrix."""
    from heedful.visualize.heatmap import plot_positional

    plot_positional(d_model, length, picture)
    click.echo(f"positional encoding: {picture}")


@main.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--png", "--svg", "--pdf", "picture", required=True, type=click.Path(dir_okay=False))
def curves(run_dirs, picture) -> None:
    """Plot loss, validation BLEU and learning rate of one or more runs."""
    from pathlib import Path

    from heedful.visualize.heatmap import plot_curves

    plot_curves([Path(d) for d in run_dirs], picture)
    click.echo(f"curves: {picture}")


def _limit_options(f):
    """One flag per field of heedful.server.ServerLimits: --max-chars, --request-timeout, ..."""
    from dataclasses import fields

    from heedful.server import ServerLimits

    for spec in reversed(fields(ServerLimits)):
        flag = "--" + spec.name.replace("_", "-")
        kind = type(spec.default)
        f = click.option(
            flag,
            spec.name,
            type=kind,
            default=spec.default,
            show_default=True,
            help=spec.metadata["help"],
        )(f)
    return f


@main.command()
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, help="Port to listen on.")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
@click.option("--access-log/--no-access-log", default=False, help="Log every request.")
@_runtime_options
@_limit_options
def serve(model_dir, host, port, log_level, access_log, engine, quantize, **limits) -> None:
    """Serve MODEL_DIR over HTTP: LibreTranslate's POST /translate, /languages, a web page at /."""
    from heedful.server import ServerLimits
    from heedful.server import serve as run_server

    run_server(
        model_dir, host, port, ServerLimits(**limits), log_level, access_log, engine, quantize
    )


if __name__ == "__main__":
    main()
