"""`heedful heads`: how much each attention head of a Transformer matters, found by masking it
alone (heads.py; Michel et al. 2019): the BLEU its translations lose and the loss its
references gain, as a ranked list, a layer × head table per attention and (--png) a picture."""

from __future__ import annotations

import click

from heedful.cli.options import DIRECTORY, FILE, POSITIVE
from heedful.config import MAX_LINE_BYTES

TOP = 10  # heads listed by name, the ones that matter most


def _table(title: str, grid) -> list[str]:
    """BLEU lost per layer (rows) and head (columns)."""
    header = "".join(f"{f'head {h + 1}':>9}" for h in range(grid.shape[1]))
    lines = [f"{title}: BLEU lost when the head is masked", " " * 9 + header]
    for layer, row in enumerate(grid):
        cells = "".join("        -" if v != v else f"{v:9.2f}" for v in row)  # NaN: no such head
        lines.append(f"layer {layer + 1:<3}" + cells)
    return lines


def report(result, count: int, where: str, beams: int) -> str:
    """What `heedful heads` prints: the unmasked scores, the heads that matter most, a table
    per attention kind."""
    from heedful.visualize.heads_plot import TITLES

    search = "greedy search" if beams == 1 else f"beam {beams}"
    lines = [
        f"{count} sentences from {where}, {search}",
        f"unmasked: BLEU {result.bleu:.2f}, loss {result.loss:.4f} nats per target token",
        f"each head masked alone, the {TOP} that matter most (BLEU lost, loss gained):",
    ]
    for head, bleu, loss in result.ranked()[:TOP]:
        lines.append(f"  {str(head):<14} BLEU {bleu:+7.2f}   loss {loss:+.4f}")
    for kind, grid in result.masked_bleu.items():
        lines += ["", *_table(TITLES[kind], result.bleu - grid)]
    return "\n".join(lines) + "\n"


@click.command(short_help="How much each attention head matters: BLEU and loss with it masked.")
@click.argument("model_dir", type=DIRECTORY)
@click.option("--src", "src_path", type=FILE, required=True, help="Source sentences, one a line.")
@click.option("--ref", "ref_path", type=FILE, required=True, help="Their references, aligned.")
@click.option(
    "--max-sentences",
    type=POSITIVE,
    default=200,
    show_default=True,
    help="Use the first N pairs: every head costs one translation of them.",
)
@click.option(
    "--beam",
    "num_beams",
    type=POSITIVE,
    default=1,
    show_default=True,
    help="Beam size (1: greedy).",
)
@click.option("--png", "png_path", type=FILE, help="Also draw the layer × head picture here.")
@click.option(
    "--max-line-bytes",
    type=POSITIVE,
    default=MAX_LINE_BYTES,
    show_default=True,
    help="Refuse a line longer than this many bytes (UTF-8), naming its file and line.",
)
def heads(model_dir, src_path, ref_path, max_sentences, num_beams, png_path, max_line_bytes):
    """Mask each attention head alone and print how much BLEU the translations lose and how
    much the references' loss grows (Michel et al. 2019): the heads a model needs, and those
    it does without."""
    from tqdm import tqdm

    from heedful.data.corpus import LineLimit, read_parallel
    from heedful.inference.heads import attention_layers, importance
    from heedful.inference.translator import Translator

    translator = Translator.load(model_dir)
    count = sum(a.num_heads for stack in attention_layers(translator.model).values() for a in stack)
    limit = LineLimit(max_line_bytes, "--max-line-bytes")
    pairs = read_parallel(src_path, ref_path, "--src", "--ref", limit=limit)[:max_sentences]
    if not pairs:
        raise click.UsageError(f"--src {src_path} holds no sentences")
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    with tqdm(total=count, desc="masking heads", unit="head", leave=False) as bar:
        result = importance(translator, sources, references, num_beams, lambda _: bar.update())
    click.echo(report(result, len(pairs), src_path, num_beams), nl=False)
    if png_path:
        from heedful.visualize.heads_plot import plot_importance

        click.echo(f"picture: {plot_importance(result, png_path)}")
