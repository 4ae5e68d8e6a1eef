"""Our Transformer's weights under the names of a Hugging Face architecture, for export.py.

Post-norm models become Marian, pre-norm ones Pegasus: both are the Transformer of Vaswani et
al. 2017 as ours, embeddings × √d_model plus a fixed sinusoidal table from position 0, ReLU
feed-forward (activation_function "relu"), no norm on the embeddings; Marian's layers are
LayerNorm(x + sublayer(x)) with no final norm, Pegasus's x + sublayer(LayerNorm(x)) with a
final LayerNorm after each stack (our encoder.norm / decoder.norm). Weight by weight:

    ours (models/transformer.py)             Marian / Pegasus (modeling_marian.py, _pegasus)
    encoder.embed.tokens, decoder.embed.tokens model.encoder / model.decoder .embed_tokens
    encoder.layers.i.self_attn parts q/k/v/o model.encoder.layers.i.self_attn.q/k/v/out_proj
    decoder.layers.i.cross_attn.*            model.decoder.layers.i.encoder_attn.*
    attn_block / self_block .norm            self_attn_layer_norm
    cross_block.norm                         encoder_attn_layer_norm
    feed_forward.net.0, net.3; ff_block.norm fc1, fc2; final_layer_norm
    encoder.norm, decoder.norm (pre-norm)    model.encoder / model.decoder .layer_norm
    decoder.generator (weight, bias)         lm_head.weight, final_logits_bias

Both compute their positional table with the sines in the first half of the dimensions and the
cosines in the second (PE[pos, i] = sin, PE[pos, D/2 + i] = cos), where ours interleave them
(sin at 2i, cos at 2i + 1). A Transformer computes the same function when the D dimensions of
its residual stream are renumbered consistently, so every weight that reads the stream has its
columns, and every one that writes it (embeddings, W_O, fc2, the norms) its rows, taken in the
order PERM = [0, 2, 4, ..., 1, 3, 5, ...] (stream_order): then our table, renumbered, is
theirs. Attention heads and the feed-forward's inner layer keep their order; the vocabulary
takes the export's (export_tokenizer.VocabLayout). Our keys have no bias (attention.py), so
k_proj's is zero.
"""

from __future__ import annotations

import torch

from heedful.data.tokenizers import BOS_ID
from heedful.layers.positional import sinusoidal_encoding

# the score of a token the decoder must never produce (a source-only character): exp() of it
# is 0 in float32 and float64, and it is finite (heedful's loader refuses non-finite weights)
# and within float16's range
NEVER = -60000.0


