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
from heedful.data.tokenizers import EOS
from heedful.decoding import Hypothesis
from heedful.visualize.trace import check_index, check_kind


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


ATTENTION_NAMES = {  # config.attention -> how explain names it
    "bahdanau": "Bahdanau (additive)",
    "luong-dot": "Luong dot",
    "luong-general": "Luong general",
    "luong-concat": "Luong concat",
}
SCORE_FORMULAS = {  # config.attention -> score(h_t, h̄_s) (Bahdanau et al. 2015; Luong et al. 2015)
    "bahdanau": "vᵀ tanh(W_q h_t + W_k h̄_s)",
    "luong-dot": "h_tᵀ h̄_s",
    "luong-general": "h_tᵀ W_a h̄_s",
    "luong-concat": "v_aᵀ tanh(W_a [h_t; h̄_s])",
}
KIND_NAMES = {
    "cross": "cross-attention",
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
}


@dataclass
class _Output:
    """The greedy output explain looks into: src (1, S), the hypothesis, and the labels."""

    src: torch.Tensor
    hypothesis: Hypothesis
    source_tokens: list[str]
    output_tokens: list[str]  # T labels, </s> included when it finished


def _produce(translator, sentence: str) -> _Output:
    if not sentence.strip():
        raise ValueError("empty sentence: give some text to explain")
    src = pad([translator.src_tokenizer.encode(sentence)]).to(translator.device)  # (1, S)
    [[hyp]] = translator.search(src, num_beams=1, n_best=1)
    tgt = translator.tgt_tokenizer
    output_tokens = [tgt.id_to_token(i) for i in hyp.tokens] + ([EOS] if hyp.finished else [])
    return _Output(src, hyp, translator.src_tokenizer.tokens(sentence), output_tokens)


# ---------------------------------------------------------------------------------------------
# Transformer: one head of scaled dot-product attention (Vaswani et al. 2017, §3.2.1)
# ---------------------------------------------------------------------------------------------


@dataclass
class _Head:
    """One query of one head, recomputed from the projections the model's pass captured."""

    head: int  # 0-based
    query: int
    d_k: int
    keys: list[str]  # labels of the key positions
    captured: dict[str, tuple[torch.Tensor, torch.Tensor]]  # module -> (its input, its output)
    q: torch.Tensor  # (d_k,)
    k: torch.Tensor  # (keys, d_k)
    raw: torch.Tensor  # (keys,) q·k_j
    scaled: torch.Tensor  # (keys,) q·k_j / √d_k
    weights: torch.Tensor  # (keys,) the softmax
    context: torch.Tensor  # (d_k,) Σ_j weight_j · v_j


def _attention_module(model, kind: str, layer: int | None, head: int):
    """The MultiHeadAttention of `kind` in the chosen layer, with 0-based layer and head."""
    layers = model.encoder_layers if kind == "encoder" else model.decoder_layers
    where = "encoder" if kind == "encoder" else "decoder"
    layer = len(layers) if layer is None else layer
    li = check_index("layer", layer, len(layers), f"{where} layer")
    block = layers[li]
    mha = block.cross_attn if kind == "cross" else block.self_attn
    return mha, li, check_index("head", head, mha.num_heads, "head", "each layer")


def _replay_capturing(translator, out: _Output, mha, embed):
    """Translator.replay with forward hooks on the embedding and on W_Q, W_K, W_V: the model's
    own inputs and outputs of each, and its attention maps."""
    captured: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def keep(name):
        return lambda _module, args, output: captured.__setitem__(name, (args[0], output))

    modules = {"w_q": mha.w_q, "w_k": mha.w_k, "w_v": mha.w_v, "embed": embed}
    hooks = [module.register_forward_hook(keep(name)) for name, module in modules.items()]
    try:
        maps = translator.replay(out.src, out.hypothesis).attention
    finally:
        for hook in hooks:
            hook.remove()
    return captured, maps


def _recompute(captured, kind: str, head: int, query: int, d_k: int, keys: list[str]) -> _Head:
    """softmax(q·kᵀ / √d_k) and the weighted sum of V for one query of one head, from the
    projections the model computed."""
    cols = slice(head * d_k, (head + 1) * d_k)  # this head's slice of Q, K, V
    q = captured["w_q"][1][0, query, cols]  # (d_k,)
    k = captured["w_k"][1][0, :, cols]  # (keys, d_k)
    v = captured["w_v"][1][0, :, cols]  # (keys, d_k)
    raw = k @ q  # q·k_j for every key j
    scaled = raw / math.sqrt(d_k)
    allowed = torch.ones_like(scaled, dtype=torch.bool)
    if kind == "decoder":
        allowed[query + 1 :] = False  # causal: no looking ahead
    weights = torch.softmax(scaled.masked_fill(~allowed, float("-inf")), dim=0)
    keys = keys[: len(weights)]
    return _Head(head, query, d_k, keys, captured, q, k, raw, scaled, weights, weights @ v)


def _projection_sections(model, h: _Head, kind: str, inputs: list[str]) -> list[Section]:
    """Steps 1-2: the layer's input x, and this head's q, K and V."""
    token_ids, embedded = h.captured["embed"]
    query_in, q_all = h.captured["w_q"]
    key_in, k_all = h.captured["w_k"]
    v_all = h.captured["w_v"][1]
    scale, d_model = model.src_embed.scale, model.src_embed.tokens.embedding_dim
    first, qi = h.head * h.d_k, h.query
    return [
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
                f"Q = x W_Q: shape {tuple(q_all.shape[1:])}; head {h.head + 1} uses dimensions "
                f"{first}..{first + h.d_k - 1} (d_k = {h.d_k})",
                f"q = {_vec(h.q)}",
                f"K = {'memory' if kind == 'cross' else 'x'} W_K: shape {tuple(k_all.shape[1:])}; "
                f"V: shape {tuple(v_all.shape[1:])}; keys come from {len(key_in[0])} positions",
                *[
                    f"  k[{j + 1}] {h.keys[j]!r:<14} {_vec(h.k[j], 4)}"
                    for j in range(min(len(h.keys), 8))
                ],
            ],
        ),
    ]


