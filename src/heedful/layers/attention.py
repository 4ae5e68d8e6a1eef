"""Attention as the papers define it: masks, scaled dot-product and multi-head attention.

Every attention here, and the RNN decoder's in rnn_attention.py (Bahdanau, Luong), has one call
shape, so they are interchangeable and one test harness and one plotting path serve them all:

    forward(query, keys, values, mask) -> (context, weights)

Shapes: query (..., Lq, d_q), keys (..., Lk, d_k), values (..., Lk, d_v); weights (..., Lq, Lk).
Masks are boolean and **True where attention is allowed**, broadcastable to (..., Lq, Lk):
a padding mask is (B, 1, S), a causal mask is (T, T); combine them with `&`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from heedful.layers.dropout import dropout
from heedful.layers.products import apply, product

# ---------------------------------------------------------------------------------------------
# Masks: built here and nowhere else.
# ---------------------------------------------------------------------------------------------


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, S) token ids -> (B, 1, S) mask, True on real tokens: no query may attend to padding."""
    return (tokens != pad_id).unsqueeze(-2)


def causal_mask(length: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(T, T) lower-triangular mask: position t may attend to positions <= t, never the future."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def check_mask(mask: torch.Tensor | None, scores_shape: torch.Size) -> None:
    """Fail early, with both shapes in the message, on a mask that cannot apply to the scores."""
    if mask is None:
        return
    if mask.dtype != torch.bool:
        raise TypeError(
            f"attention mask must be a bool tensor (True = may attend), got {mask.dtype}"
        )
    # broadcasts to the scores: each of its sizes, aligned from the right, is 1 or theirs
    # (not torch.broadcast_shapes: its first call imports sympy, a fifth of a second, and it
    # costs 20 times as long as this on every attention call)
    pairs = zip(reversed(mask.shape), reversed(scores_shape))
    if mask.dim() > len(scores_shape) or any(m not in (1, s) for m, s in pairs):
        raise ValueError(
            f"attention mask of shape {tuple(mask.shape)} does not broadcast to the attention "
            f"scores' shape {tuple(scores_shape)} (..., query length, key length)"
        )


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax over the last axis with masked keys at exactly 0 weight.

    Masked scores are set to the dtype's minimum rather than -inf (or a magic -1e9, which overflows
    in half precision): exp(min - max) underflows to exactly 0 for any row with an allowed key, and
    a row whose keys are all masked stays finite (uniform) before we zero it, so neither the output
    nor the gradient ever sees a NaN.
    """
    if mask is None:
        return scores.softmax(dim=-1)
    check_mask(mask, scores.shape)
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    # Rows with no allowed key get all-zero weights, hence a zero context.
    return scores.softmax(dim=-1).masked_fill(~mask, 0.0)


def attend(
    scores: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None, dropout_p: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The part all attentions share: weights = softmax(scores), context = weights · V."""
    weights = masked_softmax(scores, mask)  # (..., Lq, Lk)
    dropped = dropout(weights, dropout_p) if dropout_p > 0.0 else weights
    return dropped @ values, weights  # (..., Lq, d_v)


