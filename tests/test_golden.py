"""The outputs users see stay what they were: HTTP answers, saved traces and the viewer page.

tests/golden/make.py wrote tests/golden/expected/ from two tiny committed models (a
Transformer and a GRU with Bahdanau attention, trained to reverse letters: every choice they
make leads the next by more than 0.1 nats, so no CPU's rounding can flip one). Here the same
outputs are made again and compared as text, with each decimal number compared within 1e-3
(kernels differ between CPUs in the last bits; the trace rounds to 5 decimals).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"
sys.path.insert(0, str(GOLDEN))

import make  # noqa: E402

NUMBER = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?")
EXPECTED = sorted((GOLDEN / "expected").iterdir())


def numbers_apart(expected: str, actual: str) -> tuple[str, str, list[tuple[float, float]]]:
    """The two texts with decimal numbers blanked out, and the numbers side by side."""
    a, b = NUMBER.findall(expected), NUMBER.findall(actual)
    pairs = [(float(x), float(y)) for x, y in zip(a, b)] if len(a) == len(b) else []
    return NUMBER.sub("#", expected), NUMBER.sub("#", actual), pairs


@pytest.fixture(scope="module")
def outputs() -> dict[str, str]:
    return make.outputs()


def test_every_output_has_a_golden_file(outputs):
    assert sorted(outputs) == [p.name for p in EXPECTED]


@pytest.mark.parametrize("path", EXPECTED, ids=lambda p: p.name)
def test_output_is_unchanged(outputs, path):
    expected_text, actual_text, pairs = numbers_apart(
        path.read_text(encoding="utf-8"), outputs[path.name]
    )
    assert actual_text == expected_text
    worst = max((abs(x - y) for x, y in pairs), default=0.0)
    assert worst <= 1e-3, f"{path.name}: a number moved by {worst}"


def test_the_comparison_can_fail():
    """A changed word or a number moved past the tolerance is seen."""
    a, b, _ = numbers_apart('{"text":"abc","p":0.5}', '{"text":"abd","p":0.5}')
    assert a != b
    _, _, pairs = numbers_apart('{"p":0.5}', '{"p":0.502}')
    assert max(abs(x - y) for x, y in pairs) > 1e-3
