"""What a trace's calculation panels need besides the weights (docs/trace-schema.md, "internals").

A Transformer's per-head queries, keys and values, and an RNN's encoder states, attentional
states and the parts of its score, read off the model with forward hooks during
Translator.replay, so the numbers are the ones the model computed, never a second
implementation of it. They are bounded: a trace holds them only while they stay under
INTERNALS_MAX_NUMBERS numbers (internals_size), about 1 MB of JSON.

Shapes: S source tokens, T output tokens, L layers, H heads, d_k = D / H, N RNN hidden size,
A the size of an additive score's hidden layer (= N here).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn

# Numbers of internals a trace may hold (all hypotheses together), about 1 MB of JSON: a
# d_model 64, 2+2-layer Transformer keeps them for 40 source and 40 output tokens (46,080).
INTERNALS_MAX_NUMBERS = 100_000


def internals_size(config, source_length: int, output_lengths: list[int]) -> int:
    """How many numbers the internals of a trace take: S = source_length and one T per
    hypothesis (docs/trace-schema.md lists them)."""
    s, total_t = source_length, sum(output_lengths)
    if config.arch == "transformer":
        d = config.d_model  # H heads × d_k
        shared = (3 * config.encoder_layers + 2 * config.decoder_layers) * s * d
        return shared + 4 * config.decoder_layers * total_t * d  # decoder q, k, v and cross q
    n = config.hidden_size
    if config.attention == "none":
        return s * n + total_t * n  # h̄_s and h̃_t
    return 2 * s * n + n + 2 * total_t * n  # h̄_s, score keys, v; h̃_t, score queries


def _attention_modules(model: nn.Module) -> dict[str, nn.Module]:
    """The Transformer's attentions by the trace's names: encoder, decoder, cross."""
    return {
        "encoder": [layer.self_attn for layer in model.encoder_layers],
        "decoder": [layer.self_attn for layer in model.decoder_layers],
        "cross": [layer.cross_attn for layer in model.decoder_layers],
    }


@contextmanager
def recording(model: nn.Module) -> Iterator[dict]:
    """Within the block, every projection the model runs is kept in the yielded dict:
    Transformer ("encoder" | "decoder" | "cross", layer, "q" | "k" | "v") -> (1, H, L, d_k);
    RNN "encoder" -> (1, S, N) and "combine" -> the W_c [h_t; c_t] of each call (1, t, N)."""
    captured: dict = {}
    handles = []

    def keep(key, split=None):
        def hook(module, inputs, output):
            value = output[0] if isinstance(output, tuple) else output
            captured.setdefault(key, []).append(split(value) if split else value)

        return hook

    if model.config.arch == "transformer":
        for kind, modules in _attention_modules(model).items():
            for layer, attn in enumerate(modules):
                for name in ("q", "k", "v"):
                    linear = getattr(attn, "w_" + name)
                    hook = keep((kind, layer, name), attn.split_heads)
                    handles.append(linear.register_forward_hook(hook))
    else:
        handles.append(model.encoder.register_forward_hook(keep("encoder")))
        handles.append(model.decoder.combine.register_forward_hook(keep("combine")))
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def _rounded(x: torch.Tensor | None, decimals: int) -> list | None:
    return None if x is None else x.double().round(decimals=decimals).tolist()


def transformer_internals(captured: dict, decimals: int) -> tuple[dict, dict]:
    """(shared, per hypothesis): encoder q, k, v and cross k, v [L][H][S][d_k], the same for
    every hypothesis; decoder q, k, v and cross q [L][H][T][d_k] of this one."""
    import torch

    def stack(kind, name):  # per layer (1, H, len, d_k) -> (L, H, len, d_k)
        layers = sorted(layer for k, layer, n in captured if k == kind and n == name)
        return _rounded(torch.cat([captured[(kind, i, name)][0] for i in layers]), decimals)

    shared = {
        "encoder": {name: stack("encoder", name) for name in ("q", "k", "v")},
        "cross": {name: stack("cross", name) for name in ("k", "v")},
    }
    own = {
        "decoder": {name: stack("decoder", name) for name in ("q", "k", "v")},
        "cross": {"q": stack("cross", "q")},
    }
    return shared, own


def _weight(linear: nn.Module) -> torch.Tensor:
    """A Linear's weight, also of an int8 one (whose .weight() is a quantized tensor)."""
    weight = linear.weight
    return weight().dequantize() if callable(weight) else weight


def _score_parts(attention: nn.Module, states: torch.Tensor, queries: torch.Tensor):
    """(keys (S, A) or None, query parts (T, A) or None, v (A) or None) such that the score is
    h_t · keys_s (dot: keys are h̄_s themselves; general: W_a h̄_s) or vᵀ tanh(q_t + keys_s)
    (Bahdanau: W_q h_t + W_k h̄_s; Luong concat: W_a [h_t; h̄_s] split in two)."""
    import torch.nn.functional as F

    kind = getattr(attention, "kind", "bahdanau")
    if kind == "dot":
        return None, None, None
    keys = attention.prepare_keys(states)
    if kind == "general":
        return keys, None, None
    if kind == "concat":
        n = attention.query_size
        return keys, F.linear(queries, _weight(attention.w_a)[:, :n]), _weight(attention.v_a)[0]
    return keys, attention.w_q(queries), _weight(attention.v)[0]


def rnn_internals(captured: dict, model: nn.Module, maps, decimals: int) -> tuple[dict, dict]:
    """(shared, per hypothesis): encoder states h̄_s [S][N] and the score's key parts; this
    hypothesis's attentional states h̃_t = tanh(W_c [h_t; c_t]) [T][N] and query parts."""
    import torch

    states = captured["encoder"][0][0]  # (S, N)
    attentional = torch.tanh(torch.cat(captured["combine"], dim=1)[0])  # (T, N)
    shared = {"encoder_states": _rounded(states, decimals), "score_keys": None, "score_v": None}
    own = {"attentional": _rounded(attentional, decimals), "score_queries": None}
    if model.decoder.attention is not None:
        parts = _score_parts(model.decoder.attention, states, maps.decoder_states[0])
        keys, queries, v = (_rounded(p, decimals) for p in parts)
        shared.update(score_keys=keys, score_v=v)
        own["score_queries"] = queries
    return shared, own
