"""What `heedful attention MODEL image.png` does only for an image model: the Show, Attend and
Tell figure (--png: one panel per word), and the refusal of the options that mean nothing for a
picture. The caption, its trace (--json) and the viewer (--html) are see.py's, as for text."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

SMALL_SIDE = 256  # pixels: a smaller picture (a 48-pixel scene) is enlarged for the figure


def check_picture_options(image: str, kind: str, grid: bool, words: bool) -> None:
    """A usage error for what a picture has not: text's kinds, grids and words."""
    if kind != "cross":
        raise click.UsageError(
            "an image model's pictures show the caption's attention over the image "
            "(--kind cross); its ViT self-attention and rollout are in the --html viewer"
        )
    if grid or words:
        raise click.UsageError("--grid and --words are for text models")
    if not Path(image).is_file():
        raise click.BadParameter(f"{image!r} is not an image file", param_hint="'SENTENCE'")


def caption_overlay(
    translator, image, layer: int | None = None, head: int | None = None, num_beams: int = 1
):
    """(pixels (m, m, 3) uint8, attention (T, gh, gw), words, Translation) of `image`'s caption
    (the best of `num_beams`): what draw_overlay draws. layer and head from 1 (None: the last
    layer, heads averaged).

    The pixels are the square the model saw (trace_image.seen_pixels); a small one is enlarged
    by a whole factor, so each region stays exactly where it was."""
    from heedful.visualize.trace_check import check_index
    from heedful.visualize.trace_image import seen_pixels

    [caption] = translator.translate([image], num_beams, need_weights=True)
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


def draw_caption_overlay(translator, image, picture, layer, head, num_beams: int) -> None:
    """--png for an image model: one panel per word of the caption, its attention over the
    picture (visualize/overlay.py); the title starts with how the model was trained, where
    its directory says (checkpoint/status.py)."""
    from heedful.checkpoint.status import status_line
    from heedful.visualize.overlay import draw_overlay

    pixels, attention, words, caption = caption_overlay(translator, image, layer, head, num_beams)
    title = f"{caption.text!r}: attention over the image, word by word"
    if translator.training is not None:
        title = f"{status_line(translator.training)}\n{title}"
    draw_overlay(pixels, attention, words, Path(picture), title)
    click.echo(f"overlay: {picture} ({len(words)} panels)")
