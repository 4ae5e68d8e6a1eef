"""`heedful explain`: one attention computation printed with the model's real numbers.

For a Transformer, one layer, head and query position: the embeddings plus positional encoding,
Q, K and V, the scores QKᵀ, the scaling by √d_k, the softmax and the weighted sum of V. For an
RNN: h_t, the score of each encoder state, the softmax, the context c_t, [h_t; c_t] and the
words it predicts. The numbers are captured from the model's own layers (forward hooks on the
projections during one teacher-forced pass over the produced output), and the weights are
checked against the ones the model returns, so what is printed is what the model computed.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

import torch

from heedful.data.batching import pad
from heedful.data.tokenizers import BOS_ID, EOS, EOS_ID


@dataclass
class Section:
    title: str
    lines: list[str] = field(default_factory=list)


@dataclass
class Explanation:
    """What explain computed: sections of text, and the softmax weights it printed."""

    heading: str
    sections: list[Section]
    weights: torch.Tensor  # (keys,) the attention distribution explained
    keys: list[str]  # labels of the keys (source or output tokens)

    def text(self) -> str:
        out = [self.heading, "=" * min(len(self.heading), 100)]
        for s in self.sections:
            out += ["", f"## {s.title}", *s.lines]
        return "\n".join(out) + "\n"

    def html(self) -> str:
        body = "".join(
            f"<section><h2>{html.escape(s.title)}</h2><pre>{html.escape(chr(10).join(s.lines))}</pre></section>"
            for s in self.sections
        )
        return (
            "<!doctype html><html><head><meta charset='utf-8'><title>heedful explain</title>"
            "<style>body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;"
            "padding:0 1rem;color:#222}pre{background:#f6f6f6;padding:.8rem;overflow-x:auto}"
            "h1{font-size:1.3rem}h2{font-size:1.05rem;margin-top:1.6rem}</style></head><body>"
            f"<h1>{html.escape(self.heading)}</h1>{body}</body></html>"
        )


def _vec(x: torch.Tensor, n: int = 6) -> str:
    values = ", ".join(f"{v:+.4f}" for v in x.flatten()[:n].tolist())
    more = ", …" if x.numel() > n else ""
    return f"[{values}{more}]"


def _row(labels: list[str], values: torch.Tensor, fmt: str = "{:+.4f}") -> list[str]:
    width = max((len(label) for label in labels), default=1)
    return [f"  {label:<{width}}  {fmt.format(v)}" for label, v in zip(labels, values.tolist())]


def _check_index(name: str, value: int, size: int, what: str) -> int:
    if not 1 <= value <= size:
        raise ValueError(f"{name} {value} out of range: {what} has {size} (counting from 1)")
    return value - 1


def _produce(translator, sentence: str):
    """Greedy output for `sentence`: src (1, S), tgt_in (1, T), source and output labels, ids."""
    from heedful.decoding import greedy_search

    if not sentence.strip():
        raise ValueError("empty sentence: give some text to explain")
    g = translator.generation
    src = pad([translator.src_tokenizer.encode(sentence)]).to(translator.device)
    [hyp] = greedy_search(
        translator.model, src, BOS_ID, EOS_ID, g.max_len_ratio, g.max_len_offset, False
    )
    produced = hyp.tokens + ([EOS_ID] if hyp.finished else [])
    tgt_in = torch.tensor([[BOS_ID, *produced[:-1]]], device=translator.device)
    source_tokens = translator.src_tokenizer.tokens(sentence)
    output_tokens = [translator.tgt_tokenizer.id_to_token(i) for i in hyp.tokens]
    output_tokens += [EOS] if hyp.finished else []
    return src, tgt_in, source_tokens, output_tokens, produced


def explain(
    translator,
    sentence: str,
    layer: int | None = None,
    head: int = 1,
    position: int = 1,
    kind: str = "cross",
    top: int = 5,
) -> Explanation:
    """Explain one attention computation of `translator`'s model on `sentence`.

    kind: "cross" (an output position attending over the source), "encoder" or "decoder"
    self-attention (Transformer only). layer/head/position count from 1; layer defaults to the
    last one; position is the query: an output step (cross, decoder) or a source token (encoder).
    """
    if kind not in ("cross", "encoder", "decoder"):
        raise ValueError(f"kind must be cross, encoder or decoder, not {kind!r}")
    src, tgt_in, source_tokens, output_tokens, produced = _produce(translator, sentence)
    model = translator.model
    if hasattr(model, "decoder_layers"):
        return _explain_transformer(
            model, src, tgt_in, source_tokens, output_tokens, layer, head, position, kind
        )
    if kind != "cross":
        raise ValueError(f"an RNN model has no {kind} self-attention; explain kind 'cross'")
    return _explain_rnn(translator, src, tgt_in, source_tokens, output_tokens, position, top)


def _explain_transformer(
    model, src, tgt_in, source_tokens, output_tokens, layer, head, position, kind
):
    layers = model.encoder_layers if kind == "encoder" else model.decoder_layers
    where = "encoder" if kind == "encoder" else "decoder"
    li = _check_index("layer", len(layers) if layer is None else layer, len(layers), f"the {where}")
    block = layers[li]
    mha = block.self_attn if kind != "cross" else block.cross_attn
    hi = _check_index("head", head, mha.num_heads, "each layer")
    queries = source_tokens if kind == "encoder" else output_tokens
    # Decoder self-attention looks at the decoder's inputs: <s> y_1 .. y_{T-1}.
    keys = source_tokens if kind != "decoder" else ["<s>", *output_tokens[:-1]]
    qi = _check_index("position", position, len(queries), "the query sequence")

    captured: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    hooks = [
        getattr(mha, name).register_forward_hook(
            lambda _m, args, out, name=name: captured.__setitem__(name, (args[0], out))
        )
        for name in ("w_q", "w_k", "w_v")
    ]
    embed = model.src_embed if kind == "encoder" else model.tgt_embed
    hooks.append(
        embed.register_forward_hook(
            lambda _m, args, out: captured.__setitem__("embed", (args[0], out))
        )
    )
    try:
        with torch.no_grad():
            out = model(src, tgt_in, need_weights=True)
    finally:
        for h in hooks:
            h.remove()
    maps = {
        "cross": out.attention.cross,
        "encoder": out.attention.encoder,
        "decoder": out.attention.decoder,
    }
    model_weights = maps[kind][0, li, hi, qi]  # (keys,)

    d_k = mha.d_head
    cols = slice(hi * d_k, (hi + 1) * d_k)
    query_in, q_all = captured["w_q"]
    key_in, k_all = captured["w_k"]
    _, v_all = captured["w_v"]
    q = q_all[0, qi, cols]  # (d_k,)
    k = k_all[0, :, cols]  # (keys, d_k)
    v = v_all[0, :, cols]  # (keys, d_k)
    raw = k @ q  # q·k_j for every key j
    scaled = raw / math.sqrt(d_k)
    allowed = torch.ones_like(scaled, dtype=torch.bool)
    if kind == "decoder":
        allowed[qi + 1 :] = False  # causal: no looking ahead
    allowed &= torch.tensor([t != "<pad>" for t in keys] + [True] * (len(scaled) - len(keys)))[
        : len(scaled)
    ]
    weights = torch.softmax(scaled.masked_fill(~allowed, float("-inf")), dim=0)
    context = weights @ v
    if not torch.allclose(weights, model_weights, atol=1e-5):
        raise RuntimeError("explain's recomputation disagrees with the model's weights")
    keys = keys[: len(weights)]

    token_ids, embedded = captured["embed"]
    name = {
        "cross": "cross-attention",
        "encoder": "encoder self-attention",
        "decoder": "decoder self-attention",
    }[kind]
    heading = f"{name}, layer {li + 1}, head {hi + 1}, query {qi + 1} ({queries[qi]!r})"
    scale, d_model = model.src_embed.scale, model.src_embed.tokens.embedding_dim
    inputs = source_tokens if kind == "encoder" else ["<s>", *output_tokens[:-1]]
    sections = [
        Section(
            "1. Embeddings + positional encoding",
            [
                f"{len(token_ids[0])} input tokens; x = embedding · √d_model "
                f"(√{d_model} = {scale:.2f}) + PE, shape {tuple(embedded.shape[1:])}",
                f"x[{qi + 1}] ({inputs[qi]!r}) = {_vec(embedded[0, qi])}",
            ],
        ),
        Section(
            "2. Queries, keys and values (learned projections, this head's slice)",
            [
                f"the layer's input at the query position: {_vec(query_in[0, qi])}",
                f"Q = x W_Q: shape {tuple(q_all.shape[1:])}; head {hi + 1} uses dimensions "
                f"{cols.start}..{cols.stop - 1} (d_k = {d_k})",
                f"q = {_vec(q)}",
                f"K = {'memory' if kind == 'cross' else 'x'} W_K: shape {tuple(k_all.shape[1:])}; "
                f"V: shape {tuple(v_all.shape[1:])}; keys come from {len(key_in[0])} positions",
                *[
                    f"  k[{j + 1}] {keys[j]!r:<14} {_vec(k[j], 4)}"
                    for j in range(min(len(keys), 8))
                ],
            ],
        ),
        Section("3. Scores q·kᵀ", _row([repr(t) for t in keys], raw)),
        Section(
            f"4. Scaled by √d_k = √{d_k} = {math.sqrt(d_k):.3f} (so the softmax does not saturate)",
            _row([repr(t) for t in keys], scaled),
        ),
        Section(
            "5. Softmax → attention weights (masked keys get 0; the row sums to 1)",
            [
                *_row([repr(t) for t in keys], weights, "{:.4f}"),
                f"  sum = {float(weights.sum()):.4f}",
            ],
        ),
        Section(
            "6. Weighted sum of V → this head's output",
            [
                f"Σ_j weight_j · v_j = {_vec(context)}  (shape {tuple(context.shape)})",
                f"the {mha.num_heads} heads' outputs are concatenated and mixed by W_O into "
                f"the layer's {mha.d_model}-wide output",
            ],
        ),
    ]
    return Explanation(heading, sections, weights, keys)


def _explain_rnn(translator, src, tgt_in, source_tokens, output_tokens, position, top):
    model = translator.model
    decoder = model.decoder
    if decoder.attention is None:
        raise ValueError("this RNN has no attention (rnn-none): there is no computation to explain")
    ti = _check_index("position", position, len(output_tokens), "the output")
    with torch.no_grad():
        out = model(src, tgt_in, need_weights=True)
        memory = model.encode(src)
    maps = out.attention
    h_t = maps.decoder_states[0, ti]  # (N,)
    scores = maps.scores[0, 0, 0, ti]  # (S,)
    weights = maps.cross[0, 0, 0, ti]  # (S,)
    context = maps.contexts[0, ti]  # (N,)
    states = memory.states[0]  # (S, N)
    combined = torch.cat([h_t, context])
    with torch.no_grad():
        attentional = torch.tanh(decoder.combine(combined))  # h̃_t = tanh(W_c [h_t; c_t])
        probs = decoder.generator(attentional).softmax(-1)
    best = probs.topk(min(top, probs.numel()))
    tgt = translator.tgt_tokenizer
    kind = model_attention_name(decoder.attention)
    labels = [repr(t) for t in source_tokens]
    heading = f"{kind} attention, output step {ti + 1} (producing {output_tokens[ti]!r})"
    sections = [
        Section(
            "1. Encoder states h̄_s (one per source token)",
            [
                f"shape {tuple(states.shape)}",
                *[
                    f"  h̄[{j + 1}] {source_tokens[j]!r:<14} {_vec(states[j], 4)}"
                    for j in range(min(len(source_tokens), 8))
                ],
            ],
        ),
        Section(
            "2. Decoder state h_t = RNN(embedding(previous word), h_{t-1})",
            [
                f"previous word: {(['<s>'] + output_tokens)[ti]!r}",
                f"h_t = {_vec(h_t)}  (shape {tuple(h_t.shape)})",
            ],
        ),
        Section(f"3. Score of each encoder state: {score_formula(kind)}", _row(labels, scores)),
        Section(
            "4. Softmax → attention weights a_t(s)",
            [*_row(labels, weights, "{:.4f}"), f"  sum = {float(weights.sum()):.4f}"],
        ),
        Section(
            "5. Context c_t = Σ_s a_t(s) h̄_s",
            [f"c_t = {_vec(context)}", f"check: Σ a·h̄ = {_vec(weights @ states)}"],
        ),
        Section(
            "6. [h_t; c_t] → tanh(W_c [h_t; c_t]) → softmax(W_o ·)",
            [
                f"[h_t; c_t] = {_vec(combined)}  (shape {tuple(combined.shape)})",
                f"h̃_t = {_vec(attentional)}",
                "top predicted words:",
                *[
                    f"  {tgt.id_to_token(int(i))!r:<16} p = {float(p):.4f}"
                    for p, i in zip(best.values, best.indices)
                ],
            ],
        ),
    ]
    return Explanation(heading, sections, weights, list(source_tokens))


def model_attention_name(attention) -> str:
    kind = getattr(attention, "kind", None)
    return f"Luong {kind}" if kind else "Bahdanau (additive)"


def score_formula(kind: str) -> str:
    return {
        "Bahdanau (additive)": "vᵀ tanh(W_q h_t + W_k h̄_s)",
        "Luong dot": "h_tᵀ h̄_s",
        "Luong general": "h_tᵀ W_a h̄_s",
        "Luong concat": "v_aᵀ tanh(W_a [h_t; h̄_s])",
    }[kind]
