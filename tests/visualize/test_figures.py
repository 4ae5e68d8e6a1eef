"""Pictures as files: the three formats, in any case, and a clear refusal of any other."""

import re
from pathlib import Path

import pytest

from heedful.visualize.figures import IMAGE_FORMATS, image_path


def test_image_formats_in_any_case():
    assert IMAGE_FORMATS == (".png", ".svg", ".pdf")
    for name in ("a.png", "b/a.SVG", "a.Pdf"):
        assert image_path(name) == Path(name)


@pytest.mark.parametrize(
    "name, suffix", [("a.jpg", "'.jpg'"), ("a", "'(none)'"), ("a.png.txt", "'.txt'")]
)
def test_other_formats_are_refused_by_name(name, suffix):
    message = f"cannot write a.*: image format {re.escape(suffix)} is not supported; use .png, "
    with pytest.raises(ValueError, match=message + ".svg, .pdf"):
        image_path(name)


def _drawn(text: str, **rc):
    """The pixels of `text` drawn large in a small figure, with matplotlib set as pyplot()
    sets it, then `rc` on top."""
    import warnings

    import matplotlib
    import numpy as np

    from heedful.visualize.figures import pyplot

    plt = pyplot()
    with matplotlib.rc_context(rc), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # matplotlib's "Glyph ... missing"
        fig = plt.figure(figsize=(1, 1), dpi=50)
        fig.text(0.1, 0.2, text, fontsize=30)
        fig.canvas.draw()
        pixels = np.asarray(fig.canvas.buffer_rgba()).copy()
    plt.close(fig)
    return pixels


NO_GLYPH = "\U000f0000"  # a private-use character no font draws: the "missing glyph" box


def test_chinese_labels_draw_glyphs_not_boxes():
    """pyplot() appends the installed CJK fonts to font.family, so 猫 and 犬 are drawn, not
    as the same "missing glyph" box; with the default family alone (the control) they are."""
    import shutil
    import subprocess

    import numpy as np

    fc_list = shutil.which("fc-list")  # fontconfig, asked apart from the code under test
    chinese = fc_list and subprocess.run([fc_list, ":lang=zh"], capture_output=True).stdout
    # like Chromium for the browser tests, a CJK font is a system prerequisite (README): the
    # test fails without one rather than pass without checking anything
    assert chinese, "no CJK font installed: apt-get install fonts-wqy-zenhei (or fonts-noto-cjk)"
    # Two different characters drawn alike are two "missing glyph" boxes.
    assert not np.array_equal(_drawn("猫"), _drawn("犬"))
    default = {"font.family": ["DejaVu Sans"]}  # the control: without the fallback, boxes
    assert np.array_equal(_drawn("猫", **default), _drawn("犬", **default))


def test_a_character_no_font_draws_gets_one_warning_naming_the_fix(tmp_path):
    import numpy as np

    from heedful.visualize.heatmap import plot_alignment

    tokens = ["a", NO_GLYPH, NO_GLYPH + "b"]
    with pytest.warns(UserWarning, match="no installed font can draw") as caught:
        plot_alignment(np.full((1, 3), 1 / 3), tokens, ["x"], tmp_path / "a.png")
    ours = [w for w in caught if "fonts-noto-cjk" in str(w.message)]
    assert len(ours) == 1
    assert not [w for w in caught if str(w.message).startswith("Glyph ")]  # matplotlib's own


def test_a_one_weight_cjk_font_draws_without_a_log_line(caplog):
    """WenQuanYi Zen Hei has weight 500 only: matplotlib's "Failed to find font weight" line
    would follow every picture; it is dropped, and other font messages are not."""
    import logging

    from heedful.visualize.figures import pyplot

    pyplot()
    logger = logging.getLogger("matplotlib.font_manager")
    with caplog.at_level(logging.WARNING, logger="matplotlib.font_manager"):
        logger.warning("findfont: Failed to find font weight normal for X, now using 500.")
        logger.warning("findfont: Font family 'Nowhere' not found.")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["findfont: Font family 'Nowhere' not found."]
