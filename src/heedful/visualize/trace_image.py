"""What only a picture has in a trace (trace.py's build_trace, for an image model).

An image trace is a trace of docs/trace-schema.md whose S "source tokens" are the regions of the
encoder's gh × gw grid, named by row and column ("r1c1" … row-major, region s = i·gw + j,
data/sources.py's ImageSource.labels), so every view of the viewer (the alignment matrix, the
replay's bars) reads it as it reads text. What only a picture has is in the trace's `image`:

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

import numpy as np

from heedful.visualize.internals import DECIMALS
from heedful.visualize.rollout import attention_rollout
from heedful.visualize.trace_check import MAX_IMAGE_URI_CHARS

DISPLAY_SIDE = 256  # pixels: sharp in the viewer, and a photo's PNG stays well under the limit


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


def add_picture(trace, item, config, grid: tuple[int, int], encoder) -> None:
    """Complete an image model's `trace` (a Trace of the picture `item`: a file, its bytes or
    (H, W, 3) uint8 pixels): model.encoder, which encoder read it; `image`, the picture as the
    model saw it, the grid and, from `encoder` (its self-attention (L, H, S, S), or None), the
    rollout."""
    rollout = None
    trace.model["encoder"] = config.encoder.kind
    if encoder is not None:
        trace.model["encoder_layers"] = encoder.size(0)  # the ViT's layers, whatever the config
        rollout = np.round(attention_rollout(encoder.double().cpu().numpy()), DECIMALS).tolist()
    pixels = seen_pixels(item)
    trace.image = {"data_uri": png_data_uri(pixels), "grid": list(grid), "rollout": rollout}
