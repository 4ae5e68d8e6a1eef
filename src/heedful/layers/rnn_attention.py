"""The RNN decoder's attention: Bahdanau's additive score and Luong's global and local ones.

Each is declared once, by name, in scores.py (its formula and the form the viewer and explain
recompute); here are the modules. They share attention.py's call, so the decoder, one test
harness and one plotting path serve them all:

    forward(query, keys, values, mask) -> (context, weights)

and, for the decoder's one-step use, prepare_keys(keys) once per sentence, score(query,
prepared_keys), and score_parts(states, queries): the parts q_t, k_s, v the score's form is
computed from, which the viewer's calculation panel shows (visualize/internals.py).

Shapes: query (..., Lq, d_q), keys (..., Lk, d_k), values (..., Lk, d_v); weights (..., Lq, Lk);
A the hidden size of an additive score.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from heedful.layers.attention import attend, masked_softmax


@dataclass(frozen=True)
class ScoreParts:
    """What a score is computed from, in its form (scores.py): "dot" score = scale · q_t · k_s,
    "additive" score = vᵀ tanh(q_t + k_s). None means the state itself: q_t = h_t (T, N),
    k_s = h̄_s (S, N); v is None for the dot form."""

    queries: torch.Tensor | None  # (T, A) q_t
    keys: torch.Tensor | None  # (S, A) k_s
    v: torch.Tensor | None  # (A,)


def linear_weight(linear: nn.Module) -> torch.Tensor:
    """A Linear's weight, also of an int8 one (whose .weight() is a quantized tensor)."""
    weight = linear.weight
    return weight().dequantize() if callable(weight) else weight


# ---------------------------------------------------------------------------------------------
# Additive attention (Bahdanau et al. 2014) and multiplicative attention (Luong et al. 2015)
# ---------------------------------------------------------------------------------------------


class AdditiveAttention(nn.Module):
    """Bahdanau et al. 2014, eq. 6: score(q, k) = vᵀ tanh(W_q q + W_k k).

    A small feed-forward network scores each (decoder state, encoder state) pair; it lets the
    query and keys have different sizes (e.g. a bidirectional encoder's 2H-wide states).
    """

    weights_read = ()  # Linears whose .weight the score reads itself (none: all are called)

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

    def score_parts(self, states: torch.Tensor, queries: torch.Tensor) -> ScoreParts:
        """additive: q_t = W_q h_t, k_s = W_k h̄_s, v."""
        return ScoreParts(self.w_q(queries), self.prepare_keys(states), linear_weight(self.v)[0])

    def forward(self, query, keys, values, mask=None) -> tuple[torch.Tensor, torch.Tensor]:
        return attend(self.score(query, self.prepare_keys(keys)), values, mask)


LUONG_KINDS = ("dot", "general", "concat")


class LuongAttention(nn.Module):
    """Luong et al. 2015, §3.1, three scores of decoder state h_t against encoder state h̄_s:

    dot:     h_tᵀ h̄_s                  (needs equal sizes, no parameters)
    general: h_tᵀ W_a h̄_s
    concat:  v_aᵀ tanh(W_a [h_t; h̄_s])

    scaled (dot, general): the score × 1/√d_q, as Vaswani et al. 2017, §3.2.1 scale theirs, so
    that a product of wide states does not push the softmax where its gradients vanish.
    """

    def __init__(
        self,
        kind: str,
        query_size: int,
        key_size: int,
        hidden_size: int | None = None,
        scaled: bool = False,
    ):
        super().__init__()
        if kind not in LUONG_KINDS:
            raise ValueError(f"unknown Luong attention kind {kind!r}; choose one of {LUONG_KINDS}")
        if kind == "dot" and query_size != key_size:
            raise ValueError(
                f"Luong 'dot' attention needs query_size == key_size, got {query_size} and "
                f"{key_size}; use 'general' to learn a map between them"
            )
        if scaled and kind == "concat":
            raise ValueError("Luong 'concat' attention has no product to scale; use scaled=False")
        self.kind, self.query_size = kind, query_size
        self.scale = query_size**-0.5 if scaled else 1.0
        # concat slices W_a into its query and key halves, reading .weight itself
        self.weights_read = ("w_a",) if kind == "concat" else ()
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

    def _concat_query(self, query: torch.Tensor) -> torch.Tensor:
        return F.linear(query, self.w_a.weight[:, : self.query_size])  # W_q h_t: (..., Lq, A)

    def score(self, query: torch.Tensor, prepared_keys: torch.Tensor) -> torch.Tensor:
        if self.kind == "concat":
            # (..., Lq, 1, A) + (..., 1, Lk, A) -> tanh -> v_a -> (..., Lq, Lk)
            hidden = torch.tanh(
                self._concat_query(query).unsqueeze(-2) + prepared_keys.unsqueeze(-3)
            )
            return self.v_a(hidden).squeeze(-1)
        scores = query @ prepared_keys.transpose(-2, -1)  # (..., Lq, Lk)
        return scores * self.scale if self.scale != 1.0 else scores  # / √d_q when scaled

    def score_parts(self, states: torch.Tensor, queries: torch.Tensor) -> ScoreParts:
        """dot: q_t = h_t, k_s = h̄_s; general: k_s = W_a h̄_s; concat (additive): W_a [h_t; h̄_s]
        split in two, q_t = W_q h_t and k_s = W_k h̄_s, with v = v_a."""
        if self.kind == "concat":
            v = linear_weight(self.v_a)[0]
            return ScoreParts(self._concat_query(queries), self.prepare_keys(states), v)
        return ScoreParts(None, self.prepare_keys(states) if self.kind == "general" else None, None)

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

    weights_read = ()  # every Linear is called

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

    def score_parts(self, states: torch.Tensor, queries: torch.Tensor) -> ScoreParts:
        """dot, as Luong's general: q_t = h_t, k_s = W_a h̄_s (the window is weigh()'s)."""
        return ScoreParts(None, self.prepare_keys(states), None)

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
