"""Commands that draw what a model does: attention, explain, positional, curves."""

from __future__ import annotations

import click

from heedful.cli.options import (
    DIRECTORY,
    FILE,
    POSITIVE,
    Deferred,
    language_options,
    picture_option,
    where_options,
)


def _kind_option(help: str | None = None):
    """--kind: which attention (heedful.visualize.trace's ATTENTION_KINDS)."""

    def later() -> list[click.Parameter]:
        from heedful.visualize.trace import ATTENTION_KINDS

        kind = click.Option(
            ["--kind"],
            type=click.Choice(ATTENTION_KINDS),
            default="cross",
            show_default=True,
            help=help,
        )
        return [kind]

    return later


@click.command(
    cls=Deferred,
    later=_kind_option("Which attention the picture shows."),
    short_help="Translate a sentence and show where the model looked (or looked over training).",
)
@click.argument("model_dir", type=click.Path())
@click.argument("sentence", required=False)
@picture_option("Write a heatmap (format from the suffix: .png, .svg or .pdf).")
@click.option("--html", "html_path", type=FILE, help="Write the self-contained interactive viewer.")
@click.option(
    "--json",
    "json_path",
    type=FILE,
    help="Write the attention trace as JSON (docs/trace-schema.md).",
)
@click.option("--grid", is_flag=True, help="All layers × heads in one picture.")
@click.option(
    "--beam",
    "num_beams",
    type=POSITIVE,
    default=1,
    show_default=True,
    help="Beam size (1: greedy) of the search traced.",
)
@click.option(
    "--n-best",
    type=POSITIVE,
    default=1,
    show_default=True,
    help="Hypotheses in the trace (the beam grows to hold them).",
)
@click.option(
    "--words",
    is_flag=True,
    help="Merge subword pieces into words: attention to a word sums its pieces', from a word "
    "averages them (heedful.visualize.words).",
)
@where_options
@language_options
def attention(
    model_dir,
    sentence,
    picture,
    html_path,
    json_path,
    kind,
    grid,
    num_beams,
    n_best,
    words,
    layer,
    head,
    target,
    source,
) -> None:
    """Translate SENTENCE (an image model: caption the image file it names) and show where
    the model looked. Without SENTENCE, MODEL_DIR is a run directory (or a demo's --out, or
    its snapshots.json) whose inputs were traced over training (train.snapshot_sentences):
    --html writes them with a training-step slider."""
    from heedful.config import beams_for
    from heedful.inference.translator import Translator
    from heedful.visualize.trace import build_trace

    if sentence is None:
        return _training_viewer(model_dir, html_path, picture or json_path or grid)
    if not (picture or html_path or json_path):
        raise click.UsageError("give at least one of --png/--svg/--pdf, --html or --json")
    translator = Translator.load(model_dir)
    pictures = translator.source.kind == "image"
    _check_views(translator, sentence, picture, kind, grid, words, layer, head)
    beams = beams_for(num_beams, n_best)
    trace = build_trace(translator, sentence, beams, n_best, target=target, source=source)
    if words:
        from heedful.visualize.words import merge_words

        trace = merge_words(trace)
    click.echo(f"{translator.source.describe(sentence)} -> {trace.hypotheses[0].text}")
    if json_path:
        trace.save(json_path)
        click.echo(f"trace: {json_path}")
    if picture and pictures:
        from heedful.cli.see_image import draw_caption_overlay

        draw_caption_overlay(translator, sentence, picture, layer, head, beams)
    elif picture:
        from heedful.visualize.heatmap import plot_trace

        # the trace labels the source as the model saw it: `<unk> (猫)` for an unknown piece
        plot_trace(trace, picture, kind=kind, layer=layer, head=head, grid=grid)
        click.echo(f"heatmap: {picture}")
    if html_path:
        _write_viewer(trace, html_path)


def _check_views(translator, sentence, picture, kind, grid, words, layer, head) -> None:
    """The views asked for, refused before translating where the model has none of them."""
    if translator.source.kind == "image":  # SENTENCE names a picture (see_image.py)
        from heedful.cli.see_image import check_picture_options

        check_picture_options(sentence, kind, grid, words)
    elif picture:
        from heedful.visualize.heatmap import check_view
        from heedful.visualize.trace import model_info

        check_view(model_info(translator.config), kind, layer, head, grid)


