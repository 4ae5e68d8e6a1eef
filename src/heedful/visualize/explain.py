"""`heedful explain`: one attention computation printed with the model's real numbers.

For a Transformer, one layer, head and query position: the layer's input x (embedding + positional
encoding in layer 1, the previous layer's output after that), this head's q, k_j and v_j, the
scores q·k_j, the scaling by √d_k, the mask, the softmax and weight_j × v_j summing to the head's
output. For an RNN: h_t, the score of each encoder state, the softmax, the context c_t, [h_t; c_t]
and the words it predicts. The numbers are captured from the model's own layers (forward hooks
during one teacher-forced pass over the produced output, Translator.replay), recomputed in float64
and checked against the weights and head output the model computed.

Positions count from 1 and a position's label is the token read there: a source token, or for the
decoder the token it reads at that step (<s>, y_1, ...), with the one it predicts in the heading.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from heedful.visualize.explain_rnn import check_rnn_request, explain_rnn
from heedful.visualize.explanation import (
    Explanation,
    Output,
    Section,
    at,
    first_rows,
    produce,
    replay_capturing,
    rows,
    vec,
)
from heedful.visualize.trace import check_index, check_kind

KIND_NAMES = {
    "cross": "cross-attention",
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
}


def _query_name(kind: str, out: Output, qi: int) -> str:
    if kind == "encoder":
        return f"query: source position {qi + 1} {out.source_tokens[qi]!r}"
    return (
        f"query: decoder position {qi + 1}, which reads {out.inputs[qi]!r} "
        f"and predicts {out.output_tokens[qi]!r}"
    )


# ---------------------------------------------------------------------------------------------
# Transformer: one head of scaled dot-product attention (Vaswani et al. 2017, §3.2.1)
# ---------------------------------------------------------------------------------------------


@dataclass
class _Head:
    """One query of one head, recomputed in float64 from what the model's pass captured."""

    head: int  # 0-based
    query: int  # 0-based
    d_k: int
    keys: list[str]  # labels of the key positions
    captured: dict[str, tuple[torch.Tensor, torch.Tensor]]  # part -> (its input, its output)
    allowed: torch.Tensor  # (keys,) bool, False where the mask hides the key
    q: torch.Tensor  # (d_k,)
    k: torch.Tensor  # (keys, d_k)
    v: torch.Tensor  # (keys, d_k)
    raw: torch.Tensor  # (keys,) q·k_j
    weights: torch.Tensor  # (keys,) softmax of the scaled, masked scores
    context: torch.Tensor  # (d_k,) Σ_j weight_j · v_j
    model_context: torch.Tensor  # (d_k,) this head's slice of what the model fed to W_O


def _attention_module(model, kind: str, layer: int | None, head: int | None):
    """The layer block and the MultiHeadAttention of `kind`, with 0-based layer and head."""
    layers = (model.encoder if kind == "encoder" else model.decoder).layers
    where = "encoder" if kind == "encoder" else "decoder"
    layer = len(layers) if layer is None else layer
    li = check_index("layer", layer, len(layers), f"{where} layer")
    block = layers[li]
    mha = block.cross_attn if kind == "cross" else block.self_attn
    hi = check_index("head", 1 if head is None else head, mha.num_heads, "head", "each layer")
    return block, mha, li, hi


def _recompute(captured, kind: str, mha, head: int, query: int, keys: list[str]) -> _Head:
    """softmax(q·kᵀ / √d_k) with the mask, and Σ_j weight_j v_j, for one query of one head,
    in float64 from the projections the model computed (captured by mha.parts' roles)."""
    cols, d_k = mha.head_columns(head), mha.d_head  # this head's slices of Q, K, V
    q = captured["q"][1][0, query, cols["q"]].double()  # (d_k,)
    k = captured["k"][1][0, :, cols["k"]].double()  # (keys, d_k)
    v = captured["v"][1][0, :, cols["v"]].double()  # (keys, d_k)
    raw = k @ q  # q·k_j for every key j
    allowed = torch.ones_like(raw, dtype=torch.bool)
    if kind == "decoder":
        allowed[query + 1 :] = False  # causal: position t may not look at j > t
    weights = torch.softmax((raw / math.sqrt(d_k)).masked_fill(~allowed, float("-inf")), dim=0)
    model_context = captured["o"][0][0, query, cols["q"]].double()  # W_O reads the heads
    return _Head(
        head,
        query,
        d_k,
        keys[: len(raw)],
        captured,
        allowed,
        q,
        k,
        v,
        raw,
        weights,
        weights @ v,
        model_context,
    )


