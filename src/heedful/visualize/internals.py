"""What a trace's calculation panels need besides the weights (docs/trace-schema.md, "internals").

A Transformer's per-head queries, keys and values, and an RNN's encoder states, attentional
states and the parts of its score, read off the model with forward hooks during
Translator.replay, so the numbers are the ones the model computed, never a second
implementation of it. They are bounded: a trace holds them only while they stay under
INTERNALS_MAX_NUMBERS numbers (internals_size), about 1 MB of JSON.

Shapes: S source tokens, T output tokens, L layers, H heads, d_k = D / H, N RNN hidden size,
A the size of an additive score's hidden layer (= N here), E an RNN's embedding size (= D).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from heedful.data.tokenizers import EOS_ID

if TYPE_CHECKING:
    import torch
    from torch import nn

DECIMALS = 5  # a trace's rounding: small files, and still 1e-5 from the model's numbers
# Numbers of internals a trace may hold (all hypotheses together), about 1.3 MB of JSON: a
# d_model 64, 2+2-layer Transformer keeps them for 40 source and 40 output tokens (120,321, of
# which 51,200 the drawn encoder block and 23,040 what the decoder's W_Q and W_O read).
INTERNALS_MAX_NUMBERS = 125_000
# Positions of the positional encoding a trace holds (internals.block.positional): at least this
# many, so its per-dimension curves show a shape, and at least the source's.
PE_POSITIONS = 32
# What internals.block holds of each encoder layer, each (S, D): the layer's input, the input
# of W_O (the heads' z side by side), W_O's output, the first LayerNorm's input and output, the
# feed-forward's output, the second LayerNorm's input and output, the layer's output.
BLOCK_TENSORS = (
    "x", "z", "attn_out", "attn_norm_in", "attn_norm_out", "ff_out", "ff_norm_in", "ff_norm_out",
    "out",
)  # fmt: skip


def pe_positions(config, source_length: int) -> int:
    """How many rows of the positional encoding internals.block.positional holds."""
    return min(max(source_length, PE_POSITIONS), config.max_positions)


def internals_size(config, source_length: int, output_lengths: list[int]) -> int:
    """How many numbers the internals of a trace take: S = source_length and one T per
    hypothesis (docs/trace-schema.md lists them)."""
    s, total_t = source_length, sum(output_lengths)
    if config.arch == "transformer":
        d = config.d_model  # H heads × d_k
        d_kv = d // config.num_heads * (config.num_kv_heads or config.num_heads)  # H_kv × d_k
        shared = (config.encoder.layers * (d + 2 * d_kv) + config.decoder.layers * 2 * d_kv) * s
        block = (len(BLOCK_TENSORS) * config.encoder.layers + 1) * s * d  # + embedding rows
        shared += block + pe_positions(config, s) * d + 1  # + the scale √D
        shared += s * d  # cross.memory, what every cross-attention's W_K and W_V read
        per_t = 2 * (d + d_kv) + 4 * d  # dec q, k, v; cross q; dec and cross x and z
        return shared + config.decoder.layers * total_t * per_t
    n, e = config.hidden_size, config.d_model  # build.py: embed_size = d_model
    embeddings = s * e + total_t * e  # encoder_inputs, decoder_inputs
    start = 2 * n  # encoder_final, decoder_start: the bridge's input and output
    if config.decoder.attention == "none":
        return embeddings + start + s * n + total_t * n  # h̄_s and h̃_t
    return embeddings + start + 2 * s * n + n + 2 * total_t * n  # h̄_s, keys, v; h̃_t, queries


def _attention_modules(model: nn.Module) -> dict[str, nn.Module]:
    """The Transformer's attentions by the trace's names: encoder, decoder, cross."""
    return {
        "encoder": [layer.self_attn for layer in model.encoder.layers],
        "decoder": [layer.self_attn for layer in model.decoder.layers],
        "cross": [layer.cross_attn for layer in model.decoder.layers],
    }


def _first_input(inputs, output):
    return inputs[0]


def _first_output(inputs, output):
    return output[0] if isinstance(output, tuple) else output


def _keeper(captured: dict):
    """keep(key, take): a forward hook appending take(inputs, output) to captured[key] at
    every call (take defaults to the module's output)."""

    def keep(key, take=_first_output):
        def hook(module, inputs, output):
            captured.setdefault(key, []).append(take(inputs, output))

        return hook

    return keep


@contextmanager
def recording(model: nn.Module) -> Iterator[dict]:
    """Within the block, every projection the model runs is kept in the yielded dict:
    Transformer ("encoder" | "decoder" | "cross", layer, "q" | "k" | "v") -> (1, H, L, d_k)
    (k, v: H_kv heads), ("decoder" | "cross", layer, "x" | "z") -> (1, T, D) what W_Q reads
    and what W_O reads (the heads' outputs side by side), ("cross", 0, "memory") -> (1, S, D)
    what cross-attention's W_K and W_V read and, for grouped-query attention,
    ("kv", None, "heads") -> [H] the K, V head each head reads;
    RNN "encoder" -> (1, S, N), "combine" -> the W_c [h_t; c_t] of each call (1, t, N),
    "encoder_inputs" / "decoder_inputs" -> the embedding rows the two RNNs read (1, S or T, E)
    and "bridge" -> (h_final, W_s h_final + b_s) (layers, 1, N) each, the decoder's start."""
    captured: dict = {}
    keep = _keeper(captured)
    handles = []
    if model.config.arch == "transformer":
        attn = model.decoder.layers[0].self_attn  # every attention of a model groups alike
        if attn.num_kv_heads != attn.num_heads:
            captured[("kv", None, "heads")] = [attn.kv_head(h) for h in range(attn.num_heads)]
        for kind, modules in _attention_modules(model).items():
            for layer, attn in enumerate(modules):
                handles += _attention_hooks(keep, kind, layer, attn)
        handles += _block_hooks(model, captured)
    else:
        handles.append(model.encoder.register_forward_hook(keep("encoder", _states)))
        handles.append(model.decoder.combine.register_forward_hook(keep("combine")))
        bridge = keep("bridge", lambda inputs, output: (inputs[0], output))
        handles.append(model.decoder.bridge.register_forward_hook(bridge))
        for side in ("encoder", "decoder"):
            embedding = getattr(model, side).embedding
            handles.append(embedding.register_forward_hook(keep(side + "_inputs")))
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def _states(inputs, memory) -> torch.Tensor:
    """The encoder states h̄_s (1, S, N) of the memory an RNN encoder returns."""
    return memory.states


def _attention_hooks(keep, kind: str, layer: int, attn: nn.Module) -> list:
    """One attention's hooks, on the parts it declares (MultiHeadAttention.parts): its Q, K, V
    split into heads and, outside the encoder (whose block keeps them), the inputs of W_Q and
    W_O; cross-attention's first layer also keeps the memory its W_K reads."""
    handles = []
    for name, linear in attn.parts("q", "k", "v").items():
        split = keep((kind, layer, name), lambda i, o: attn.split_heads(_first_output(i, o)))
        handles.append(linear.register_forward_hook(split))
    if kind == "encoder":
        return handles
    w_q, w_k, w_o = attn.parts("q", "k", "o").values()
    handles.append(w_q.register_forward_hook(keep((kind, layer, "x"), _first_input)))
    handles.append(w_o.register_forward_hook(keep((kind, layer, "z"), _first_input)))
    if kind == "cross" and layer == 0:  # every layer's W_K reads the same memory
        handles.append(w_k.register_forward_hook(keep(("cross", 0, "memory"), _first_input)))
    return handles


def _block_hooks(model: nn.Module, captured: dict) -> list:
    """Hooks keeping what the drawn encoder block shows: ("block", layer, name) -> (1, S, D)
    for the names of BLOCK_TENSORS, and ("block", None, "tokens") the unscaled embedding rows."""
    keep = _keeper(captured)
    embed = model.encoder.embed
    handles = [embed.tokens.register_forward_hook(keep(("block", None, "tokens"), _first_output))]
    for i, layer in enumerate(model.encoder.layers):
        w_o = layer.self_attn.parts()["o"]  # reads the heads side by side, writes the output
        watched = {  # name -> (module, which end of it)
            "x": (layer, _first_input),
            "out": (layer, _first_output),
            "z": (w_o, _first_input),
            "attn_out": (w_o, _first_output),
            "attn_norm_in": (layer.attn_block.norm, _first_input),
            "attn_norm_out": (layer.attn_block.norm, _first_output),
            "ff_out": (layer.feed_forward, _first_output),
            "ff_norm_in": (layer.ff_block.norm, _first_input),
            "ff_norm_out": (layer.ff_block.norm, _first_output),
        }
        for name, (module, take) in watched.items():
            handles.append(module.register_forward_hook(keep(("block", i, name), take)))
    return handles


def block_internals(captured: dict, model: nn.Module, decimals: int) -> dict:
    """internals.block (docs/trace-schema.md): one encoder pass's tensors for the source
    positions, per layer [S][D] each, the unscaled embedding rows [S][D] and the positional
    encoding the model adds [P][D] (P = pe_positions), read by running its own module on zeros."""
    import torch

    config = model.config
    tokens = captured[("block", None, "tokens")][0][0]  # (S, D)
    s, d = tokens.shape
    zeros = torch.zeros(1, pe_positions(config, s), d, device=tokens.device, dtype=tokens.dtype)
    layers = [
        {name: rounded(captured[("block", i, name)][0][0], decimals) for name in BLOCK_TENSORS}
        for i in range(len(model.encoder.layers))
    ]
    embed = model.encoder.embed
    return {
        "norm": "pre" if config.norm == "pre" else "post",
        "scale": round(embed.scale, 12),
        "tokens": rounded(tokens, decimals),
        "positional": rounded(embed.positions(zeros)[0], decimals),
        "layers": layers,
    }


def rounded(x: torch.Tensor | None, decimals: int = DECIMALS) -> list | None:
    """Nested lists of floats rounded to `decimals` (float64 first, so they print short): how
    every number of a trace is written."""
    return None if x is None else x.double().round(decimals=decimals).tolist()


def transformer_internals(captured: dict, decimals: int) -> tuple[dict, dict]:
    """(shared, per hypothesis): encoder q, k, v and cross k, v [L][H][S][d_k] and the memory
    cross-attention's W_K and W_V read [S][D], the same for every hypothesis; this one's
    decoder q, k, v and cross q [L][H][T][d_k], and for both what W_Q read (x) and what W_O
    read (z, the heads' outputs side by side) [L][T][D]. With grouped-query attention k and v
    have H_kv heads and shared "kv_heads" [H] says which one each head reads."""
    import torch

    def stack(kind, name):  # per layer (1, H, len, d_k) -> (L, H, len, d_k), (1, T, D) -> (L, T, D)
        layers = sorted(layer for k, layer, n in captured if k == kind and n == name)
        return rounded(torch.cat([captured[(kind, i, name)][0] for i in layers]), decimals)

    memory = captured[("cross", 0, "memory")][0][0]  # (S, D)
    shared = {
        "encoder": {name: stack("encoder", name) for name in ("q", "k", "v")},
        "cross": {"k": stack("cross", "k"), "v": stack("cross", "v")},
    }
    shared["cross"]["memory"] = rounded(memory, decimals)
    if ("kv", None, "heads") in captured:  # absent, as before, when every head has its own
        shared["kv_heads"] = captured[("kv", None, "heads")]
    own = {
        "decoder": {name: stack("decoder", name) for name in ("q", "k", "v", "x", "z")},
        "cross": {name: stack("cross", name) for name in ("q", "x", "z")},
    }
    return shared, own


def rnn_internals(captured: dict, model: nn.Module, maps, decimals: int) -> tuple[dict, dict]:
    """(shared, per hypothesis): encoder states h̄_s [S][N], the score's key parts, the source's
    embedding rows [S][E], what the decoder RNN reads besides them, the encoder's final state
    and the decoder's start state made from it [N]; this hypothesis's
    attentional states h̃_t = tanh(W_c [h_t; c_t]) [T][N], query parts and the embedding rows
    of y_{t-1} (<s> at t = 1) the decoder RNN read [T][E]."""
    import torch

    states = captured["encoder"][0][0]  # (S, N)
    attentional = torch.tanh(torch.cat(captured["combine"], dim=1)[0])  # (T, N)
    decoder_inputs = torch.cat(captured["decoder_inputs"], dim=1)[0]  # (T, E)
    reads = "embedding, attentional" if model.decoder.input_feeding else "embedding"
    shared = {"encoder_states": rounded(states, decimals), "score_keys": None, "score_v": None}
    shared["encoder_inputs"] = rounded(captured["encoder_inputs"][0][0], decimals)  # (S, E)
    # the decoder's start s_0 = tanh(W_s h_final + b_s) (Bahdanau A.2.2), its top layer: the
    # only way the source reaches a decoder without attention (an LSTM's c_0 is the 2nd call)
    final, bridged = captured["bridge"][0]  # (layers, 1, N) each
    shared["encoder_final"] = rounded(final[-1, 0], decimals)  # (N,)
    shared["decoder_start"] = rounded(torch.tanh(bridged[-1, 0]), decimals)  # (N,)
    shared["decoder_reads"] = reads  # with input feeding, h̃_{t-1} too (zeros at t = 1)
    own = {"attentional": rounded(attentional, decimals), "score_queries": None}
    own["decoder_inputs"] = rounded(decoder_inputs, decimals)
    if model.decoder.attention is not None:  # the parts of the score's form (scores.py)
        parts = model.decoder.attention.score_parts(states, maps.decoder_states[0])
        shared.update(score_keys=rounded(parts.keys, decimals), score_v=rounded(parts.v, decimals))
        own["score_queries"] = rounded(parts.queries, decimals)
    return shared, own


def records_internals(translator, asked: bool | None, source_length: int, hyps) -> bool:
    """Whether the trace records internals: as `asked`, or (None) while they stay within
    INTERNALS_MAX_NUMBERS; never for an ensemble (no one model's) nor a Hugging Face model,
    whose modules the hooks do not know: its trace says model.hf, and the viewer names the
    `heedful explain` that computes a cell from that model's own projections instead."""
    if hasattr(translator.model, "members") or getattr(translator.model, "hf_model_type", None):
        return False
    if asked is None:
        lengths = [len(h.produced(EOS_ID)) for h in hyps]
        return internals_size(translator.config, source_length, lengths) <= INTERNALS_MAX_NUMBERS
    return asked
