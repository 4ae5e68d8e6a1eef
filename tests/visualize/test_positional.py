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


def test_the_dimension_axis_is_not_the_formulas_i(tmp_path, monkeypatch):
    """The formula's i indexes sin/cos pairs; the axis runs over every dimension j = 0..d-1."""
    import heedful.visualize.positional as positional

    drawn = {}
    save = positional.save
    monkeypatch.setattr(
        positional, "save", lambda fig, path: drawn.setdefault("fig", fig) and save(fig, path)
    )
    plot_positional(16, 10, tmp_path / "pe.png")
    ax = drawn["fig"].axes[0]
    assert "j = 0..15" in ax.get_xlabel() and "dimension i" not in ax.get_xlabel()
    assert "2i" in ax.get_title()
