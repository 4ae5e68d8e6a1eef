"""`heedful explain` for an RNN: one step of Bahdanau or Luong attention (Luong et al. 2015's
notation): the encoder states h̄_s, the decoder state h_t, the scores under the model's own
formula, the softmax, the context c_t and [h_t; c_t] → tanh(W_c ·) → the predicted words.
"""

from __future__ import annotations

import torch

from heedful.layers.scores import SCORES
from heedful.models.pointer import pointer_mixture
from heedful.visualize.explanation import Explanation, Output, Section, at, first_rows, rows, vec
from heedful.visualize.trace import check_index


def _predicted(decoder, attentional, maps, ti: int, src) -> tuple[torch.Tensor, list[str]]:
    """p(y_t) over the vocabulary (V,), and for a pointer-generator the line that says how
    much of it was copied (See et al. 2017, eq. 9)."""
    logits = decoder.generator(attentional)  # (V,)
    if maps.p_gen is None:
        return logits.softmax(-1), []
    p_gen, weights = maps.p_gen[0, ti], maps.cross[0, 0, 0, ti]  # (), (S,)
    mixed = pointer_mixture(logits[None, None], p_gen.view(1, 1, 1), weights[None, None], src)
    return mixed[0, 0].softmax(-1), [  # renormalised as search reads it (luong-local-p)
        f"copy: p_gen = {float(p_gen):.4f}, p(w) = p_gen·softmax(W_o h̃_t)(w) + "
        "(1 − p_gen)·Σ a_t(s) over the source positions s holding w"
    ]


def _rnn_sections(translator, out: Output, ti: int, maps, states, top: int) -> list[Section]:
    decoder, source = translator.model.decoder, out.source_tokens
    h_t = maps.decoder_states[0, ti]  # (N,)
    scores = maps.scores[0, 0, 0, ti]  # (S,)
    weights = maps.cross[0, 0, 0, ti]  # (S,)
    context = maps.contexts[0, ti]  # (N,)
    combined = torch.cat([h_t, context])
    with torch.no_grad():
        attentional = torch.tanh(decoder.combine(combined))  # h̃_t = tanh(W_c [h_t; c_t])
        probs, copied = _predicted(decoder, attentional, maps, ti, out.src)
    best = probs.topk(min(top, probs.numel()))
    tgt = translator.tgt_tokenizer
    labels = [at("h̄", source, j) for j in range(len(source))]
    formula = SCORES[translator.config.decoder.attention].formula  # score(h_t, h̄_s)
    states_lines = rows(labels, [vec(states[j], 4) for j in range(len(source))])
    return [
        Section(
            "1. Encoder states h̄_s (one per source token)",
            [f"shape {tuple(states.shape)}", *first_rows(states_lines, len(source), "states")],
        ),
        Section(
            "2. Decoder state h_t = RNN(embedding(previous word), h_{t-1})",
            [
                f"previous word: {out.inputs[ti]!r}",
                f"h_t = {vec(h_t)}  (shape {tuple(h_t.shape)})",
            ],
        ),
        Section(
            f"3. Score of each encoder state: {formula}",
            rows(labels, [f"{v:+.4f}" for v in scores.tolist()]),
        ),
        Section(
            "4. Softmax → attention weights a_t(s)",
            [
                *rows(labels, [f"{v:.4f}" for v in weights.tolist()]),
                f"  sum = {float(weights.sum()):.4f}",
            ],
        ),
        Section(
            "5. Context c_t = Σ_s a_t(s) h̄_s",
            [f"c_t = {vec(context)}", f"check: Σ a·h̄ = {vec(weights @ states)}"],
        ),
        Section(
            "6. [h_t; c_t] → tanh(W_c [h_t; c_t]) → softmax(W_o ·)",
            [
                f"[h_t; c_t] = {vec(combined)}  (shape {tuple(combined.shape)})",
                f"h̃_t = {vec(attentional)}",
                *copied,
                "top predicted words:",
                *[
                    f"  {tgt.id_to_token(int(i))!r:<16} p = {float(p):.4f}"
                    for p, i in zip(best.values, best.indices)
                ],
            ],
        ),
    ]


def check_rnn_request(translator, kind: str, layer: int | None, head: int | None) -> None:
    """What an RNN cannot explain, refused before anything is translated."""
    config = translator.config
    if config.decoder.attention == "none":
        raise ValueError("this RNN has no attention (rnn-none): there is no computation to explain")
    if kind != "cross":
        raise ValueError(
            f"an RNN model has no {kind} self-attention: its one attention is the decoder's "
            "over the source; use kind 'cross' (--kind cross)"
        )
    for what, value in (("layer", layer), ("head", head)):
        if value is not None and value != 1:
            raise ValueError(
                f"{what} {value}: an RNN has one attention distribution per output step (no "
                f"layers or heads of attention to choose from); leave out {what} (--{what})"
            )


def explain_rnn(translator, out: Output, position: int, top: int) -> Explanation:
    ti = check_index("position", position, len(out.output_tokens), "token", "the output")
    maps = translator.replay(out.src, out.hypothesis).attention
    with torch.no_grad():
        states = translator.model.encode(out.src).states[0]  # (S, N)
    heading = (
        f"{SCORES[translator.config.decoder.attention].label} attention, output step {ti + 1}, "
        f"which reads {out.inputs[ti]!r} and predicts {out.output_tokens[ti]!r}"
    )
    sections = _rnn_sections(translator, out, ti, maps, states, top)
    weights, context = maps.cross[0, 0, 0, ti].double(), maps.contexts[0, ti].double()
    return Explanation(
        heading, sections, weights, list(out.source_tokens), weights @ states.double(), context
    )
