"""Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", §3):
how much each patch at the top of a ViT encoder draws, through every layer, from each input
patch.

One layer's weights say where a position looks among the previous layer's outputs, which are
already mixtures. Rollout follows the mixing down: per layer, Â_l = ½ · mean_heads(A_l) + ½ · I
(the residual connection carries half of each position through unchanged), rows renormalised;
then R = Â_L · … · Â_2 · Â_1. Each Â_l is row-stochastic, so R is too: row i of R is a
distribution over the input patches.

Shapes: L layers, H heads, S patches.
"""

from __future__ import annotations

import numpy as np


def attention_rollout(attention) -> np.ndarray:
    """(L, H, S, S) self-attention weights (rows: queries) -> (S, S) float64 rollout R.

    R[i, j]: how much patch i after the last layer draws from input patch j. A wrong shape, a
    negative or non-finite weight is a ValueError before any product.
    """
    weights = np.asarray(attention, dtype=np.float64)
    if weights.ndim != 4 or weights.shape[2] != weights.shape[3] or 0 in weights.shape:
        raise ValueError(f"rollout needs (L, H, S, S) self-attention, got shape {weights.shape}")
    if not np.isfinite(weights).all() or (weights < 0).any():
        raise ValueError("rollout needs finite, non-negative attention weights")
    identity = np.eye(weights.shape[2])
    rollout = identity
    for layer in weights:  # bottom layer first: R_l = Â_l · R_{l−1}
        mixed = 0.5 * layer.mean(axis=0) + 0.5 * identity  # (S, S) Â_l before renormalising
        mixed /= mixed.sum(axis=-1, keepdims=True)  # rows of a softmax sum to 1 already, near
        rollout = mixed @ rollout
    return rollout