def _input_section(model, kind: str, li: int, h: _Head, read: list[str]) -> Section:
    """Step 1: the layer's input x, and what the projections read of it."""
    x = h.captured["layer"][0][0]  # (positions, D)
    stack = "encoder" if kind == "encoder" else "decoder"
    embed = (model.encoder if kind == "encoder" else model.decoder).embed
    if li == 0:
        title = "1. The layer's input x: embeddings + positional encoding"
        what = (
            f"x_j = embedding(token_j) · √d_model (√{embed.tokens.embedding_dim} = "
            f"{embed.scale:.2f}) + PE(j)"
        )
    else:
        title = f"1. The layer's input x: the output of {stack} layer {li}"
        what = (
            f"x = the output of {stack} layer {li} (only layer 1 reads embeddings + "
            "positional encoding; each later layer reads the one before it)"
        )
    lines = [f"{what}; shape {tuple(x.shape)}", f"{at('x', read, h.query)} = {vec(x[h.query])}"]
    name, meaning = _what_q_reads(kind, _norm_first(model))
    if name != "x":
        q_in = h.captured["q"][0][0]  # (positions, D)
        lines += [meaning, f"{at(name, read, h.query)} = {vec(q_in[h.query])}"]
    return Section(title, lines)


def _norm_first(model) -> bool:
    """Pre-norm (True) or post-norm, the same in every layer of a model."""
    return model.encoder.layers[0].attn_block.norm_first


def _what_q_reads(kind: str, norm_first: bool) -> tuple[str, str]:
    """The name of what W_Q reads, and a line saying what it is and what K and V read."""
    if kind == "cross":
        h = "LayerNorm(x')" if norm_first else "LayerNorm(x + SelfAttention(x))"
        after = ", x' = x + SelfAttention(LayerNorm(x))" if norm_first else ""
        return "h", (
            f"cross-attention: Q reads h = {h}{after}, the output of this layer's self-attention "
            "sublayer; K and V read the encoder's output (memory), the same in every decoder layer"
        )
    if norm_first:
        return "LN(x)", "pre-norm (Xiong et al. 2020): Q, K and V read LN(x) = LayerNorm(x)"
    return "x", ""


def _projection_section(kind: str, h: _Head, mha, q_reads: str) -> Section:
    """Step 2: this head's q, and k_j, v_j of every key; q_reads names what W_Q reads."""
    first, d_kv = h.head * h.d_k, mha.parts()["k"].out_features
    wide = f"{mha.d_model} wide each"
    if d_kv != mha.d_model:  # grouped-query attention: fewer K and V heads
        wide = f"{mha.d_model}, {d_kv} and {d_kv} wide"
    source = "memory" if kind == "cross" else q_reads
    kv = [f"k = {vec(h.k[j], 4)}  v = {vec(h.v[j], 4)}" for j in range(len(h.keys))]
    labels = [at("k", h.keys, j) for j in range(len(h.keys))]
    return Section(
        "2. Queries, keys and values (learned projections, this head's slice)",
        [
            f"Q = {q_reads} W_Q, K = {source} W_K, V = {source} W_V: {wide}; head "
            f"{h.head + 1} of {mha.num_heads} uses dimensions {first}..{first + h.d_k - 1} "
            f"(d_k = {h.d_k})",
            *_grouped(h, mha),
            f"q = {vec(h.q)}",
            f"{len(h.keys)} keys, each with its value (first 4 dimensions):",
            *first_rows(rows(labels, kv), len(h.keys), "keys"),
        ],
    )


def _grouped(h: _Head, mha) -> list[str]:
    """Under grouped-query attention (Ainslie et al. 2023), whose K and V this head reads."""
    if mha.num_kv_heads == mha.num_heads:
        return []
    g, kv = mha.kv_head(h.head), mha.head_columns(h.head)["k"]
    group = [str(i + 1) for i in range(mha.num_heads) if mha.kv_head(i) == g]
    return [
        f"grouped-query attention: K and V have {mha.num_kv_heads} heads; this head reads "
        f"key/value head {g + 1}, dimensions {kv.start}..{kv.stop - 1} of K and V, the same "
        f"k_j and v_j as heads {', '.join(group)}"
    ]


def _masked(h: _Head, values: torch.Tensor, fmt: str, hidden: str) -> list[str]:
    labels = [at("k", h.keys, j) for j in range(len(h.keys))]
    cells = [fmt.format(v) if ok else hidden for v, ok in zip(values.tolist(), h.allowed)]
    return rows(labels, cells)


