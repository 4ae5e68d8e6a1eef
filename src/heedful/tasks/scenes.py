"""The built-in captioning task: generated scenes of coloured shapes and what they show.

No download, no Pillow: each scene is drawn with numpy on a dark canvas with a little noise,
and its caption says what is visible, by one of four templates:

    a large red circle                                  one shape
    a small blue square left of a large green triangle  two shapes side by side
    a small yellow circle above a small red square      two shapes one over the other
    three small green triangles                          two or three identical shapes

The caption is a function of the pixels: side-by-side shapes are on nearly one row and
stacked ones in nearly one column, the left (or upper) one always named first; two shapes that
differ in nothing are a count, never a relation. Sizes differ fourfold in area, and colours are
far apart, so a model can read every caption right (the demo's target is 95% exact match).

A scene is a function of (seed, split, index) alone, as the dates task is of its seed: the
layouts are drawn when a SceneSet is made (a few numbers each), the pixels only when asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

COLOURS = {
    "red": (220, 45, 40),
    "green": (40, 190, 60),
    "blue": (50, 90, 235),
    "yellow": (235, 215, 40),
}
SHAPES = ("circle", "square", "triangle")
SIZES = {"small": 4.5, "large": 9.0}  # radius in pixels: areas 1 : 4
COUNTS = {2: "two", 3: "three"}
BACKGROUND, NOISE, JITTER = 30, 8.0, 12  # grey level, noise σ, colour jitter (± per channel)
KINDS = ("one", "left of", "above", "count")
CANVAS = 48  # pixels per side


@dataclass(frozen=True)
class Shape:
    kind: str  # circle | square | triangle
    colour: str
    size: str  # small | large
    x: float  # centre, in pixels from the left
    y: float  # centre, in pixels from the top

    def words(self) -> str:
        return f"{self.size} {self.colour} {self.kind}"


@dataclass(frozen=True)
class Scene:
    shapes: tuple[Shape, ...]
    caption: str


def _describe(rng: np.random.Generator) -> tuple[str, str, str]:
    return (
        SHAPES[rng.integers(len(SHAPES))],
        list(COLOURS)[rng.integers(len(COLOURS))],
        list(SIZES)[rng.integers(len(SIZES))],
    )


def _place(rng, looks: list[tuple[str, str, str]], canvas: int, arrange: str) -> list[Shape]:
    """Centres for shapes of these looks, apart by a gap of 3 pixels or more: a pair in one
    row (`left of`: |dy| <= 3) or one column (`above`: |dx| <= 3), or anywhere (random
    centres, rejection-sampled; crowded scenes fall back to a quadrant each)."""
    if arrange != "anywhere":
        return _pair(rng, looks, canvas, axis=0 if arrange == "left of" else 1)
    radii = [SIZES[size] for _, _, size in looks]
    for _ in range(50):
        xy = [rng.uniform(r + 1, canvas - r - 1, size=2) for r in radii]
        apart = all(
            np.hypot(*(xy[a] - xy[b])) >= radii[a] + radii[b] + 3
            for a in range(len(xy))
            for b in range(a)
        )
        if apart:
            return [Shape(*look, float(x), float(y)) for look, (x, y) in zip(looks, xy)]
    return _in_quadrants(rng, looks, canvas)


def _pair(rng, looks, canvas: int, axis: int) -> list[Shape]:
    """Two shapes along `axis` (0: x, 1: y), the first before the second with a gap of at
    least 3 pixels, their other coordinates within 3 pixels of each other."""
    ra, rb = (SIZES[look[2]] for look in looks)
    a = rng.uniform(ra + 1, canvas - 2 * rb - ra - 4)  # room left for the gap and the second
    b = rng.uniform(a + ra + rb + 3, canvas - rb - 1)
    cross_a = rng.uniform(max(ra, rb) + 1, canvas - max(ra, rb) - 1)
    cross_b = cross_a + rng.uniform(-3, 3)
    cross_b = float(np.clip(cross_b, rb + 1, canvas - rb - 1))
    at = [(a, cross_a), (b, cross_b)] if axis == 0 else [(cross_a, a), (cross_b, b)]
    shapes = [Shape(*look, float(x), float(y)) for look, (x, y) in zip(looks, at)]
    return shapes if rng.integers(2) else shapes[::-1]  # either look may come first


def _in_quadrants(rng, looks, canvas: int) -> list[Shape]:
    """Up to four shapes, each inside a quadrant of its own (crowded scenes, such as three
    large shapes, that random centres seldom fit)."""
    half, shapes = canvas / 2, []
    for look, q in zip(looks, rng.permutation(4)):
        r = SIZES[look[2]]
        x0, y0 = (q % 2) * half, (q // 2) * half
        x, y = rng.uniform(r + 1, half - r - 1, size=2)
        shapes.append(Shape(*look, float(x0 + x), float(y0 + y)))
    return shapes


def make_scene(
    rng: np.random.Generator, canvas: int = CANVAS, mixture: tuple[float, ...] | None = None
) -> Scene:
    """A random layout of one of the four kinds, and its caption: each kind equally likely, or
    KINDS[k] with probability mixture[k] (a training mixture; the held-out task is uniform)."""
    if mixture is None:  # the task as defined: one draw of integers, as every scene set has had
        kind = KINDS[rng.integers(len(KINDS))]
    else:
        kind = KINDS[rng.choice(len(KINDS), p=mixture)]
    if kind == "one":
        [shape] = _place(rng, [_describe(rng)], canvas, "anywhere")
        return Scene((shape,), f"a {shape.words()}")
    if kind == "count":
        n = int(rng.integers(2, 4))
        look = _describe(rng)
        shapes = _place(rng, [look] * n, canvas, "anywhere")
        return Scene(tuple(shapes), f"{COUNTS[n]} {look[2]} {look[1]} {look[0]}s")
    first, second = _describe(rng), _describe(rng)
    while second == first:  # two identical shapes would be "two ...", not a relation
        second = _describe(rng)
    a, b = _place(rng, [first, second], canvas, kind)
    axis = (lambda s: s.x) if kind == "left of" else (lambda s: s.y)
    a, b = sorted((a, b), key=axis)  # the left (upper) one is named first
    return Scene((a, b), f"a {a.words()} {kind} a {b.words()}")


def shape_mask(shape: Shape, canvas: int) -> np.ndarray:
    """(canvas, canvas) bool: the pixels (by their centres) the shape covers."""
    y, x = np.mgrid[0:canvas, 0:canvas] + 0.5
    r, dx, dy = SIZES[shape.size], x - shape.x, y - shape.y
    if shape.kind == "circle":
        return dx**2 + dy**2 <= r**2
    if shape.kind == "square":  # side 1.7 r: about a circle's area
        return (np.abs(dx) <= 0.85 * r) & (np.abs(dy) <= 0.85 * r)
    # triangle, apex up: from y - r to y + r, as wide as 2.2 r at its base
    height = (dy + r) / (2 * r)  # 0 at the apex, 1 at the base
    return (height >= 0) & (height <= 1) & (np.abs(dx) <= 1.1 * r * height)


def draw_scene(scene: Scene, rng: np.random.Generator, canvas: int = CANVAS) -> np.ndarray:
    """(canvas, canvas, 3) uint8: the shapes on a grey background, colours jittered, noise."""
    image = np.full((canvas, canvas, 3), BACKGROUND, dtype=np.float64)
    for shape in scene.shapes:
        colour = np.asarray(COLOURS[shape.colour]) + rng.integers(-JITTER, JITTER + 1, size=3)
        image[shape_mask(shape, canvas)] = colour
    image += rng.normal(0.0, NOISE, size=image.shape)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


class SceneSet:
    """`count` scenes of one split, scene i a function of (seed, split, i): captions at once,
    pixels drawn when asked for (a few hundred microseconds each), so any size costs no memory.

    `mixture` (one probability per KINDS entry, summing to 1) reweights the kinds of a
    training set; None is the task itself, every kind equally likely.
    """

    def __init__(
        self,
        count: int,
        seed: int,
        split: int = 0,
        canvas: int = CANVAS,
        mixture: tuple[float, ...] | None = None,
    ):
        self.seed, self.split, self.canvas = seed, split, canvas
        self.mixture = _check_mixture(mixture)
        self.scenes = [make_scene(self._rng(i, 0), canvas, self.mixture) for i in range(count)]
        self.captions = [s.caption for s in self.scenes]

    def _rng(self, index: int, part: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.split, index, part])

    def __len__(self) -> int:
        return len(self.scenes)

    def pixels(self, index: int) -> np.ndarray:
        """(canvas, canvas, 3) uint8 of scene `index`, the same every time."""
        return draw_scene(self.scenes[index], self._rng(index, 1), self.canvas)


def _check_mixture(mixture) -> tuple[float, ...] | None:
    if mixture is None:
        return None
    try:
        weights = tuple(float(w) for w in mixture)
    except (TypeError, ValueError):
        weights = ()
    if len(weights) != len(KINDS) or not all(np.isfinite(w) and w >= 0 for w in weights):
        raise ValueError(
            f"scene mixture: one probability >= 0 for each of {KINDS}, got {mixture!r}"
        )
    if abs(sum(weights) - 1.0) > 1e-9:
        raise ValueError(f"scene mixture: the probabilities must sum to 1, got {sum(weights)}")
    return weights


def scenes_task(
    n_train: int,
    n_test: int,
    seed: int = 1,
    canvas: int = CANVAS,
    mixture: tuple[float, ...] | None = None,
):
    """Training and held-out scenes, drawn from different streams of the seed; `mixture`
    reweights the training scenes' kinds only (the held-out ones are the task: uniform)."""
    return SceneSet(n_train, seed, 0, canvas, mixture), SceneSet(n_test, seed, 1, canvas)
