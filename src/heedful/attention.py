"""Attention as the papers define it: masks, scaled dot-product, multi-head, Bahdanau and Luong.

Every attention here has one call shape, so they are interchangeable and one test harness and one
plotting path serve them all:

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

from heedful.stacked import stacked_weights

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
    try:
        shape = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        shape = None
    if shape != scores_shape:
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
    dropped = F.dropout(weights, dropout_p) if dropout_p > 0.0 else weights
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

    When the weights are not needed it runs torch's fused `scaled_dot_product_attention`, which
    computes the same function without materialising the (Lq, Lk) matrix in Python.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if num_heads < 1 or d_model % num_heads != 0:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by num_heads ({num_heads}): "
                "each head gets d_model / num_heads dimensions"
            )
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.dropout = dropout
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        # No key bias: q·(k + b) = q·k + q·b adds the same amount to every key's score for a
        # query, which the softmax cancels. The bias would get a zero gradient and only drift
        # (Adam amplifies round-off noise in it), so it is left out.
        self.w_k = nn.Linear(d_model, d_model, bias=False)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, D) -> (B, H, L, D/H)"""
        b, length, _ = x.shape
        return x.view(b, length, self.num_heads, self.d_head).transpose(1, 2)

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
        return {"q": cols, "k": cols, "v": cols}

    def project_kv(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """K W_K and V W_V split into heads, (B, H, Lk, D/H) each. Decoders cache these."""
        if keys is values and (fused := stacked_weights(self, self.parts("k", "v"))) is not None:
            k, v = F.linear(keys, *fused).chunk(2, dim=-1)  # one product: (B, Lk, 2D)
            return self.split_heads(k), self.split_heads(v)
        return self.split_heads(self.w_k(keys)), self.split_heads(self.w_v(values))

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Self-attention's Q, K, V of x (B, L, D) split into heads, (B, H, L, D/H) each."""
        if (fused := stacked_weights(self, self.parts("q", "k", "v"))) is not None:
            q, k, v = F.linear(x, *fused).chunk(3, dim=-1)  # one product: (B, L, 3D)
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
        """Attention of `query` over already projected heads k, v (B, H, Lk, D/H)."""
        q = self.split_heads(self.w_q(query))  # (B, H, Lq, D/H)
        return self.attend_heads(q, k, v, mask, need_weights)

    def attend_heads(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of projected heads q (B, H, Lq, D/H) over k, v (B, H, Lk, D/H), then W_O."""
        b, _, lq, _ = q.shape
        if mask is not None:
            check_mask(mask, torch.Size((b, lq, k.size(-2))))
            mask = mask.unsqueeze(-3) if mask.dim() == 3 else mask  # add the head axis
        p = self.dropout if self.training else 0.0
        if need_weights:
            out, weights = scaled_dot_product_attention(q, k, v, mask, p)  # (B, H, Lq, D/H)
        else:
            out, weights = _fused_attention(q, k, v, mask, p), None
        out = out.transpose(1, 2).reshape(b, lq, self.d_model)  # merge heads: (B, Lq, D)
        return self.w_o(out), weights


def _fused_attention(q, k, v, mask: torch.Tensor | None, dropout_p: float) -> torch.Tensor:
    """torch's fused kernel, with our convention that a fully masked query row outputs zeros."""
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


# ---------------------------------------------------------------------------------------------
# Additive attention (Bahdanau et al. 2014) and multiplicative attention (Luong et al. 2015)
# ---------------------------------------------------------------------------------------------


class AdditiveAttention(nn.Module):
    """Bahdanau et al. 2014, eq. 6: score(q, k) = vᵀ tanh(W_q q + W_k k).

    A small feed-forward network scores each (decoder state, encoder state) pair; it lets the
    query and keys have different sizes (e.g. a bidirectional encoder's 2H-wide states).
    """

    def __init__(self, query_size: int, key_size: int, hidden_size: int):
        super().__init__()
        self.w_q = nn.Linear(query_size, hidden_size, bias=False)
        self.w_k = nn.Linear(key_size, hidden_size, bias=False)
        self.v = nn.Linear(hidden_size, 1, bias=False)

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """W_k k does not depend on the query: a decoder computes it once per sentence."""
        return self.w_k(keys)  # (..., Lk, A)

    def score(self, query: torch.Tensor, prepared_keys: torch.Tensor) -> torch.Tensor:
        # (..., Lq, 1, A) + (..., 1, Lk, A) -> tanh -> v -> (..., Lq, Lk)
        hidden = torch.tanh(self.w_q(query).unsqueeze(-2) + prepared_keys.unsqueeze(-3))
        return self.v(hidden).squeeze(-1)

    def forward(self, query, keys, values, mask=None) -> tuple[torch.Tensor, torch.Tensor]:
        return attend(self.score(query, self.prepare_keys(keys)), values, mask)


LUONG_KINDS = ("dot", "general", "concat")


class LuongAttention(nn.Module):
    """Luong et al. 2015, §3.1, three scores of decoder state h_t against encoder state h̄_s:

    dot:     h_tᵀ h̄_s                  (needs equal sizes, no parameters)
    general: h_tᵀ W_a h̄_s
    concat:  v_aᵀ tanh(W_a [h_t; h̄_s])
    """

    def __init__(self, kind: str, query_size: int, key_size: int, hidden_size: int | None = None):
        super().__init__()
        if kind not in LUONG_KINDS:
            raise ValueError(f"unknown Luong attention kind {kind!r}; choose one of {LUONG_KINDS}")
        if kind == "dot" and query_size != key_size:
            raise ValueError(
                f"Luong 'dot' attention needs query_size == key_size, got {query_size} and "
                f"{key_size}; use 'general' to learn a map between them"
            )
        self.kind, self.query_size = kind, query_size
        if kind == "general":
            self.w_a = nn.Linear(key_size, query_size, bias=False)
        elif kind == "concat":
            self.w_a = nn.Linear(query_size + key_size, hidden_size or query_size, bias=False)
            self.v_a = nn.Linear(hidden_size or query_size, 1, bias=False)

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        if self.kind == "general":
            return self.w_a(keys)  # W_a h̄_s: (..., Lk, d_q)
        if self.kind == "concat":
            # W_a [h_t; h̄_s] = W_q h_t + W_k h̄_s with W_a = [W_q W_k]: project keys once.
            return F.linear(keys, self.w_a.weight[:, self.query_size :])  # (..., Lk, A)
        return keys

    def score(self, query: torch.Tensor, prepared_keys: torch.Tensor) -> torch.Tensor:
        if self.kind == "concat":
            projected_query = F.linear(query, self.w_a.weight[:, : self.query_size])  # (..., Lq, A)
            hidden = torch.tanh(projected_query.unsqueeze(-2) + prepared_keys.unsqueeze(-3))
            return self.v_a(hidden).squeeze(-1)  # (..., Lq, Lk)
        return query @ prepared_keys.transpose(-2, -1)  # (..., Lq, Lk)

    def forward(self, query, keys, values, mask=None) -> tuple[torch.Tensor, torch.Tensor]:
        return attend(self.score(query, self.prepare_keys(keys)), values, mask)


# ---------------------------------------------------------------------------------------------
# Local attention (Luong et al. 2015, §3.2)
# ---------------------------------------------------------------------------------------------


def local_weights(
    scores: torch.Tensor,
    centers: torch.Tensor,
    window: int,
    mask: torch.Tensor | None,
    gaussian: bool,
) -> torch.Tensor:
    """Luong et al. 2015, §3.2: attend only to source positions s with |s - p_t| <= D.

    scores (..., Lq, Lk) of score(h_t, h̄_s); centers (..., Lq) the aligned positions p_t;
    window D. a_t = softmax of the scores over the window (eq. 7, keys outside it at exactly 0);
    with `gaussian` (local-p) each is then multiplied by exp(-(s - p_t)² / 2σ²), σ = D / 2
    (eq. 10), which favours the positions near p_t: such rows sum to less than 1, as in the
    paper. mask: the usual (..., Lq, Lk)-broadcastable bool mask, True where allowed.
    """
    positions = torch.arange(scores.size(-1), device=scores.device, dtype=centers.dtype)
    distance = positions - centers.unsqueeze(-1)  # (..., Lq, Lk) s - p_t
    inside = distance.abs() <= window
    weights = masked_softmax(scores, inside if mask is None else inside & mask)
    if gaussian:
        sigma = window / 2
        weights = weights * torch.exp(-(distance**2) / (2 * sigma**2)).to(weights.dtype)
    return weights


class LuongLocalAttention(nn.Module):
    """Luong et al. 2015, §3.2, local attention, with the 'general' score h_tᵀ W_a h̄_s:

    local-m (monotonic):  p_t = t, the decoder step (clamped to the last source position, so
                          that a long output still sees the source's end)
    local-p (predictive): p_t = S · sigmoid(v_pᵀ tanh(W_p h_t)), S the source length (eq. 9)

    forward takes `positions` (..., Lq), the decoder steps of the queries (local-m needs them;
    default 0 .. Lq - 1), and returns (context, weights) like every attention here; centers()
    gives the p_t the weights were centred on.
    """

    def __init__(self, kind: str, query_size: int, key_size: int, window: int = 10):
        super().__init__()
        if kind not in ("m", "p"):
            raise ValueError(f"unknown local attention kind {kind!r}; choose 'm' or 'p'")
        if window < 1:
            raise ValueError(f"the local attention window D must be at least 1, got {window}")
        self.local, self.window, self.kind = kind, window, "general"  # kind: the score's
        self.w_a = nn.Linear(key_size, query_size, bias=False)
        if kind == "p":
            self.w_p = nn.Linear(query_size, query_size, bias=False)
            self.v_p = nn.Linear(query_size, 1, bias=False)

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.w_a(keys)  # W_a h̄_s: (..., Lk, d_q)

    def score(self, query: torch.Tensor, prepared_keys: torch.Tensor) -> torch.Tensor:
        return query @ prepared_keys.transpose(-2, -1)  # (..., Lq, Lk)

    def centers(
        self, query: torch.Tensor, positions: torch.Tensor, lengths: torch.Tensor
    ) -> torch.Tensor:
        """p_t (..., Lq) for queries (..., Lq, d_q) at decoder steps `positions` (..., Lq) over
        sources of `lengths` (..., 1) real tokens."""
        if self.local == "m":
            return torch.minimum(positions.to(query.dtype), (lengths - 1).to(query.dtype))
        gate = torch.sigmoid(self.v_p(torch.tanh(self.w_p(query)))).squeeze(-1)  # (..., Lq)
        return lengths.to(query.dtype) * gate

    def weigh(self, scores, query, mask, positions) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights (..., Lq, Lk), centers p_t (..., Lq)) from the scores of `query`."""
        lengths = scores.new_full((*scores.shape[:-2], 1), scores.size(-1))  # (..., 1)
        if mask is not None:
            lengths = mask.sum(-1).to(scores.dtype)  # (..., 1) real source tokens
        centers = self.centers(query, positions, lengths)
        return local_weights(scores, centers, self.window, mask, self.local == "p"), centers

    def forward(
        self, query, keys, values, mask=None, positions=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if positions is None:
            positions = torch.arange(query.size(-2), device=query.device).expand(query.shape[:-1])
        scores = self.score(query, self.prepare_keys(keys))
        weights, _ = self.weigh(scores, query, mask, positions)
        return weights @ values, weights
