"""`heedful attention MODEL image.png` for an image model: the caption, and where it looked for
each word, as the Show, Attend and Tell figure (--png: one panel per word), the viewer (--html)
or the trace (--json). see.py's `attention` hands image models here."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

SMALL_SIDE = 256  # pixels: a smaller picture (a 48-pixel scene) is enlarged for the figure


def caption_overlay(
    captioner, image, layer: int | None = None, head: int | None = None, num_beams: int = 1
):
    """(pixels (m, m, 3) uint8, attention (T, gh, gw), words, Caption) of `image`'s caption
    (the best of `num_beams`): what draw_overlay draws. layer and head from 1 (None: the last
    layer, heads averaged).

    The pixels are the square the model saw (trace_image.seen_pixels); a small one is enlarged
    by a whole factor, so each region stays exactly where it was."""
    from heedful.visualize.trace_check import check_index
    from heedful.visualize.trace_image import seen_pixels

    [caption] = captioner.caption([image], num_beams, need_weights=True)
    if caption.attention is None:
        raise ValueError("this model has no attention over the image (an RNN without attention)")
    _, layers, heads, _ = caption.attention.shape  # (T, L, H, S)
    at = -1 if layer is None else check_index("layer", layer, layers, "decoder layer")
    maps = caption.attention[:, at]  # (T, H, S)
    if head is None:
        weights = maps.mean(dim=1)  # (T, S)
    else:
        weights = maps[:, check_index("head", head, heads, "head")]
    attention = weights.reshape(-1, *caption.grid).double().numpy()  # (T, gh, gw)
    pixels = seen_pixels(image, side=2 * SMALL_SIDE)
    scale = max(1, -(-SMALL_SIDE // pixels.shape[0]))  # ⌈256 / m⌉
    pixels = np.kron(pixels, np.ones((scale, scale, 1), dtype=np.uint8))
    return pixels, attention, list(caption.tokens), caption


def image_attention(model_dir, image, picture, html_path, json_path, options: dict) -> None:
    """The attention command for an image model; `options` holds the text command's other
    options, of which kind, grid, words, num_beams, n_best, layer and head mean something here."""
    from heedful.inference.captioner import Captioner

    if options["kind"] != "cross":
        raise click.UsageError(
            "an image model's pictures show the caption's attention over the image "
            "(--kind cross); its ViT self-attention and rollout are in the --html viewer"
        )
    if options["grid"] or options["words"]:
        raise click.UsageError("--grid and --words are for text models")
    if not Path(image).is_file():
        raise click.BadParameter(f"{image!r} is not an image file", param_hint="'SENTENCE'")
    captioner = Captioner.load(model_dir)
    if picture:
        from heedful.visualize.overlay import draw_overlay

        where = (options["layer"], options["head"], options["num_beams"])
        pixels, attention, words, caption = caption_overlay(captioner, image, *where)
        click.echo(f"{Path(image).name} -> {caption.text}")
        title = f"{caption.text!r}: attention over the image, word by word"
        draw_overlay(pixels, attention, words, Path(picture), title)
        click.echo(f"overlay: {picture} ({len(words)} panels)")
    if html_path or json_path:
        _write_trace(captioner, image, html_path, json_path, options, said=bool(picture))


def _write_trace(captioner, image, html_path, json_path, options: dict, said: bool) -> None:
    from heedful.config import beams_for
    from heedful.visualize.trace_image import build_image_trace

    beams = beams_for(options["num_beams"], options["n_best"])
    trace = build_image_trace(captioner, image, num_beams=beams, n_best=options["n_best"])
    if not said:  # the caption, unless the picture's line gave it
        click.echo(f"{trace.source} -> {trace.hypotheses[0].text}")
    if json_path:
        trace.save(json_path)
        click.echo(f"trace: {json_path}")
    if html_path:
        from heedful.visualize.html import render_html

        Path(html_path).write_text(render_html(trace), encoding="utf-8")
        click.echo(f"viewer: {html_path}")
