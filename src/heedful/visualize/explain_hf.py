"""`heedful explain` for a Hugging Face model: one head's attention, from the model's own numbers.

The query, keys and values are what the model's projections computed during one teacher-forced
pass over its greedy output (Translator.replay), caught with forward hooks on the modules each
architecture keeps (model.LAYOUTS), recomputed in float64 and checked against the weights the
model returned (output_attentions) and the head output it fed to W_O:

    marian, bart, mbart, m2m_100   layers[i].self_attn / encoder_attn: q_proj, k_proj, v_proj,
                                   out_proj; scores q·k_j · d_k^-0.5 (module.scaling)
    t5                             block[i].layer[0].SelfAttention / layer[1].EncDecAttention:
                                   q, k, v, o; scores q·k_j + a relative position bias, not
                                   scaled (Raffel et al. 2020 fold 1/√d_k into W_Q's
                                   initialisation), the bias learned per head by layer 1 of each
                                   stack from the distance j - i, put in buckets, and shared by
                                   the stack's other layers; cross-attention has none

What W_Q reads: Marian and BART are post-norm (x, the layer's input); mBART, M2M100 and T5
pre-norm (LayerNorm(x), T5's an RMS norm without mean or bias). Every decoder layer's
cross-attention keys and values read the encoder's output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from heedful.visualize.explanation import (
    Explanation,
    Section,
    at,
    first_rows,
    produce,
    replay_capturing,
    rows,
    vec,
)
from heedful.visualize.trace import check_index

KIND_NAMES = {
    "cross": "cross-attention",
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
}
PRE_NORM = {"mbart": "LayerNorm(x)", "m2m_100": "LayerNorm(x)", "t5": "RMSNorm(x)"}


def _choose(model, kind: str, layer, head):
    """The attention module of `kind` in a 1-based layer (default the last), its 0-based
    layer and head, its head count and d_k."""
    modules = model.attention_modules(kind)
    where = "encoder" if kind == "encoder" else "decoder"
    li = check_index(
        "layer", len(modules) if layer is None else layer, len(modules), f"{where} layer"
    )
    attn = modules[li]
    heads = getattr(attn, "num_heads", None) or attn.n_heads  # BART family, T5
    d_k = getattr(attn, "head_dim", None) or attn.key_value_proj_dim
    hi = check_index("head", 1 if head is None else head, heads, "head", "each layer")
    return attn, li, hi, heads, d_k


def _capture(translator, out, attn, names) -> tuple[dict, object]:
    """Replay with hooks: each projection's (input, output), and the attention module's own
    output (T5's carries the position bias it added)."""
    watched = {role: attn.get_submodule(n) for role, n in zip(("q", "k", "v", "o"), names)}
    watched["attention"] = attn
    return replay_capturing(translator, out, watched)


def _bias(model, captured, head: int, query: int, keys: int) -> torch.Tensor | None:
    """T5's position bias for this query (keys,), float64; None for the other models."""
    if model.model_type != "t5":
        return None
    bias = captured["attention"][1][1]  # (1 or B, H, T, keys): what the layer added
    return bias[0, head, query, :keys].double()


@dataclass
class _Head:
    """One query of one head, recomputed in float64 from what the model's pass captured."""

    q: torch.Tensor  # (d_k,)
    k: torch.Tensor  # (keys, d_k)
    v: torch.Tensor  # (keys, d_k)
    raw: torch.Tensor  # (keys,) q·k_j
    scale: float  # the model's: d_k^-0.5, or 1 for T5
    bias: torch.Tensor | None  # (keys,) T5's position bias
    scores: torch.Tensor  # (keys,) what the softmax reads
    allowed: torch.Tensor  # (keys,) False where the causal mask hides the key
    weights: torch.Tensor  # (keys,)
    model_context: torch.Tensor  # (d_k,) this head's slice of what the model fed to W_O

    @property
    def context(self) -> torch.Tensor:
        return self.weights @ self.v  # Σ_j weight_j · v_j


def _recompute(model, attn, captured, kind: str, hi: int, qi: int, d_k: int) -> _Head:
    cols = slice(hi * d_k, (hi + 1) * d_k)  # this head's slice of Q, K, V
    q = captured["q"][1][0, qi, cols].double()
    k = captured["k"][1][0, :, cols].double()
    v = captured["v"][1][0, :, cols].double()
    raw = k @ q
    scale = float(attn.scaling)
    bias = _bias(model, captured, hi, qi, len(raw))
    scores = raw * scale + (0 if bias is None else bias)
    allowed = torch.ones_like(raw, dtype=torch.bool)
    if kind == "decoder":
        allowed[qi + 1 :] = False  # causal
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=0)
    model_context = captured["o"][0][0, qi, cols].double()
    return _Head(q, k, v, raw, scale, bias, scores, allowed, weights, model_context)


