"""The positional-encoding picture: bigger for more positions and dimensions; clear refusals."""

import pytest

from heedful.visualize.positional import plot_positional


def test_positional_encoding_picture(tmp_path, png_size):
    small = png_size(plot_positional(16, 10, tmp_path / "pe-small.png"))
    big = png_size(plot_positional(128, 100, tmp_path / "pe-big.png"))
    assert big[0] > small[0] and big[1] > small[1]
    assert b"<svg" in plot_positional(32, 20, tmp_path / "pe.svg").read_bytes()[:400]
    with pytest.raises(ValueError, match="'.gif' is not supported"):
        plot_positional(16, 10, tmp_path / "pe.gif")
    with pytest.raises(ValueError, match="length >= 1"):
        plot_positional(16, 0, tmp_path / "pe.png")