# ---------------------------------------------------------------------------------------------
# Scaled dot-product attention (Vaswani et al. 2017, §3.2.1)
# ---------------------------------------------------------------------------------------------


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention(Q, K, V) = softmax(QKᵀ / √d_k) · V, returning (output, weights).

    q: (..., Lq, d_k), k: (..., Lk, d_k), v: (..., Lk, d_v), mask broadcastable to (..., Lq, Lk),
    True where attention is allowed. Masked weights are exactly 0; a query row whose keys are all
    masked gets zero weights and a zero output. `weights` are returned before dropout, so they are
    what the model computed, not what a random mask kept.
    """
    d_k = q.size(-1)
    # scores = QKᵀ / √d_k: the scaling keeps the dot products' variance near 1 so the softmax does
    # not saturate into one-hot rows with vanishing gradients (§3.2.1).
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., Lq, Lk)
    return attend(scores, v, mask, dropout_p)


# ---------------------------------------------------------------------------------------------
# Multi-head attention (Vaswani et al. 2017, §3.2.2)
# ---------------------------------------------------------------------------------------------


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W_O, head_i = Attention(Q W_Qi, K W_Ki, V W_Vi).

    With num_kv_heads < num_heads it is grouped-query attention (Ainslie et al. 2023; 1 is
    Shazeer 2019's multi-query attention): W_K and W_V make num_kv_heads heads, each read by a
    group of num_heads / num_kv_heads consecutive query heads (kv_head), so a decoder caches
    num_kv_heads / num_heads of the keys and values.

    When the weights are not needed it runs torch's fused `scaled_dot_product_attention`, which
    computes the same function without materialising the (Lq, Lk) matrix in Python.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        num_kv_heads: int | None = None,
    ):
        super().__init__()
        if num_heads < 1 or d_model % num_heads != 0:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by num_heads ({num_heads}): "
                "each head gets d_model / num_heads dimensions"
            )
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if self.num_kv_heads < 1 or num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads ({num_kv_heads}) must divide num_heads ({num_heads}): each "
                "key and value head is shared by num_heads / num_kv_heads query heads"
            )
        d_kv = self.num_kv_heads * self.d_head  # K's and V's width: H_kv · D/H
        self.dropout = dropout
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        # No key bias: q·(k + b) = q·k + q·b adds the same amount to every key's score for a
        # query, which the softmax cancels. The bias would get a zero gradient and only drift
        # (Adam amplifies round-off noise in it), so it is left out.
        self.w_k = nn.Linear(d_model, d_kv, bias=False)
        self.w_v = nn.Linear(d_model, d_kv, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, n · D/H) -> (B, n, L, D/H): n = H for Q, H_kv for K and V"""
        b, length, _ = x.shape
        return x.view(b, length, -1, self.d_head).transpose(1, 2)

    def kv_head(self, head: int) -> int:
        """The key/value head query head `head` reads (from 0): consecutive groups of
        H / H_kv query heads share one, as repeat_interleave in attend_heads lays them out."""
        return head // (self.num_heads // self.num_kv_heads)

    def parts(self, *roles: str) -> dict[str, nn.Module]:
        """The projections by their role in the formula (all of them, or those of `roles`):
        "q", "k", "v" are W_Q, W_K, W_V (their outputs, split_heads'd, are the heads' Q, K, V)
        and "o" is W_O, which reads the heads side by side (z) and writes the output.

        The interface the readers use (explain, the viewer's internals, both exporters, the
        stacked products): none of them knows the attribute names, which stay the state dict's
        (w_q, w_k, w_v, w_o), so every model directory loads as before."""
        parts = {"q": self.w_q, "k": self.w_k, "v": self.w_v, "o": self.w_o}
        return {role: parts[role] for role in roles} if roles else parts

    def head_columns(self, head: int) -> dict[str, slice]:
        """Which columns of the outputs of parts q, k and v (and of o's input z, as q's) head
        `head` (from 0) reads: head_i = Attention(Q[:, cols], K[:, cols], V[:, cols])."""
        cols = slice(head * self.d_head, (head + 1) * self.d_head)
        g = self.kv_head(head)
        shared = slice(g * self.d_head, (g + 1) * self.d_head)  # cols unless grouped
        return {"q": cols, "k": shared, "v": shared}

    def project_kv(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """K W_K and V W_V split into heads, (B, H_kv, Lk, D/H) each. Decoders cache these."""
        if keys is values and (kv := product(self, self.parts("k", "v"), keys)) is not None:
            k, v = kv.chunk(2, dim=-1)  # one product: (B, Lk, 2 H_kv D/H)
            return self.split_heads(k), self.split_heads(v)
        return self.split_heads(self.w_k(keys)), self.split_heads(self.w_v(values))

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Self-attention's Q, K, V of x (B, L, D) split into heads, (B, H or H_kv, L, D/H)."""
        if (qkv := product(self, self.parts("q", "k", "v"), x)) is not None:
            d_kv = self.num_kv_heads * self.d_head  # one product: (B, L, D + 2 H_kv D/H)
            q, k, v = qkv.split([self.d_model, d_kv, d_kv], dim=-1)
            return self.split_heads(q), self.split_heads(k), self.split_heads(v)
        k, v = self.project_kv(x, x)  # unstacked (int8, hooks): K, V first, as in forward()
        return self.split_heads(self.w_q(x)), k, v

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query (B, Lq, D), keys/values (B, Lk, D), mask broadcastable to (B, Lq, Lk).

        Returns (context (B, Lq, D), weights (B, H, Lq, Lk) if need_weights else None).
        """
        k, v = self.project_kv(keys, values)
        return self.attend_projected(query, k, v, mask, need_weights)

    def attend_projected(
        self,
        query: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of `query` over already projected heads k, v (B, H_kv, Lk, D/H)."""
        q = self.split_heads(apply(self, "w_q", query))  # (B, H, Lq, D/H)
        return self.attend_heads(q, k, v, mask, need_weights)

    def attend_heads(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of projected heads q (B, H, Lq, D/H) over k, v (B, H_kv, Lk, D/H), then
        W_O: (B, Lq, D) and weights (B, H, Lq, Lk) or None."""
        z, weights = self.heads_context(q, k, v, mask, need_weights)
        return apply(self, "w_o", z), weights

    def heads_context(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """z = Concat(head_1..head_H) (B, Lq, D), what W_O reads, of projected heads q
        (B, H, Lq, D/H) over k, v (B, H_kv, Lk, D/H); weights (B, H, Lq, Lk) or None.
        Grouped heads are repeated to H here, so caches stay H_kv wide."""
        b, _, lq, _ = q.shape
        if (group := self.num_heads // k.size(1)) > 1:  # GQA: each K, V head serves a group
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if mask is not None:
            check_mask(mask, torch.Size((b, lq, k.size(-2))))
            mask = mask.unsqueeze(-3) if mask.dim() == 3 else mask  # add the head axis
        p = self.dropout if self.training else 0.0
        if need_weights:
            out, weights = scaled_dot_product_attention(q, k, v, mask, p)  # (B, H, Lq, D/H)
        elif _one_query_each(q, p):
            out, weights = _one_query_attention(q, k, v, mask), None
        else:
            out, weights = _fused_attention(q, k, v, mask, p), None
        if lq == 1:  # one query a head: (B, H, 1, D/H) is already in Concat's order
            return out.reshape(b, 1, self.d_model), weights
        return out.transpose(1, 2).reshape(b, lq, self.d_model), weights  # merge heads


def _one_query_each(q: torch.Tensor, dropout_p: float) -> bool:
    """Whether this is a decoding step's attention that `_one_query_attention` does faster than
    torch's CPU flash kernel: one query a head, 64 heads or more in all, no dropout or
    autograd. The kernel, made for blocks of queries, took 1.4x as long for 64 sentences × 4
    heads over 20 keys and 2.3x for 320 over 40 (beam 5); below 64 heads its one call wins
    (a 1-thread microbenchmark on the Zen 4 EPYC, 2026-12-06)."""
    return (
        q.size(-2) == 1
        and q.size(0) * q.size(1) >= 64
        and q.device.type == "cpu"
        and dropout_p == 0.0
        and not (torch.is_grad_enabled() and q.requires_grad)
    )


def _one_query_attention(q, k, v, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(q kᵀ / √d_k) · v as two batched products over (B·H) heads, in place where it
    can; a query whose keys are all masked outputs zeros (masked_softmax's convention).

    The heads are flattened as views: the self-attention cache's K and V are slices of a
    longer buffer, which torch.matmul's 4-D broadcasting copied whole at every step (the copies
    cost more than the kernel saved); bmm reads the slices and kᵀ in place."""
    b, h, lq, d = q.shape
    keys, values = k.flatten(0, 1), v.flatten(0, 1)  # (B·H, Lk, D/H), views
    scores = torch.bmm(q.reshape(b * h, lq, d), keys.transpose(1, 2))  # (B·H, 1, Lk)
    scores = scores.mul_(1 / math.sqrt(d)).view(b, h, lq, -1)
    if mask is None:
        weights = scores.softmax(dim=-1)
    else:
        blocked = ~mask
        weights = scores.masked_fill_(blocked, torch.finfo(scores.dtype).min).softmax(dim=-1)
        weights = weights.masked_fill_(blocked, 0.0)
    return torch.bmm(weights.view(b * h, lq, -1), values).view(b, h, lq, d)


def _fused_attention(q, k, v, mask: torch.Tensor | None, dropout_p: float) -> torch.Tensor:
    """torch's fused kernel, with our convention that a fully masked query row outputs zeros.

    On a CPU under bfloat16 (or float16) autocast the kernel runs in float32: torch's CPU
    flash-attention backward is an order of magnitude slower in bfloat16 than in float32
    (docs/benchmarks.md, "bfloat16 on a CPU"), and it is a small share of the
    FLOPs, which the products around it keep in bfloat16."""
    if q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("cpu", enabled=False):
            out = _fused_attention(q.float(), k.float(), v.float(), mask, dropout_p)
        return out.to(q.dtype)
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    any_allowed = mask.any(dim=-1, keepdim=True)  # (..., Lq, 1)
    if bool(any_allowed.all()):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    # Let empty rows attend everywhere (finite), then zero them: no NaN forward or backward.
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask | ~any_allowed, dropout_p=dropout_p
    )
    return out * any_allowed
