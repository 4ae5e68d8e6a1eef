"""Pictures as files: the image formats we write, matplotlib without a display and with fonts
for every script, one way to save, and token labels as the model saw them.

matplotlib is imported inside pyplot() (it is an optional, slow import); the format is the
path's suffix: .png, .svg or .pdf.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

IMAGE_FORMATS = (".png", ".svg", ".pdf")
DPI = 120  # 7-point labels come out 12 pixels tall
# Fonts tried, in order, for a glyph the default font (DejaVu Sans: Latin, Greek, Cyrillic)
# lacks; matplotlib >= 3.6 falls back glyph by glyph through the families of `font.family`.
# Without them Chinese or Japanese labels draw as empty boxes.
FALLBACK_FONTS = (
    "Noto Sans CJK SC",
    "Noto Sans CJK JP",
    "Source Han Sans SC",
    "Source Han Sans",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "Droid Sans Fallback",
    "AR PL UMing CN",
    "Microsoft YaHei",
    "SimHei",
    "PingFang SC",
    "Hiragino Sans GB",
)
MISSING_FONT_HINT = (
    "install a font that has them, e.g. `apt-get install fonts-noto-cjk` (Debian/Ubuntu) for "
    "Chinese, Japanese or Korean; heedful finds it the next time it draws"
)


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

    use_fallback_fonts()
    return plt


def use_fallback_fonts() -> list[str]:
    """Append the installed FALLBACK_FONTS to matplotlib's `font.family` (after the families
    already there, so a user's choice still comes first); returns the ones appended."""
    import matplotlib
    from matplotlib import font_manager

    known = _known_families()
    if not known.intersection(FALLBACK_FONTS):
        # matplotlib caches its font list once; a font installed since is not in it yet.
        cached = {f.fname for f in font_manager.fontManager.ttflist}
        for path in font_manager.findSystemFonts():
            if path not in cached:
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):
                    continue  # a font file FreeType cannot read: draw without it
        known = _known_families()
    family = list(matplotlib.rcParams["font.family"])
    found = [name for name in FALLBACK_FONTS if name in known and name not in family]
    matplotlib.rcParams["font.family"] = family + found
    _quiet_weight_substitution()
    return found


def _quiet_weight_substitution() -> None:
    """Some CJK fonts come in one weight only (WenQuanYi Zen Hei is 500, "medium"): matplotlib
    then logs "findfont: Failed to find font weight normal ..., now using 500" on every
    picture, though the text draws. Only that message is dropped."""
    logger = logging.getLogger("matplotlib.font_manager")
    if not any(isinstance(f, _WeightSubstitution) for f in logger.filters):
        logger.addFilter(_WeightSubstitution())


class _WeightSubstitution(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("findfont: Failed to find font weight")


def _known_families() -> set[str]:
    from matplotlib import font_manager

    return {f.name for f in font_manager.fontManager.ttflist}


def save(fig, path: Path) -> Path:
    """Write and close; the tight box takes in every label, however far out it reaches.

    A label with characters no installed font can draw comes out as boxes: one warning says
    which characters and how to fix it (matplotlib's own warns once per character).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(path, dpi=DPI, bbox_inches="tight", pad_inches=0.15)
    pyplot().close(fig)
    missing = []
    for w in caught:
        text = str(w.message)
        if text.startswith("Glyph ") and "missing from font" in text:
            missing.append(text.split("(", 1)[1].split(")", 1)[0])
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if missing:
        chars = ", ".join(dict.fromkeys(missing))
        warnings.warn(
            f"{path}: no installed font can draw {chars}, so they show as empty boxes; "
            + MISSING_FONT_HINT,
            UserWarning,
            stacklevel=2,
        )
    return path
