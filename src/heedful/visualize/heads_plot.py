"""The layer × head picture of `heedful heads`: for each attention (encoder self-attention,
decoder self-attention, cross-attention), how much BLEU the translations lose when that one head
is masked (heads.importance; Michel et al. 2019, fig. 1 draws the same grid), the value written
in each cell. Red: the model needs the head; white: it does without; blue: it does better."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from heedful.visualize.figures import image_path, pyplot, save

TITLES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "cross-attention",
}


def plot_importance(importance, path: str | Path, title: str | None = None) -> Path:
    """Save one panel per attention kind: rows layers, columns heads, BLEU lost when masked."""
    path = image_path(path)
    lost = {kind: importance.bleu - grid for kind, grid in importance.masked_bleu.items()}
    peak = max(float(np.nanmax(np.abs(g))) for g in lost.values()) or 1.0  # one scale for all
    plt = pyplot()
    widths = [g.shape[1] for g in lost.values()]
    height = 1.6 + 0.5 * max(g.shape[0] for g in lost.values())
    fig, axes = plt.subplots(
        1,
        len(lost),
        squeeze=False,
        layout="constrained",
        width_ratios=widths,
        figsize=(1.2 + 0.75 * sum(widths), height),
    )
    for ax, (kind, grid) in zip(axes[0], lost.items()):
        image = ax.imshow(grid, cmap="RdBu_r", vmin=-peak, vmax=peak, aspect="auto")
        for (layer, head), value in np.ndenumerate(grid):
            if not np.isnan(value):
                colour = "white" if abs(value) > 0.6 * peak else "black"
                ax.text(head, layer, f"{value:.1f}", ha="center", va="center", color=colour)
        ax.set_xticks(range(grid.shape[1]), [str(h + 1) for h in range(grid.shape[1])])
        ax.set_yticks(range(grid.shape[0]), [str(l + 1) for l in range(grid.shape[0])])
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(TITLES.get(kind, kind), fontsize=10)
    fig.colorbar(image, ax=list(axes[0]), label="BLEU lost when the head alone is masked")
    fig.suptitle(
        title or f"unmasked: BLEU {importance.bleu:.2f}, loss {importance.loss:.4f} nats/token",
        fontsize=10,
    )
    return save(fig, path)
