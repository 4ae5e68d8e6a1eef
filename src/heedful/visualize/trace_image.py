"""Traces of image models: the caption, its attention over the grid of regions, and the picture.

An image trace is a trace of docs/trace-schema.md whose S "source tokens" are the regions of the
encoder's gh × gw grid, named by row and column ("r1c1" … row-major, region s = i·gw + j), so
every view of the viewer (the alignment matrix, the replay's bars) reads it as it reads text.
What only a picture has is in the trace's `image`:

- `data_uri`: the picture as the model saw it, the centre square load_image keeps (data/images.py),
  at most DISPLAY_SIDE pixels wide, as a PNG data URI (at most MAX_IMAGE_URI_CHARS characters);
- `grid`: [gh, gw], with gh · gw = S;
- `rollout`: for a ViT encoder, attention rollout over the patches (visualize/rollout.py), [S][S];
  null for a CNN or a backbone, which have no self-attention.

The ViT's own self-attention is the trace's encoder_self_attention, as for a text Transformer.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np

from heedful.config.search import SearchSettings
from heedful.visualize.internals import rounded
from heedful.visualize.rollout import attention_rollout
from heedful.visualize.trace import DECIMALS, Trace, model_info, replayed
from heedful.visualize.trace_check import MAX_IMAGE_URI_CHARS
from heedful.visualize.trace_size import TOP_K

DISPLAY_SIDE = 256  # pixels: sharp in the viewer, and a photo's PNG stays well under the limit


def region_labels(grid: tuple[int, int]) -> list[str]:
    """The S = gh·gw regions' names, row-major, numbered from 1 as a reader counts."""
    return [f"r{i + 1}c{j + 1}" for i in range(grid[0]) for j in range(grid[1])]


def seen_pixels(source, side: int = DISPLAY_SIDE, name: str | None = None) -> np.ndarray:
    """(m, m, 3) uint8: the centre square of the picture, which is what the model's centre
    crop keeps (data/images.py: shorter side resized, centre cut), shrunk to `side` pixels
    when larger. A file, its bytes, or (H, W, 3) uint8 RGB pixels."""
    from PIL import Image

    from heedful.data.images import image_pixels

    pixels = source if isinstance(source, np.ndarray) else image_pixels(source, name)
    height, width = pixels.shape[:2]
    m = min(height, width)
    top, left = (height - m) // 2, (width - m) // 2
    square = np.ascontiguousarray(pixels[top : top + m, left : left + m])
    if m <= side:
        return square
    shrunk = Image.fromarray(square).resize((side, side), Image.Resampling.BICUBIC)
    return np.asarray(shrunk, dtype=np.uint8).copy()


def png_data_uri(pixels: np.ndarray) -> str:
    """(H, W, 3) uint8 -> "data:image/png;base64,…": the viewer needs no file beside the page."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG", optimize=True)
    uri = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
    if len(uri) > MAX_IMAGE_URI_CHARS:  # only a side far above DISPLAY_SIDE gets here
        raise ValueError(f"the picture's PNG is {len(uri):,} characters, over the trace's limit")
    return uri


def _source_name(source) -> str:
    if isinstance(source, (str, Path)):
        return Path(source).name
    return "image array" if isinstance(source, np.ndarray) else "image bytes"


def build_image_trace(
    captioner,
    source,
    num_beams: int = 1,
    n_best: int = 1,
    top_k: int | None = None,
    length_penalty: float | None = None,
    settings: SearchSettings | None = None,
) -> Trace:
    """Caption one image (a file, its bytes or (H, W, 3) uint8 pixels) and record, for each of
    the n_best captions, every attention weight over the regions, the picture and, for a ViT,
    its attention rollout. captioner: a heedful.inference.captioner.Captioner. settings: a
    SearchSettings in place of num_beams, n_best and length_penalty. A bad image is an
    ImageError naming it, before anything is searched."""
    import torch

    top_k = TOP_K if top_k is None else top_k
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    searcher = captioner.searcher  # the Translator that searches and replays on images
    if settings is None:
        settings = searcher.generation.but(
            num_beams=num_beams, n_best=n_best, length_penalty=length_penalty
        )
    images = captioner.images([source])  # (1, 3, size, size)
    pixels = seen_pixels(source)
    [hyps] = searcher.search(images, settings=settings)
    with torch.no_grad():
        traced = [replayed(searcher, images, h, top_k, False, i == 0) for i, h in enumerate(hyps)]
    encoder = traced[0][1]  # (L, H, S, S) of a ViT, else None
    grid = captioner.grid()
    model = {**model_info(captioner.config), "encoder": captioner.config.encoder}
    rollout = None
    if encoder is not None:
        model["encoder_layers"] = encoder.size(0)  # the ViT's layers, whatever the config says
        rollout = np.round(attention_rollout(encoder.double().cpu().numpy()), DECIMALS).tolist()
    return Trace(
        model=model,
        source=_source_name(source),
        source_tokens=region_labels(grid),
        search=settings.record(),
        encoder_self_attention=rounded(encoder),
        hypotheses=[h for h, _, _ in traced],
        image={"data_uri": png_data_uri(pixels), "grid": list(grid), "rollout": rollout},
    )
