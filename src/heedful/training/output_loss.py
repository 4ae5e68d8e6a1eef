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
    forward pass, slice by slice, and scaled by the incoming gradient in the backward."""

    @staticmethod
    def forward(ctx, h, weight, bias, targets, smoothing: float, ignore_index: int, rows: int):
        grad_h = torch.empty_like(h)
        grad_w = torch.zeros_like(weight)
        grad_b = None if bias is None else torch.zeros_like(bias)
        total = h.new_zeros((), dtype=torch.float64)
        vocab = weight.shape[0]
        for start in range(0, h.shape[0], rows):
            hs, ys = h[start : start + rows], targets[start : start + rows]
            z = torch.nn.functional.linear(hs, weight, bias).float()  # z = h Wᵀ + b
            keep = (ys != ignore_index).unsqueeze(1).to(z.dtype)
            safe = ys.clamp(min=0).unsqueeze(1)
            lse = torch.logsumexp(z, dim=1, keepdim=True)
            # loss = (1 − ε)(lse − z_y) + ε(lse − mean z), padding rows masked out
            loss = lse - (1 - smoothing) * z.gather(1, safe) - smoothing * z.mean(1, keepdim=True)
            total += (loss * keep).sum(dtype=torch.float64)
            # dz = softmax(z) − q,  q = (1 − ε)·onehot(y) + ε/V;  0 on padding rows
            dz = z.sub_(lse).exp_()
            dz.sub_(smoothing / vocab)
            dz.scatter_add_(1, safe, torch.full_like(lse, -(1 - smoothing)))
            dz = dz.mul_(keep).to(h.dtype)
            grad_h[start : start + rows] = dz @ weight  # ∂/∂h = dz W
            grad_w.addmm_(dz.t(), hs)  # ∂/∂W = dzᵀ h
            if grad_b is not None:
                grad_b += dz.sum(0)
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        return total.to(h.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w, grad_b = ctx.saved_tensors
        scaled = [None if g is None else g * grad_out for g in (grad_h, grad_w, grad_b)]
        return (*scaled, None, None, None, None)


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
