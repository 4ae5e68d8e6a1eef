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
