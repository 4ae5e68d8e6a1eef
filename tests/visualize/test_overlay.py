"""visualize/overlay.py: each attention weight lands on its own region of the picture (a planted
one-hot lights exactly that region, for grids that do not divide the image), the smooth map is
torch's bilinear upsampling, and the Show, Attend and Tell figure has one panel per word."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch
from PIL import Image

from heedful.visualize.overlay import DIM, attention_to_pixels, draw_overlay, overlay_figure

# (gh, gw, H, W): divisible, not divisible, a 7 × 7 grid on an odd picture, more regions than
# pixels along one side (some regions then hold no pixel at all)
SHAPES = [(2, 2, 8, 8), (3, 3, 10, 10), (3, 5, 7, 11), (7, 7, 50, 37), (1, 4, 5, 9), (4, 2, 3, 6)]


def region_mask(i: int, j: int, gh: int, gw: int, height: int, width: int) -> np.ndarray:
    """Pixels (r, c) with i·H/gh ≤ r < (i+1)·H/gh and j·W/gw ≤ c < (j+1)·W/gw, in exact
    rational arithmetic: the module docstring's definition, computed independently."""
    rows = [Fraction(i * height, gh) <= r < Fraction((i + 1) * height, gh) for r in range(height)]
    cols = [Fraction(j * width, gw) <= c < Fraction((j + 1) * width, gw) for c in range(width)]
    return np.outer(rows, cols)


@pytest.mark.parametrize(("gh", "gw", "height", "width"), SHAPES)
def test_a_planted_one_hot_lights_exactly_its_region(gh, gw, height, width):
    covered = np.zeros((height, width), dtype=int)
    for s in range(gh * gw):
        i, j = divmod(s, gw)  # row-major flattening: s = i·gw + j
        attention = np.zeros(gh * gw)
        attention[s] = 1.0
        got = attention_to_pixels(attention.reshape(gh, gw), height, width)
        expected = region_mask(i, j, gh, gw, height, width)
        assert got.dtype == np.float64 and got.shape == (height, width)
        np.testing.assert_array_equal(got, expected.astype(np.float64), err_msg=f"region {s}")
        covered += expected
    assert (covered == 1).all()  # the regions tile the picture: every pixel in exactly one


@pytest.mark.parametrize(("gh", "gw", "height", "width"), SHAPES)
def test_every_pixel_takes_its_regions_weight(gh, gw, height, width):
    grid = np.random.default_rng(gh * 100 + gw).random((gh, gw))
    got = attention_to_pixels(grid, height, width)
    expected = sum(
        grid[i, j] * region_mask(i, j, gh, gw, height, width) for i in range(gh) for j in range(gw)
    )
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(("gh", "gw", "height", "width"), SHAPES)
def test_the_smooth_map_is_bilinear_upsampling(gh, gw, height, width):
    grid = np.random.default_rng(7).random((gh, gw))
    got = attention_to_pixels(grid, height, width, smooth=True)
    reference = torch.nn.functional.interpolate(
        torch.from_numpy(grid)[None, None], size=(height, width), mode="bilinear",
        align_corners=False,
    )[0, 0].numpy()  # fmt: skip
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-12)
    assert np.allclose(attention_to_pixels(np.full((gh, gw), 0.25), height, width, True), 0.25)


def test_bad_grids_are_named():
    with pytest.raises(ValueError, match=r"a \(gh, gw\) grid, got shape \(4,\)"):
        attention_to_pixels(np.ones(4), 5, 5)
    with pytest.raises(ValueError, match="must have pixels"):
        attention_to_pixels(np.ones((2, 2)), 0, 5)


def picture(height: int = 30, width: int = 45) -> np.ndarray:
    return np.random.default_rng(1).integers(0, 256, (height, width, 3), dtype=np.uint8)


def softmaxed(steps: int, gh: int, gw: int) -> np.ndarray:
    scores = np.random.default_rng(2).normal(size=(steps, gh * gw))
    weights = np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)
    return weights.reshape(steps, gh, gw)


@pytest.mark.parametrize("steps", [1, 4, 13])
def test_one_panel_per_word_titled_with_it(steps):
    words = [f"w{t}" for t in range(steps)]
    fig = overlay_figure(picture(), softmaxed(steps, 3, 4), words, title="a caption")
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_images()]
    assert [ax.get_title() for ax in panels] == words
    assert all(len(ax.get_images()) == 2 for ax in panels)  # the picture, then the shade
    picture_layer, shade_layer = panels[0].get_images()
    assert picture_layer.get_array().shape == (30, 45, 3)
    shade = np.asarray(shade_layer.get_array())  # RGBA
    heat = attention_to_pixels(softmaxed(steps, 3, 4)[0], 30, 45, smooth=True)
    assert shade.shape == (30, 45, 4) and not shade[..., :3].any()  # black: no colour laid on
    np.testing.assert_allclose(shade[..., 3], DIM * (1 - heat / heat.max()), atol=1e-12)
    assert shade[..., 3].min() == 0  # the peak is left as it is
    (bar,) = [ax for ax in fig.axes if "peak" in ax.get_ylabel()]  # the colour bar, labelled
    assert fig._suptitle.get_text() == "a caption"
    from heedful.visualize.figures import pyplot

    pyplot().close(fig)


def test_the_png_is_written_whole(tmp_path):
    path = tmp_path / "out" / "overlay.png"
    words = ["a", "red", "circle", "</s>"]
    assert draw_overlay(picture(), softmaxed(4, 7, 7), words, path) == path
    with Image.open(path) as png:
        assert png.format == "PNG" and png.width > png.height > 50
    assert [p.name for p in path.parent.iterdir()] == ["overlay.png"]  # no temporary left


@pytest.mark.parametrize(
    ("image", "attention", "words", "message"),
    [
        (picture(), softmaxed(2, 3, 3), ["one"], "2 attention grids but 1 words"),
        (picture(), softmaxed(2, 3, 3).reshape(2, 9), ["a", "b"], r"\(T, gh, gw\) array"),
        (picture(), np.zeros((0, 3, 3)), [], r"\(T, gh, gw\) array"),
        (picture().astype(np.float32), softmaxed(1, 2, 2), ["a"], "uint8"),
        (picture()[..., 0], softmaxed(1, 2, 2), ["a"], r"\(H, W, 3\) RGB pixels, got shape"),
        (picture(), np.where(np.arange(8).reshape(2, 2, 2) == 5, np.nan, 0.1), ["a", "b"],
         "non-finite weight \\(word 1: 'b'\\)"),
        (picture(), np.full((1, 2, 2), np.inf), ["a"], "non-finite"),
        (picture(), -softmaxed(1, 2, 2), ["a"], "cannot be negative"),
    ],
)  # fmt: skip
def test_bad_inputs_are_named_before_drawing(tmp_path, image, attention, words, message):
    with pytest.raises(ValueError, match=message):
        draw_overlay(image, attention, words, tmp_path / "x.png")
    assert not list(tmp_path.iterdir())


def test_an_unknown_picture_format_is_refused(tmp_path):
    with pytest.raises(ValueError, match="'.jpg' is not supported"):
        draw_overlay(picture(), softmaxed(1, 2, 2), ["a"], tmp_path / "x.jpg")