def stream_order(d_model: int) -> torch.Tensor:
    """PERM: the export's dimension j is our dimension PERM[j] (module docstring)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _attention(prefix: str, attn, perm) -> dict:
    """q/k/v read the stream (columns renumbered); out_proj writes it (rows renumbered)."""
    q, k, v, o = attn.parts().values()  # W_Q, W_K, W_V, W_O (attention.py)
    return {
        f"{prefix}.q_proj.weight": q.weight[:, perm],
        f"{prefix}.q_proj.bias": q.bias,
        f"{prefix}.k_proj.weight": k.weight[:, perm],
        f"{prefix}.k_proj.bias": torch.zeros(k.out_features),
        f"{prefix}.v_proj.weight": v.weight[:, perm],
        f"{prefix}.v_proj.bias": v.bias,
        f"{prefix}.out_proj.weight": o.weight[perm],
        f"{prefix}.out_proj.bias": o.bias[perm],
    }


def _norm(prefix: str, norm, perm) -> dict:
    return {f"{prefix}.weight": norm.weight[perm], f"{prefix}.bias": norm.bias[perm]}


def _feed_forward(prefix: str, layer, perm) -> dict:
    first, second = layer.feed_forward.net[0], layer.feed_forward.net[3]
    return {
        f"{prefix}.fc1.weight": first.weight[:, perm],
        f"{prefix}.fc1.bias": first.bias,
        f"{prefix}.fc2.weight": second.weight[perm],
        f"{prefix}.fc2.bias": second.bias[perm],
        **_norm(f"{prefix}.final_layer_norm", layer.ff_block.norm, perm),
    }


def _rows(table: torch.Tensor, ours: list[int | None], fill: float) -> torch.Tensor:
    """table's rows in the export's token order; `fill` where a token has none of ours."""
    out = table.new_full((len(ours), *table.shape[1:]), fill)
    have = [e for e, i in enumerate(ours) if i is not None]
    out[have] = table[[ours[e] for e in have]]
    return out


def _vocabulary(model, vocab, perm) -> dict:
    """Embeddings and output layer in the export's token order (export_tokenizer.layout)."""
    generator = model.decoder.generator
    decoder = _rows(model.decoder.embed.tokens.weight, vocab.our_tgt, 0.0)
    encoder = model.encoder.embed.tokens.weight[vocab.src_rows()]
    return {
        "model.encoder.embed_tokens.weight": encoder[:, perm],
        "model.decoder.embed_tokens.weight": decoder[:, perm],
        "lm_head.weight": _rows(generator.weight, vocab.our_tgt, 0.0)[:, perm],
        "final_logits_bias": _rows(generator.bias, vocab.our_tgt, NEVER).unsqueeze(0),
    }


def _zero_start(model, positions: int, perm) -> dict:
    """Marian's tables, our <s> folded into the decoder's position 0.

    The decoder reads x_0 = √D · E[start] + PE[0] first. Marian exports start from a token
    whose row is zero (CTranslate2's converter starts from a zero vector whatever the token),
    so PE'[0] = PE[0] + √D · E[<s>] gives x_0 ours; position 0 is only ever the start."""
    embed = model.decoder.embed
    table = sinusoidal_encoding(positions, embed.tokens.embedding_dim)[:, perm]
    start = embed.tokens.weight[BOS_ID][perm] * embed.scale  # (D,)
    decoder = table.clone()
    decoder[0] += start
    return {
        "model.encoder.embed_positions.weight": table,
        "model.decoder.embed_positions.weight": decoder,
    }


def hf_weights(model, model_type: str, vocab, perm, positions: int) -> dict[str, torch.Tensor]:
    """Our Transformer's weights under `model_type`'s names ("marian" or "pegasus"), the
    stream renumbered by perm, the vocabulary in the export's order, `positions` long tables
    (written only where they are not the architecture's own)."""
    out = _vocabulary(model, vocab, perm)
    if model_type == "marian" and vocab.zero_start:
        out |= _zero_start(model, positions, perm)
    if model_type == "pegasus":  # its shared table, which no forward reads when untied
        out["model.shared.weight"] = out["model.encoder.embed_tokens.weight"]
        out |= _norm("model.encoder.layer_norm", model.encoder.norm, perm)
        out |= _norm("model.decoder.layer_norm", model.decoder.norm, perm)
    for i, layer in enumerate(model.encoder.layers):
        p = f"model.encoder.layers.{i}"
        out |= _attention(f"{p}.self_attn", layer.self_attn, perm)
        out |= _norm(f"{p}.self_attn_layer_norm", layer.attn_block.norm, perm)
        out |= _feed_forward(p, layer, perm)
    for i, layer in enumerate(model.decoder.layers):
        p = f"model.decoder.layers.{i}"
        out |= _attention(f"{p}.self_attn", layer.self_attn, perm)
        out |= _norm(f"{p}.self_attn_layer_norm", layer.self_block.norm, perm)
        out |= _attention(f"{p}.encoder_attn", layer.cross_attn, perm)
        out |= _norm(f"{p}.encoder_attn_layer_norm", layer.cross_block.norm, perm)
        out |= _feed_forward(p, layer, perm)
    return {name: w.detach().clone().contiguous() for name, w in out.items()}
