"""Pictures as files: the image formats we write, matplotlib without a display, one way to save.

matplotlib is imported inside pyplot() (it is an optional, slow import); the format is the
path's suffix: .png, .svg or .pdf.
"""

from __future__ import annotations

from pathlib import Path

IMAGE_FORMATS = (".png", ".svg", ".pdf")
DPI = 120  # 7-point labels come out 12 pixels tall


def image_path(path: str | Path) -> Path:
    """`path` as a Path; a suffix we cannot write is a ValueError before anything is drawn."""
    path = Path(path)
    if path.suffix.lower() not in IMAGE_FORMATS:
        suffix = path.suffix or "(none)"
        raise ValueError(
            f"cannot write {path}: image format {suffix!r} is not supported; "
            f"use {', '.join(IMAGE_FORMATS)}"
        )
    return path


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path) -> Path:
    """Write and close; the tight box takes in every label, however far out it reaches."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight", pad_inches=0.15)
    pyplot().close(fig)
    return path
