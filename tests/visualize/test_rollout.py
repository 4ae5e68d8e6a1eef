"""Attention rollout (Abnar & Zuidema 2020) against a float64 reference written out step by
step, and the invariants it must keep."""

from __future__ import annotations

import numpy as np
import pytest

from heedful.visualize.rollout import attention_rollout


def reference_rollout(attention: np.ndarray) -> np.ndarray:
    """The paper's recurrence element by element: Ã = ½ A + ½ I per head-mean, rows
    renormalised, R_1 = Ã_1 and R_l = Ã_l R_{l−1}, all in float64 loops."""
    layers, heads, s, _ = attention.shape
    rollout = None
    for l in range(layers):
        mixed = np.zeros((s, s))
        for i in range(s):
            for j in range(s):
                mean = sum(float(attention[l, h, i, j]) for h in range(heads)) / heads
                mixed[i, j] = 0.5 * mean + (0.5 if i == j else 0.0)
            mixed[i] /= mixed[i].sum()
        if rollout is None:
            rollout = mixed
        else:
            rollout = np.array(
                [[sum(mixed[i, k] * rollout[k, j] for k in range(s)) for j in range(s)]
                 for i in range(s)]
            )  # fmt: skip
    return rollout


def softmax_rows(rng, shape):
    scores = rng.normal(scale=2.0, size=shape)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)).astype(np.float32)  # what a model gives


@pytest.mark.parametrize("layers, heads, s", [(1, 1, 3), (2, 4, 5), (3, 2, 16)])
def test_rollout_matches_the_float64_recurrence(layers, heads, s):
    attention = softmax_rows(np.random.default_rng(layers * 10 + s), (layers, heads, s, s))
    rollout = attention_rollout(attention)
    assert rollout.dtype == np.float64 and rollout.shape == (s, s)
    np.testing.assert_allclose(rollout, reference_rollout(attention), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(rollout.sum(-1), 1.0, rtol=1e-12)  # rows stay distributions


def test_order_of_layers_matters_and_is_bottom_first():
    """R = Â_2 Â_1: with layer 1 sending everything to patch 0 and layer 2 to patch 1, patch
    1's output draws from patch 0 only through layer 1's mixing, which the order decides."""

    def to(j):  # (1, 3, 3): every query looks at patch j
        return np.eye(3)[[j, j, j]][None]

    attention = np.stack([to(0), to(1)])  # (L=2, H=1, 3, 3)
    a1 = (0.5 * to(0)[0] + 0.5 * np.eye(3)) / 1.0
    a2 = (0.5 * to(1)[0] + 0.5 * np.eye(3)) / 1.0
    np.testing.assert_allclose(attention_rollout(attention), a2 @ a1, rtol=1e-15)
    assert not np.allclose(a2 @ a1, a1 @ a2)  # so the test can tell the orders apart


def test_attention_to_itself_only_rolls_out_to_the_identity():
    eye = np.broadcast_to(np.eye(4), (3, 2, 4, 4))
    np.testing.assert_array_equal(attention_rollout(eye), np.eye(4))


@pytest.mark.parametrize(
    "attention, fragment",
    [
        (np.ones((2, 3, 3)), "(L, H, S, S)"),
        (np.ones((1, 1, 2, 3)), "(L, H, S, S)"),
        (np.full((1, 1, 2, 2), np.nan), "finite, non-negative"),
        (-np.ones((1, 1, 2, 2)), "finite, non-negative"),
    ],
)
def test_bad_attention_is_refused_by_name(attention, fragment):
    with pytest.raises(ValueError, match=None) as caught:
        attention_rollout(attention)
    assert fragment in str(caught.value)
