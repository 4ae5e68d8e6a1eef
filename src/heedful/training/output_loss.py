"""The output layer and the label-smoothed loss in one, a slice of rows at a time.

Training a translation model computes logits z = h Wᵀ + b over the whole vocabulary for every
target position, only to reduce them to one number per position. Done in one piece, the logits
and their gradient are two (tokens × V) tensors: 96 MB each for a 3,000-token batch and 8,000
pieces, too large for the allocator to keep, so every step maps fresh pages for them and the
matrix multiplies that write them run at a third of their speed on a CPU. Here the rows go
through in slices of a few MB: each slice's logits give its loss and, at once, its gradient
dz = softmax(z) − q (q the smoothed target distribution), which is multiplied back into the
gradients of h, W and b before the next slice; the logits of the whole batch never exist.

With label smoothing ε over V classes, torch's F.cross_entropy computes for a position with
target y:  loss = (1 − ε)·(lse(z) − z_y) + ε·(lse(z) − mean(z)),  lse the log-sum-exp; so
q = (1 − ε)·onehot(y) + ε/V, and padding positions contribute nothing.
"""

from __future__ import annotations

import torch
from torch import nn

ROWS = 512  # positions per slice: 512 × 8,000 float32 logits = 16 MB, reused from slice to slice


class _OutputLoss(torch.autograd.Function):
    """Summed smoothed cross-entropy of (h Wᵀ + b) against `targets`; gradients computed in the
    forward pass, slice by slice, and scaled by the incoming gradient in the backward.

    Each slice's (rows × V) logits are read and written as few times as the math allows (on a
    narrow model this loss is a third of a training step, and most of it is these passes, not
    the products): exp(z − max) in place gives both log-sum-exp and softmax; the mean of z,
    which label smoothing needs, is h · mean(W) + mean(b) without reading z; and the smoothing's
    uniform −ε/V in dz, the same for every class, reaches the gradients as rank-one products
    added once after the slices instead of a pass over every slice."""

    @staticmethod
    def forward(ctx, h, weight, bias, targets, smoothing: float, ignore_index: int, rows: int):
        grad_h = torch.empty_like(h)
        grad_w = torch.zeros_like(weight)
        grad_b = None if bias is None else torch.zeros_like(bias)
        total = h.new_zeros((), dtype=torch.float64)
        kept_h = h.new_zeros(h.shape[1])  # Σ over non-padding positions of h
        w_mean = weight.mean(0)  # (d,): mean_j z_j = h · mean_j W_j + mean_j b_j
        b_mean = 0.0 if bias is None else bias.mean()
        # one buffer for every slice's logits: a fresh (rows × V) tensor each slice would be
        # mapped page by page again
        logits = h.new_empty(min(rows, h.shape[0]), weight.shape[0])
        for start in range(0, h.shape[0], rows):
            hs, ys = h[start : start + rows], targets[start : start + rows]
            keep = (ys != ignore_index).unsqueeze(1)
            z = logits[: hs.shape[0]]
            loss, dz = _slice(hs, weight, bias, ys, keep, smoothing, w_mean, b_mean, z)
            total += loss
            grad_h[start : start + rows] = dz @ weight  # ∂/∂h = dz W (less the uniform part)
            grad_w.addmm_(dz.t(), hs)  # ∂/∂W = dzᵀ h
            if grad_b is not None:
                grad_b += dz.sum(0)
            kept_h += (hs * keep).sum(0)
        # the uniform part of dz, u = −(ε/V)·keep on every class: u (Σ_j W_j) for ∂/∂h, and
        # the same row uᵀh for every row of ∂/∂W, Σ u for every entry of ∂/∂b
        uniform = smoothing / weight.shape[0]
        if uniform:
            keep_all = (targets != ignore_index).unsqueeze(1).to(h.dtype)
            grad_h.sub_(uniform * keep_all * weight.sum(0))
            grad_w.sub_(uniform * kept_h)
            if grad_b is not None:
                grad_b.sub_(uniform * keep_all.sum())
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        return total.to(h.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w, grad_b = ctx.saved_tensors
        scaled = [None if g is None else g * grad_out for g in (grad_h, grad_w, grad_b)]
        return (*scaled, None, None, None, None)


def _slice(hs, weight, bias, ys, keep, smoothing: float, w_mean, b_mean, out):
    """One slice's summed loss (float64) and dz = keep·(softmax(z) − (1 − ε)·onehot(y)), the
    gradient of its logits less the uniform −ε/V·keep (added by the caller); z is computed
    into `out` (rows, V), which dz then occupies."""
    if bias is None:  # z = h Wᵀ + b   (rows, V)
        z = torch.mm(hs, weight.t(), out=out).float()
    else:
        z = torch.addmm(bias, hs, weight.t(), out=out).float()
    safe = ys.clamp(min=0).unsqueeze(1)
    z_y = z.gather(1, safe)
    z_mean = (hs @ w_mean + b_mean).float().unsqueeze(1)
    top = z.amax(1, keepdim=True)
    e = z.sub_(top).exp_()  # exp(z − max), in place of z
    total = e.sum(1, keepdim=True)
    lse = top + total.log()  # log Σ exp z
    # loss = (1 − ε)(lse − z_y) + ε(lse − mean z), padding rows masked out
    loss = lse - (1 - smoothing) * z_y - smoothing * z_mean
    kept = keep.to(z.dtype)
    dz = e.mul_(kept / total)  # softmax, 0 on padding rows
    dz.scatter_add_(1, safe, -(1 - smoothing) * kept)
    return (loss * kept).sum(dtype=torch.float64), dz.to(hs.dtype)


def output_layer_loss(
    features: torch.Tensor,
    layer: nn.Linear,
    targets: torch.Tensor,
    label_smoothing: float,
    ignore_index: int,
    rows: int = ROWS,
) -> torch.Tensor:
    """Σ over non-padding positions of the smoothed cross-entropy of layer(features).

    features (..., d), targets (...): the same sum as F.cross_entropy(layer(features), targets,
    reduction="sum") with that smoothing and ignore_index, without a (positions × V) tensor.
    """
    h = features.reshape(-1, features.shape[-1])
    return _OutputLoss.apply(
        h, layer.weight, layer.bias, targets.reshape(-1), label_smoothing, ignore_index, rows
    )
