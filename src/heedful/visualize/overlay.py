"""Attention over an image, drawn as Xu et al. 2015 (Show, Attend and Tell, fig. 2-3) lay it
out: one panel per generated word, the word above, the picture darkened wherever that word's
attention falls short of its peak. Xu et al. whiten the attended regions and jet heatmaps are
common; both repaint the scene, and a caption that names colours ("a red circle") is then
checked against colours the overlay changed. Dimming leaves the attended pixels as they are.

Regions and pixels: an encoder's gh × gw grid of regions, flattened row-major (region s = i·gw + j),
covers the picture evenly: region (i, j) is rows [i·H/gh, (i+1)·H/gh) and columns
[j·W/gw, (j+1)·W/gw). Pixel row r (the band [r, r+1)) belongs to the region i = ⌊r·gh / H⌋, the one
whose band holds its top edge, so the blocks tile the image even where H/gh is not whole.
`attention_to_pixels` maps a (gh, gw) attention to an (H, W) map that way ("nearest": each pixel
gets its region's weight, exactly), or smoothly ("bilinear", sampling at pixel centres with
edges clamped, as torch's interpolate with align_corners=False does), which is what the
picture shows: the blocks of a 7 × 7 grid would hide the image.
"""

from __future__ import annotations

import math
import os
import secrets
from pathlib import Path

import numpy as np

from heedful.visualize.figures import image_path, pyplot, save

DIM = 0.75  # how dark a pixel of weight 0 is; a pixel at its panel's peak is left as it is
PANEL_INCHES = 2.0
MAX_COLUMNS = 6


