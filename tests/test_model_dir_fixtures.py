"""Model directories written by an earlier heedful still load and compute what they computed.

tests/fixtures/make_model_dirs.py wrote one tiny model directory per architecture (Transformer
post- and pre-norm, learned positions, tied embeddings, copy, multilingual; GRU and LSTM with
each RNN attention, input feeding, local windows, none, copy; ViT and CNN image models) and the
teacher-forced log-probabilities of a fixed target under each. Code that moves the models
(issue 27) must keep every one: the directories are never rewritten by a test, and the numbers
are compared in float64 within 1e-4 (kernels differ between CPUs in the last bits).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
sys.path.insert(0, str(FIXTURES))

import make_model_dirs  # noqa: E402

EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))


def test_every_architecture_has_a_fixture():
    names = {**make_model_dirs.TEXT_MODELS, **make_model_dirs.IMAGE_MODELS}
    assert sorted(EXPECTED) == sorted(names)
    assert sorted(p.name for p in make_model_dirs.OUT.iterdir()) == sorted(names)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_an_earlier_model_directory_computes_what_it_did(name):
    expected = np.asarray(EXPECTED[name], dtype=np.float64)  # (T, V)
    got = np.asarray(make_model_dirs.scored(make_model_dirs.OUT / name), dtype=np.float64)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)