def _training_viewer(path: str, html_path: str | None, other_output: bool) -> None:
    """The viewer over training of the snapshots in `path` (visualize/snapshots.py)."""
    from pathlib import Path

    from heedful.visualize.snapshots import read_snapshots, render_snapshots, snapshots_path

    if other_output or not html_path:
        raise click.UsageError(
            "without SENTENCE, MODEL_DIR is a run directory traced over training: give --html "
            "(its snapshots have no heatmap or trace file of their own)"
        )
    data = read_snapshots(path)
    title = Path(path).resolve().name if Path(path).is_dir() else str(snapshots_path(path))
    Path(html_path).write_text(render_snapshots(data, title), encoding="utf-8")
    steps = ", ".join(str(s["step"]) for s in data["snapshots"])
    click.echo(f"{len(data['inputs'])} inputs traced at steps {steps}")
    click.echo(f"viewer over training: {html_path}")


def _write_viewer(trace, html_path: str) -> None:
    from pathlib import Path

    from heedful.visualize.html import render_html

    Path(html_path).write_text(render_html(trace), encoding="utf-8")
    click.echo(f"viewer: {html_path}")


@click.command(
    cls=Deferred,
    later=_kind_option("Which attention the calculation is of."),
    short_help="Print one attention calculation, with real numbers.",
)
@click.argument("model_dir", type=DIRECTORY)
@click.argument("sentence")
@click.option("--layer", type=int, default=None, help="Layer (from 1) [default: the last].")
@click.option("--head", type=int, default=None, help="Head (from 1) [default: 1; an RNN has none].")
@click.option(
    "--position",
    type=int,
    default=1,
    show_default=True,
    help="Query position (from 1): an output step, or a source token for --kind encoder.",
)
@click.option(
    "--html", "html_path", type=FILE, help="Also write the viewer, opened on this calculation."
)
@language_options
def explain(model_dir, sentence, kind, layer, head, position, html_path, target, source) -> None:
    """Print one attention computation with the model's real numbers."""
    from heedful.inference.translator import Translator
    from heedful.visualize.explain import explain as run_explain

    translator = Translator.load(model_dir)
    languages = {"target": target, "source": source}
    where = {"layer": layer, "head": head, "position": position, "kind": kind}
    result = run_explain(translator, sentence, **where, **languages)
    click.echo(result.text(), nl=False)
    if html_path:
        from pathlib import Path

        from heedful.visualize.html import render_step
        from heedful.visualize.trace import build_trace

        trace = build_trace(translator, sentence, **languages)
        last = trace.model["encoder_layers" if kind == "encoder" else "decoder_layers"]
        page = render_step(trace, kind, layer or last, head or 1, position)
        Path(html_path).write_text(page, encoding="utf-8")
        click.echo(f"viewer: {html_path}")


@click.command(short_help="Draw the sinusoidal positional encodings.")
@click.option("--d-model", default=128, show_default=True, help="Width of each encoding (columns).")
@click.option("--length", default=50, show_default=True, help="Positions drawn (rows).")
@picture_option("The picture to write (format from the suffix: .png, .svg or .pdf).", True)
def positional(d_model, length, picture) -> None:
    """Draw the sinusoidal positional-encoding matrix."""
    from heedful.visualize.positional import plot_positional

    plot_positional(d_model, length, picture)
    click.echo(f"positional encoding: {picture}")


@click.command(short_help="Plot loss, BLEU and learning rate of runs.")
@click.argument("run_dirs", nargs=-1, required=True, type=DIRECTORY)
@picture_option("The picture to write (format from the suffix: .png, .svg or .pdf).", True)
def curves(run_dirs, picture) -> None:
    """Plot loss, validation BLEU and learning rate of one or more runs."""
    from pathlib import Path

    from heedful.visualize.curves import plot_curves

    plot_curves([Path(d) for d in run_dirs], picture)
    click.echo(f"curves: {picture}")
