"""Static attention pictures: a labelled alignment heatmap (source × target)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np


def _label(token: str) -> str:
    """Make whitespace visible: a space would be an empty tick label."""
    return token.replace(" ", "␣")


def plot_alignment(
    weights,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    path: str | Path,
    title: str = "",
) -> Path:
    """Save a heatmap of `weights` (target × source, rows = output tokens) to `path` (PNG/SVG/PDF).

    Each row is one output token's attention distribution over the source tokens.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    weights = np.asarray(weights, dtype=float)
    if weights.shape != (len(target_tokens), len(source_tokens)):
        raise ValueError(
            f"weights of shape {weights.shape} do not match {len(target_tokens)} target × "
            f"{len(source_tokens)} source tokens"
        )
    width = min(2.0 + 0.28 * len(source_tokens), 40)
    height = min(1.5 + 0.28 * len(target_tokens), 40)
    fig, ax = plt.subplots(figsize=(width, height), dpi=100)
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    short = all(len(t) <= 1 for t in source_tokens)  # characters read best upright
    ax.set_xticks(
        range(len(source_tokens)), [_label(t) for t in source_tokens], rotation=0 if short else 90
    )
    ax.set_yticks(range(len(target_tokens)), [_label(t) for t in target_tokens])
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    if title:
        ax.set_title(title)
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, label="attention weight")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