def _resampling(n_out: int, n_in: int, smooth: bool) -> np.ndarray:
    """(n_out, n_in) float64 matrix R with out = R @ in along one axis.

    nearest: R[r, ⌊r·n_in / n_out⌋] = 1. bilinear: output pixel r samples the input at
    (r + ½)·n_in / n_out − ½ (pixel centres), between its two neighbours, clamped at the edges.
    """
    rows = np.arange(n_out)
    matrix = np.zeros((n_out, n_in), dtype=np.float64)
    if not smooth:
        matrix[rows, rows * n_in // n_out] = 1.0  # integer arithmetic: exact at every size
        return matrix
    where = np.clip((rows + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
    low = np.floor(where).astype(np.int64)
    high = np.minimum(low + 1, n_in - 1)
    frac = where - low
    np.add.at(matrix, (rows, low), 1.0 - frac)
    np.add.at(matrix, (rows, high), frac)
    return matrix


def attention_to_pixels(
    attention: np.ndarray, height: int, width: int, smooth: bool = False
) -> np.ndarray:
    """(gh, gw) attention over a grid of regions -> (height, width) float64 per-pixel map.

    smooth=False: each pixel holds its region's weight (the module docstring's regions);
    smooth=True: bilinear upsampling, for pictures. Either is Ry @ A @ Rxᵀ with one
    resampling matrix per axis.
    """
    grid = np.asarray(attention, dtype=np.float64)
    if grid.ndim != 2 or 0 in grid.shape:
        raise ValueError(f"attention must be a (gh, gw) grid, got shape {grid.shape}")
    if height < 1 or width < 1:
        raise ValueError(f"the image must have pixels, got {height} × {width}")
    gh, gw = grid.shape
    return _resampling(height, gh, smooth) @ grid @ _resampling(width, gw, smooth).T  # (H, W)


def _check(image: np.ndarray, attention: np.ndarray, words: list[str]) -> None:
    """Named errors for inputs that would draw a wrong picture rather than fail."""
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8:
        kind = image.dtype if isinstance(image, np.ndarray) else type(image).__name__
        raise ValueError(f"image must be a uint8 array of (H, W, 3) RGB pixels, got {kind}")
    if image.ndim != 3 or image.shape[2] != 3 or 0 in image.shape:
        raise ValueError(f"image must be (H, W, 3) RGB pixels, got shape {image.shape}")
    if not isinstance(attention, np.ndarray) or attention.ndim != 3 or 0 in attention.shape:
        shape = getattr(attention, "shape", type(attention).__name__)
        raise ValueError(f"attention must be a (T, gh, gw) array, one grid per word, got {shape}")
    if attention.shape[0] != len(words):
        raise ValueError(f"{attention.shape[0]} attention grids but {len(words)} words")
    if not np.isfinite(attention).all():
        step = int(np.argwhere(~np.isfinite(attention))[0][0])
        raise ValueError(f"attention holds a non-finite weight (word {step}: {words[step]!r})")
    if (attention < 0).any():
        raise ValueError(f"attention weights cannot be negative (minimum {attention.min()})")


def _shade_layer(heat: np.ndarray) -> np.ndarray:
    """(H, W) weights -> (H, W, 4) RGBA: black, as opaque as the weight falls short of the
    panel's peak (DIM · (1 − w / peak)), so the picture shows unchanged where the word looks.
    Each panel is scaled to its own peak: a word's weights sum to 1 over more or fewer regions,
    and a panel answers where the model looks, not how sharply (the weights are in the trace)."""
    peak = heat.max()
    scaled = heat / peak if peak > 0 else np.ones_like(heat)  # no weight anywhere: no shade
    rgba = np.zeros((*heat.shape, 4), dtype=np.float64)
    rgba[..., 3] = DIM * (1.0 - scaled)
    return rgba


def _scale_bar(fig, axes) -> None:
    """The colour bar of the shading: from black (weight 0) to the picture itself (the peak)."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import LinearSegmentedColormap, Normalize

    shade = LinearSegmentedColormap.from_list("dim", [(1 - DIM,) * 3, (1.0, 1.0, 1.0)])
    bar = fig.colorbar(
        ScalarMappable(Normalize(0, 1), shade), ax=axes, shrink=0.8, fraction=0.04, pad=0.02
    )
    bar.set_label("weight ÷ the word's peak\n(dark: not looked at)", fontsize=8)
    bar.ax.tick_params(labelsize=7)


def overlay_figure(
    image: np.ndarray, attention: np.ndarray, words: list[str], title: str | None = None
):
    """The matplotlib figure draw_overlay saves: one visible panel per word, in order."""
    _check(image, attention, words)
    plt = pyplot()
    height, width = image.shape[:2]
    columns = min(len(words), MAX_COLUMNS)
    rows = math.ceil(len(words) / columns)
    aspect = height / width
    fig, axes = plt.subplots(
        rows,
        columns,
        squeeze=False,
        figsize=(PANEL_INCHES * columns, PANEL_INCHES * aspect * rows + 0.4 * rows),
    )
    for ax in axes.flat[len(words) :]:
        ax.set_visible(False)
    for ax, word, grid in zip(axes.flat, words, attention):
        ax.imshow(image)
        ax.imshow(_shade_layer(attention_to_pixels(grid, height, width, smooth=True)))
        ax.set_title(word.replace(" ", "␣") or "∅", fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    _scale_bar(fig, [ax for ax in axes.flat if ax.get_visible()])
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def draw_overlay(
    image: np.ndarray,
    attention: np.ndarray,
    words: list[str],
    path: Path,
    title: str | None = None,
) -> Path:
    """Write the Show, Attend and Tell figure of one caption.

    image: (H, W, 3) uint8 RGB (heedful.data.images.image_pixels); attention: (T, gh, gw),
    word t's weights over the grid of regions; words: the T generated words; path: .png (or
    .svg, .pdf), written whole or not at all. Wrong shapes, non-finite or negative weights
    are ValueErrors before anything is drawn.
    """
    path = image_path(path)
    fig = overlay_figure(image, np.asarray(attention), list(words), title)
    # drawn beside `path`, then renamed over it: a reader never sees half a picture
    partial = path.with_name(f".{path.stem}.{secrets.token_hex(4)}.tmp{path.suffix}")
    try:
        save(fig, partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path