def _sections(model, kind, keys, h: _Head, heads, qi, captured) -> list[Section]:
    q, k, v, bias, allowed = h.q, h.k, h.v, h.bias, h.allowed
    labels = [at("k", keys, j) for j in range(len(keys))]
    pre = PRE_NORM.get(model.model_type)
    reads = pre or "x (the layer's input; post-norm)"
    source = "the encoder's output" if kind == "cross" else reads
    scaled = (
        f"× d_k^-0.5 = {h.scale:.4f}"
        if model.model_type != "t5"
        else "not scaled; + the relative position bias"
    )

    def cells(values, fmt, hidden="−∞  (masked)"):
        return rows(
            labels, [fmt.format(x) if ok else hidden for x, ok in zip(values.tolist(), allowed)]
        )

    kv = [f"k = {vec(k[j], 4)}  v = {vec(v[j], 4)}" for j in range(len(keys))]
    sections = [
        Section(
            "1. What the projections read",
            [
                f"{model.model_type}: Q reads {reads}; K and V read {source}",
                f"W_Q's input at this position = {vec(captured['q'][0][0, qi])}",
            ],
        ),
        Section(
            "2. Queries, keys and values (this head's slice)",
            [
                f"head dimensions {q.numel()} (d_k), {heads} heads",
                f"q = {vec(q)}",
                *first_rows(rows(labels, kv), len(keys), "keys"),
            ],
        ),
        Section("3. Scores q·k_j", cells(h.raw, "{:+.4f}", "masked (future position)")),
        Section(
            f"4. Scores the softmax reads: q·k_j {scaled}",
            cells(h.scores, "{:+.4f}")
            + ([] if bias is None else [f"position bias: {vec(bias, 8)}"]),
        ),
        Section(
            "5. Softmax → attention weights",
            [*cells(h.weights, "{:.4f}", "0"), f"  sum = {float(h.weights.sum()):.4f}"],
        ),
        Section(
            "6. Weighted sum of V → this head's output",
            [
                f"Σ_j weight_j · v_j = {vec(h.context)}",
                f"the model's head output   {vec(h.model_context)}",
                f"W_O mixes the {heads} heads' outputs into {vec(captured['o'][1][0, qi])}",
            ],
        ),
    ]
    return sections


def explain_hf(
    translator, sentence: str, layer=None, head=None, position: int = 1, kind: str = "cross"
) -> Explanation:
    """visualize.explain.explain for a heedful.hf model (same arguments, same Explanation)."""
    model = translator.model
    attn, li, hi, heads, d_k = _choose(model, kind, layer, head)
    out = produce(translator, sentence)
    queries = out.source_tokens if kind == "encoder" else out.output_tokens
    sequence = "the source" if kind == "encoder" else "the output"
    qi = check_index("position", position, len(queries), "token", sequence)
    captured, maps = _capture(translator, out, attn, model.layout.projections)
    keys = out.source_tokens if kind != "decoder" else out.inputs
    h = _recompute(model, attn, captured, kind, hi, qi, d_k)
    reported = {"cross": maps.cross, "encoder": maps.encoder, "decoder": maps.decoder}[kind]
    agree = torch.allclose(h.weights.float(), reported[0, li, hi, qi], atol=1e-5)
    if not agree or not torch.allclose(h.context, h.model_context, atol=1e-4):
        raise RuntimeError("explain's recomputation disagrees with the model's own numbers")
    read = out.source_tokens if kind == "encoder" else out.inputs
    what = f"query: position {qi + 1} {read[qi]!r}"
    if kind != "encoder":
        what += f", which predicts {out.output_tokens[qi]!r}"
    heading = f"{model.model_type} {KIND_NAMES[kind]}, layer {li + 1}, head {hi + 1}; {what}"
    keys = keys[: len(h.weights)]
    sections = _sections(model, kind, keys, h, heads, qi, captured)
    return Explanation(heading, sections, h.weights, keys, h.context, h.model_context)
