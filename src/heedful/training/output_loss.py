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

On a CPU with bfloat16 units (AVX512-BF16, AMX) the three products with the (V × d) weight may
run in bfloat16 (`products=torch.bfloat16`, train.output_products): float32 sums of bfloat16
inputs, rounded to bfloat16 on the way out, 2-3x float32's rate for 512 × 128 × 8,000 on an AMD
EPYC with AVX512-BF16, while the softmax, the loss and the gradient sums stay in float32. oneDNN
builds a kernel for every row count it meets and keeps it (about 0.8 MB each here), so the rows
are padded to a multiple of ROW_MULTIPLE: every slice then has one of ROWS / ROW_MULTIPLE
shapes, where a batch's own last slice would bring a new one with most batches.
"""

from __future__ import annotations

import torch
from torch import nn

from heedful.cpu import bf16_units

ROWS = 512  # positions per slice: 512 × 8,000 float32 logits = 16 MB, reused from slice to slice
ROW_MULTIPLE = 64  # bfloat16 products see row counts of 64, 128, .. ROWS only


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
    def forward(ctx, h, weight, bias, targets, smoothing, ignore_index, rows, products):
        n = h.shape[0]
        if products != h.dtype and (extra := -n % ROW_MULTIPLE):  # padding rows, kept = 0
            h = torch.cat([h, h.new_zeros(extra, h.shape[1])])
            targets = torch.cat([targets, targets.new_full((extra,), ignore_index)])
        h_p, w_p = h.to(products), weight.to(products)  # h and weight where float32
        grad_h = torch.empty_like(h)
        grad_w = torch.zeros_like(weight)
        grad_b = None if bias is None else torch.zeros_like(bias)
        total = h.new_zeros((), dtype=torch.float64)
        kept_h = h.new_zeros(h.shape[1])  # Σ over non-padding positions of h
        w_mean = weight.mean(0)  # (d,): mean_j z_j = h · mean_j W_j + mean_j b_j
        b_mean = 0.0 if bias is None else bias.mean()
        # one buffer for every slice's logits: a fresh (rows × V) tensor each slice would be
        # mapped page by page again
        shape = (min(rows, h.shape[0]), weight.shape[0])
        logits = h.new_empty(shape, dtype=torch.promote_types(h.dtype, torch.float32))
        for start in range(0, h.shape[0], rows):
            hs, ys = h[start : start + rows], targets[start : start + rows]
            keep = (ys != ignore_index).unsqueeze(1)
            z = _logits(h_p[start : start + rows], w_p, bias, logits[: hs.shape[0]])
            loss, dz = _slice(z, hs, ys, keep, smoothing, w_mean, b_mean, products)
            total += loss
            grad_h[start : start + rows] = dz @ w_p  # ∂/∂h = dz W (less the uniform part)
            if products == grad_w.dtype:
                grad_w.addmm_(dz.t(), hs)  # ∂/∂W = dzᵀ h
            else:
                grad_w += dz.t() @ h_p[start : start + rows]
            if grad_b is not None:
                grad_b += dz.sum(0, dtype=grad_b.dtype)
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
        ctx.save_for_backward(grad_h[:n], grad_w, grad_b)
        return total.to(h.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w, grad_b = ctx.saved_tensors
        scaled = [None if g is None else g * grad_out for g in (grad_h, grad_w, grad_b)]
        return (*scaled, None, None, None, None, None)


def _logits(hs, weight, bias, out):
    """z = h Wᵀ + b (rows, V) in `out` (float32): written there by the product in float32,
    copied there from a bfloat16 product's result otherwise."""
    if hs.dtype == out.dtype:
        if bias is None:
            return torch.mm(hs, weight.t(), out=out)
        return torch.addmm(bias, hs, weight.t(), out=out)
    z = out.copy_(hs @ weight.t())
    return z if bias is None else z.add_(bias)


def _slice(z, hs, ys, keep, smoothing: float, w_mean, b_mean, products):
    """One slice's summed loss (float64) and dz = keep·(softmax(z) − (1 − ε)·onehot(y)) in
    `products`' dtype, the gradient of its logits less the uniform −ε/V·keep (added by the
    caller); dz occupies z's memory (float32) before that."""
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
    return (loss * kept).sum(dtype=torch.float64), dz.to(products)


def output_layer_loss(
    features: torch.Tensor,
    layer: nn.Linear,
    targets: torch.Tensor,
    label_smoothing: float,
    ignore_index: int,
    rows: int = ROWS,
    products: torch.dtype | None = None,
) -> torch.Tensor:
    """Σ over non-padding positions of the smoothed cross-entropy of layer(features).

    features (..., d), targets (...): the same sum as F.cross_entropy(layer(features), targets,
    reduction="sum") with that smoothing and ignore_index, without a (positions × V) tensor.
    products: the dtype of the products with the weight (None: the features'; bfloat16: see
    the module's docstring).
    """
    h = features.reshape(-1, features.shape[-1])
    products = h.dtype if products is None else products
    if products != h.dtype and rows % ROW_MULTIPLE:
        raise ValueError(f"rows: a multiple of {ROW_MULTIPLE} for {products} products, got {rows}")
    return _OutputLoss.apply(
        h,
        layer.weight,
        layer.bias,
        targets.reshape(-1),
        label_smoothing,
        ignore_index,
        rows,
        products,
    )


def output_products(setting: str, device, flags: set[str] | None = None) -> torch.dtype | None:
    """train.output_products as the dtype of the output layer's products: bfloat16 where asked
    for, or (auto) on a CPU with bfloat16 units, which run them 2-3x faster; None (the states'
    own dtype, float32) otherwise: a CPU without them emulates bfloat16, tens of times slower."""
    if setting == "auto":
        on_cpu = torch.device(device).type == "cpu"
        return torch.bfloat16 if on_cpu and bf16_units(flags) else None
    return torch.bfloat16 if setting == "bfloat16" else None
