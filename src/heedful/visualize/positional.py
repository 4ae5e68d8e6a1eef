"""The sinusoidal positional encoding as a picture (Vaswani et al. 2017, §3.5)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from heedful.visualize.figures import image_path, pyplot, save


def plot_positional(d_model: int, length: int, path: str | Path) -> Path:
    """Save the sinusoidal encoding PE (positions × dimensions) of Vaswani et al. 2017, §3.5.

    Low dimensions oscillate fast along the positions, high ones slowly: each pair (sin, cos) is
    one wavelength, from 2π up to 10000·2π.
    """
    from heedful.layers.positional import sinusoidal_encoding

    path = image_path(path)
    if d_model < 1 or length < 1:
        raise ValueError(f"need d_model >= 1 and length >= 1, got {d_model} and {length}")
    pe = sinusoidal_encoding(length, d_model).numpy()  # (length, d_model)
    plt = pyplot()
    width = float(np.clip(3 + d_model * 0.03, 5, 16))
    height = float(np.clip(2 + length * 0.05, 3.5, 12))
    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    image = ax.imshow(pe, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    # j, not the formula's i: dimension j = 2i holds a sine, j = 2i + 1 a cosine
    ax.set_xlabel(f"embedding dimension j = 0..{d_model - 1}  (j = 2i: sin, j = 2i+1: cos)")
    ax.set_ylabel("position pos")
    ax.set_title(
        f"sinusoidal positional encoding, d_model = {d_model}\n"
        "PE[pos, 2i] = sin(pos / 10000^(2i/d_model))\n"
        "PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model))",
        fontsize=10,
    )
    fig.colorbar(image, ax=ax, label="PE value", shrink=0.9)
    return save(fig, path)