def _score_sections(h: _Head, mha) -> list[Section]:
    """Steps 3-6: scores, scaling, softmax, weighted sum."""
    labels = [repr(t) for t in h.keys]
    return [
        Section("3. Scores q·kᵀ", _row(labels, h.raw)),
        Section(
            f"4. Scaled by √d_k = √{h.d_k} = {math.sqrt(h.d_k):.3f} "
            "(so the softmax does not saturate)",
            _row(labels, h.scaled),
        ),
        Section(
            "5. Softmax → attention weights (masked keys get 0; the row sums to 1)",
            [*_row(labels, h.weights, "{:.4f}"), f"  sum = {float(h.weights.sum()):.4f}"],
        ),
        Section(
            "6. Weighted sum of V → this head's output",
            [
                f"Σ_j weight_j · v_j = {_vec(h.context)}  (shape {tuple(h.context.shape)})",
                f"the {mha.num_heads} heads' outputs are concatenated and mixed by W_O into "
                f"the layer's {mha.d_model}-wide output",
            ],
        ),
    ]


def _explain_transformer(translator, out: _Output, kind, layer, head, position) -> Explanation:
    model = translator.model
    mha, li, hi = _attention_module(model, kind, layer, head)
    source, output = out.source_tokens, out.output_tokens
    inputs = ["<s>", *output[:-1]]  # what the decoder read: <s> y_1 .. y_{T-1}
    queries = source if kind == "encoder" else output
    keys = inputs if kind == "decoder" else source
    sequence = "the source" if kind == "encoder" else "the output"
    qi = check_index("position", position, len(queries), "token", sequence)
    embed = model.src_embed if kind == "encoder" else model.tgt_embed
    captured, maps = _replay_capturing(translator, out, mha, embed)
    h = _recompute(captured, kind, hi, qi, mha.d_head, keys)
    model_weights = {"cross": maps.cross, "encoder": maps.encoder, "decoder": maps.decoder}[kind]
    if not torch.allclose(h.weights, model_weights[0, li, hi, qi], atol=1e-5):
        raise RuntimeError("explain's recomputation disagrees with the model's weights")
    heading = f"{KIND_NAMES[kind]}, layer {li + 1}, head {hi + 1}, query {qi + 1} ({queries[qi]!r})"
    sections = _projection_sections(model, h, kind, source if kind == "encoder" else inputs)
    return Explanation(heading, sections + _score_sections(h, mha), h.weights, h.keys)


# ---------------------------------------------------------------------------------------------
# RNN: one step of Bahdanau or Luong attention (Luong et al. 2015's notation)
# ---------------------------------------------------------------------------------------------


def _rnn_sections(translator, out: _Output, ti: int, maps, states, top: int) -> list[Section]:
    decoder, source = translator.model.decoder, out.source_tokens
    h_t = maps.decoder_states[0, ti]  # (N,)
    scores = maps.scores[0, 0, 0, ti]  # (S,)
    weights = maps.cross[0, 0, 0, ti]  # (S,)
    context = maps.contexts[0, ti]  # (N,)
    combined = torch.cat([h_t, context])
    with torch.no_grad():
        attentional = torch.tanh(decoder.combine(combined))  # h̃_t = tanh(W_c [h_t; c_t])
        probs = decoder.generator(attentional).softmax(-1)
    best = probs.topk(min(top, probs.numel()))
    tgt = translator.tgt_tokenizer
    labels = [repr(t) for t in source]
    formula = SCORE_FORMULAS[translator.config.attention]
    return [
        Section(
            "1. Encoder states h̄_s (one per source token)",
            [
                f"shape {tuple(states.shape)}",
                *[
                    f"  h̄[{j + 1}] {source[j]!r:<14} {_vec(states[j], 4)}"
                    for j in range(min(len(source), 8))
                ],
            ],
        ),
        Section(
            "2. Decoder state h_t = RNN(embedding(previous word), h_{t-1})",
            [
                f"previous word: {(['<s>'] + out.output_tokens)[ti]!r}",
                f"h_t = {_vec(h_t)}  (shape {tuple(h_t.shape)})",
            ],
        ),
        Section(f"3. Score of each encoder state: {formula}", _row(labels, scores)),
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


def _explain_rnn(translator, out: _Output, position: int, top: int) -> Explanation:
    attention = translator.config.attention
    if attention == "none":
        raise ValueError("this RNN has no attention (rnn-none): there is no computation to explain")
    ti = check_index("position", position, len(out.output_tokens), "token", "the output")
    maps = translator.replay(out.src, out.hypothesis).attention
    with torch.no_grad():
        states = translator.model.encode(out.src).states[0]  # (S, N)
    heading = (
        f"{ATTENTION_NAMES[attention]} attention, output step {ti + 1} "
        f"(producing {out.output_tokens[ti]!r})"
    )
    sections = _rnn_sections(translator, out, ti, maps, states, top)
    return Explanation(heading, sections, maps.cross[0, 0, 0, ti], list(out.source_tokens))


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
    top: how many predicted words an RNN explanation lists.
    """
    check_kind(kind)
    out = _produce(translator, sentence)
    if translator.config.arch == "transformer":
        return _explain_transformer(translator, out, kind, layer, head, position)
    if kind != "cross":
        raise ValueError(f"an RNN model has no {kind} self-attention; explain kind 'cross'")
    return _explain_rnn(translator, out, position, top)
