"""The generated scenes (tasks/scenes.py): a function of the seed, and captions that say what
the pixels show."""

from __future__ import annotations

import numpy as np
import pytest

from heedful.tasks.scenes import (
    BACKGROUND,
    COLOURS,
    COUNTS,
    SIZES,
    SceneSet,
    scenes_task,
    shape_mask,
)


def test_scenes_are_a_function_of_the_seed():
    a, b = SceneSet(50, seed=3), SceneSet(50, seed=3)
    assert a.captions == b.captions
    assert all(np.array_equal(a.pixels(i), b.pixels(i)) for i in (0, 17, 49))
    assert np.array_equal(a.pixels(5), a.pixels(5))  # drawn again: the same
    other = SceneSet(50, seed=4)
    assert other.captions != a.captions
    train, test = scenes_task(50, 50, seed=3)
    assert train.captions == a.captions and test.captions != a.captions  # splits apart


def _nearest_colour(rgb: np.ndarray) -> str:
    names = list(COLOURS)
    distances = [np.abs(rgb - np.asarray(COLOURS[n])).sum() for n in names]
    return names[int(np.argmin(distances))]


def _parse(caption: str) -> list[tuple[str, str, str]]:
    """The (size, colour, kind) triples a caption names, one per shape."""
    words = caption.split()
    if words[0] in COUNTS.values():
        n = {v: k for k, v in COUNTS.items()}[words[0]]
        return [(words[1], words[2], words[3].removesuffix("s"))] * n
    if len(words) == 4:
        return [tuple(words[1:4])]
    relation = 5 if words[4] == "above" else 6  # "left of" is two words
    return [tuple(words[1:4]), tuple(words[relation + 1 : relation + 4])]


@pytest.mark.parametrize("seed", [1, 2])
def test_captions_say_what_the_pixels_show(seed):
    scenes = SceneSet(200, seed=seed)
    for i, scene in enumerate(scenes.scenes):
        pixels = scenes.pixels(i).astype(float)
        named = _parse(scene.caption)
        assert sorted(named) == sorted((s.size, s.colour, s.kind) for s in scene.shapes)
        covered = np.zeros(pixels.shape[:2], dtype=bool)
        for shape in scene.shapes:
            mask = shape_mask(shape, pixels.shape[0])
            assert not (mask & covered).any(), scene.caption  # shapes never overlap
            covered |= mask
            assert _nearest_colour(pixels[mask].mean(0)) == shape.colour, scene.caption
        assert abs(pixels[~covered].mean() - BACKGROUND) < 3  # the rest is background
        if " left of " in scene.caption:
            a, b = scene.shapes
            assert a.x < b.x and abs(a.y - b.y) <= 3  # the left one named first, one row
        if " above " in scene.caption:
            a, b = scene.shapes
            assert a.y < b.y and abs(a.x - b.x) <= 3


def test_sizes_and_kinds_are_far_apart():
    """A large shape covers about four times a small one's pixels, whatever its kind."""
    from heedful.tasks.scenes import Shape

    areas = {
        (kind, size): shape_mask(Shape(kind, "red", size, 24.0, 24.0), 48).sum()
        for kind in ("circle", "square", "triangle")
        for size in SIZES
    }
    for kind in ("circle", "square", "triangle"):
        assert 3.2 < areas[kind, "large"] / areas[kind, "small"] < 4.8


def _kind(caption: str) -> str:
    if " left of " in caption:
        return "left of"
    if " above " in caption:
        return "above"
    return "count" if caption.split()[0] in COUNTS.values() else "one"


def test_a_training_mixture_reweights_the_kinds_and_leaves_the_task_alone():
    """A mixture draws kinds in its proportions (a training set rich in relations); the
    held-out split is the task's whatever the mixture, and no mixture is the uniform task."""
    only_left = SceneSet(40, seed=3, mixture=(0.0, 1.0, 0.0, 0.0))
    assert {_kind(c) for c in only_left.captions} == {"left of"}
    relations = SceneSet(2000, seed=3, mixture=(0.15, 0.35, 0.35, 0.15)).captions
    share = sum(_kind(c) in ("left of", "above") for c in relations) / len(relations)
    assert 0.65 < share < 0.75  # 0.70 ± 5 standard deviations of 2,000 draws
    uniform_train, uniform_test = scenes_task(50, 50, seed=3)
    mixed_train, mixed_test = scenes_task(50, 50, seed=3, mixture=(0.1, 0.4, 0.4, 0.1))
    assert mixed_test.captions == uniform_test.captions
    assert mixed_train.captions != uniform_train.captions
    assert SceneSet(50, seed=3, mixture=None).captions == uniform_train.captions


@pytest.mark.parametrize(
    "mixture, message",
    [
        ((), "one probability"),
        ((0.5, 0.5), "one probability"),
        ((0.25,) * 5, "one probability"),
        ((0.5, 0.5, -0.5, 0.5), "one probability"),
        ((float("nan"), 0.5, 0.25, 0.25), "one probability"),
        ((float("inf"), 0.0, 0.0, 0.0), "one probability"),
        ((0.25, 0.25, 0.25, 0.2), "sum to 1"),
        ((1e300, 0.0, 0.0, 0.0), "sum to 1"),
        (("a", "b", "c", "d"), "one probability"),
    ],
)
def test_a_bad_mixture_is_refused_with_what_is_wrong(mixture, message):
    with pytest.raises(ValueError, match=f"scene mixture: .*{message}"):
        SceneSet(5, seed=1, mixture=mixture)
