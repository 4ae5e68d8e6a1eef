"""The pointer-generator's copy (See et al. 2017, "Get To The Point", §2.2): attention used to
point at source words and copy them into the output.

At decoder step t, with attention a_t over the source, context c_t (See et al.'s h*_t),
decoder state h_t (their s_t) and decoder input x_t:

    p_gen = σ(w_hᵀ c_t + w_sᵀ h_t + w_xᵀ x_t + b_ptr)                       (eq. 8)
    P(w)  = p_gen · P_vocab(w) + (1 − p_gen) · Σ_{s: src_s = w} a_t(s)      (eq. 9)

Source ids are output ids here: the source and target share one vocabulary (data.joint_vocab),
and subword pieces leave no word out of it, so the paper's extended vocabulary for
out-of-vocabulary words is not needed.

Shapes: B batch, S source length, T target length, N hidden size, E embedding size,
V vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn


def copy_distribution(weights: torch.Tensor, src: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """weights (B, T, S) a_t, src (B, S) ids -> (B, T, V): Σ_s a_t(s) over the source positions
    holding each token (padding has weight 0, so it adds nothing)."""
    index = src.unsqueeze(1).expand(-1, weights.size(1), -1)  # (B, T, S)
    copy = weights.new_zeros(*weights.shape[:2], vocab_size)  # (B, T, V)
    return copy.scatter_add_(-1, index, weights)


def pointer_mixture(
    logits: torch.Tensor, p_gen: torch.Tensor, weights: torch.Tensor, src: torch.Tensor
) -> torch.Tensor:
    """See et al. 2017, eq. 9: logits (B, T, V) of P_vocab, p_gen (B, T, 1) in (0, 1), weights
    (B, T, S) a_t, src (B, S) -> log P(w) (B, T, V).

    Computed in float32 at least (bf16 autocast rounds a probability of 1e-3 by 0.4%), and
    floored at the dtype's smallest normal number so that log never sees 0, whose gradient
    would be infinite. The result is a log-distribution: its log_softmax is itself, so the
    training loss and search read it as they read logits (luong-local-p's weights sum to 1 or
    less, and that log_softmax renormalises what they leave out).
    """
    dtype = torch.promote_types(logits.dtype, torch.float32)
    p_gen, weights = p_gen.to(dtype), weights.to(dtype)
    vocab = logits.to(dtype).softmax(-1)  # (B, T, V) P_vocab
    copy = copy_distribution(weights, src, logits.size(-1))  # (B, T, V)
    mixed = p_gen * vocab + (1 - p_gen) * copy
    return mixed.clamp_min(torch.finfo(dtype).tiny).log()


class CopyGate(nn.Module):
    """p_gen (See et al. 2017, eq. 8): how much of step t's output is generated rather than
    copied; one linear map of [c_t; h_t; x_t] (w_h, w_s, w_x and b_ptr side by side)."""

    def __init__(self, hidden_size: int, embed_size: int):
        super().__init__()
        self.linear = nn.Linear(2 * hidden_size + embed_size, 1)

    def forward(self, context: torch.Tensor, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """context (B, T, N), h (B, T, N), x (B, T, E) -> p_gen (B, T, 1)"""
        return torch.sigmoid(self.linear(torch.cat([context, h, x], dim=-1)))