def _score_sections(h: _Head, mha) -> list[Section]:
    """Steps 3-6: scores, scaling and mask, softmax, weighted sum of the values."""
    scale, hidden = math.sqrt(h.d_k), int((~h.allowed).sum())
    mask_line = (
        [
            f"masked: the {hidden} future positions j > {h.query + 1} (the causal mask: the "
            "decoder may not look ahead) get −∞, so exp(−∞) = 0"
        ]
        if hidden
        else []
    )
    keep = [j for j in range(len(h.keys)) if h.allowed[j]]
    parts = [f"{float(h.weights[j]):.4f} × {vec(h.v[j], 4)}" for j in keep]
    return [
        Section("3. Scores q·k_j", _masked(h, h.raw, "{:+.4f}", "masked (future position)")),
        Section(
            f"4. Scaled by √d_k = √{h.d_k} = {scale:.3f} (so the softmax does not saturate), "
            "then the mask",
            [*mask_line, *_masked(h, h.raw / scale, "{:+.4f}", "−∞  (masked)")],
        ),
        Section(
            "5. Softmax → attention weights (the row sums to 1)",
            [
                *_masked(h, h.weights, "{:.4f}", "0       (masked)"),
                f"  sum = {float(h.weights.sum()):.4f}",
            ],
        ),
        Section(
            "6. Weighted sum of V → this head's output",
            [
                "weight_j × v_j (first 4 dimensions)"
                + (f"; the {hidden} masked keys add 0" if hidden else ""),
                *first_rows(rows([at("v", h.keys, j) for j in keep], parts), len(keep), "terms"),
                f"Σ_j weight_j · v_j = {vec(h.context)}  (shape {tuple(h.context.shape)})",
                f"the model's head output   {vec(h.model_context)}",
                f"the {mha.num_heads} heads' outputs are concatenated and mixed by W_O into "
                f"the layer's {mha.d_model}-wide attention output:",
                f"  {vec(h.captured['o'][1][0, h.query])}",
            ],
        ),
    ]


def _explain_transformer(translator, out: Output, kind, chosen, position) -> Explanation:
    model, (block, mha, li, hi) = translator.model, chosen
    queries = out.source_tokens if kind == "encoder" else out.output_tokens
    sequence = "the source" if kind == "encoder" else "the output"
    qi = check_index("position", position, len(queries), "token", sequence)
    captured, maps = replay_capturing(translator, out, {"layer": block, **mha.parts()})
    read = out.source_tokens if kind == "encoder" else out.inputs  # the token at each position
    h = _recompute(captured, kind, mha, hi, qi, read if kind != "cross" else out.source_tokens)
    model_weights = {"cross": maps.cross, "encoder": maps.encoder, "decoder": maps.decoder}[kind]
    agree = torch.allclose(h.weights.float(), model_weights[0, li, hi, qi], atol=1e-5)
    if not agree or not torch.allclose(h.context, h.model_context, atol=1e-4):
        raise RuntimeError("explain's recomputation disagrees with the model's own numbers")
    heading = f"{KIND_NAMES[kind]}, layer {li + 1}, head {hi + 1}; {_query_name(kind, out, qi)}"
    q_reads = _what_q_reads(kind, _norm_first(model))[0]
    sections = [
        _input_section(model, kind, li, h, read),
        _projection_section(kind, h, mha, q_reads),
    ]
    return Explanation(
        heading, sections + _score_sections(h, mha), h.weights, h.keys, h.context, h.model_context
    )


def explain(
    translator,
    sentence: str,
    layer: int | None = None,
    head: int | None = None,
    position: int = 1,
    kind: str = "cross",
    top: int = 5,
    target: str | None = None,
    source: str | None = None,
) -> Explanation:
    """Explain one attention computation of `translator`'s model on `sentence`.

    kind: "cross" (an output position attending over the source), "encoder" or "decoder"
    self-attention (Transformer only). layer/head/position count from 1; layer defaults to the
    last one, head to the first (an RNN has neither: leave them out); position is the query: an
    output step (cross, decoder) or a source token (encoder).
    top: how many predicted words an RNN explanation lists. target, source: the language pair
    (build_trace's): a <2de> the sentence starts with is text, never the target.
    """
    check_kind(kind)  # what the model lacks is refused before translating
    [sentence] = translator.sources([sentence], target, source)
    if getattr(translator.model, "hf_model_type", None):  # a Hugging Face model (heedful.hf)
        from heedful.visualize.explain_hf import explain_hf

        return explain_hf(translator, sentence, layer, head, position, kind)
    if translator.config.arch != "transformer":
        check_rnn_request(translator, kind, layer, head)
        return explain_rnn(translator, produce(translator, sentence), position, top)
    chosen = _attention_module(translator.model, kind, layer, head)
    return _explain_transformer(translator, produce(translator, sentence), kind, chosen, position)
