"""heedful export: a Transformer model directory as a CTranslate2 model, weight by weight.

CTranslate2 (OpenNMT) runs Transformer encoder-decoders in C++ with its own fused kernels and
int8 weights. Its Python specification API declares every weight a model needs; this module
fills that declaration from our modules, one line per weight:

    ours (models/transformer.py)                 CTranslate2 (specs/transformer_spec.py)
    encoder.embed.tokens, decoder.embed.tokens   encoder.embeddings[0], decoder.embeddings
    × √d_model (Embedding.scale)                 scale_embeddings = True (× √depth)
    positions (our sinusoidal or learned table)  position_encodings.encodings
    self_attn parts q, k, v                      self_attention.linear[0], fused [Q; K; V]
    cross_attn parts q / k, v                    attention.linear[0] / linear[1], fused [K; V]
    *.parts o (W_O)                              *.linear[-1]
    attn_block / self_block / cross_block .norm  self_attention / attention .layer_norm
    feed_forward.net[0], ReLU, net[3]            ffn.linear_0 (activation RELU), ffn.linear_1
    ff_block.norm                                ffn.layer_norm
    encoder.norm, decoder.norm (pre-norm only)   encoder.layer_norm, decoder.layer_norm
    decoder.generator (tied or not)              decoder.projection

Our attention has no key bias (attention.py says why), so the fused projections get zeros
there. CTranslate2 would generate its own sinusoids with the sines and cosines in two halves
and positions counted from 1; ours interleave them (PE[pos, 2i] = sin, PE[pos, 2i+1] = cos)
from position 0, so our table is written out explicitly.

An export directory is self-contained:

    config.json          our config.json, plus a "ctranslate2" entry saying how it was made
    tokenizer.src        the tokenizers and search settings, copied unchanged
    tokenizer.tgt
    generation.json
    ctranslate2/         the CTranslate2 model: config.json, model.bin, vocabularies

CTranslate2 speaks in token strings, so its vocabularies are our pieces in id order
(`vocabulary`); ids 0-3 are <pad>, <s>, </s>, <unk>, the names CTranslate2 expects by default.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import torch

from heedful.checkpoint.model_dir import (
    CTRANSLATE2_DIR,
    CheckpointError,
    heedful_config,
    load_model_dir,
    read_model_config,
)
from heedful.config import ModelConfig
from heedful.data.tokenizers import BOS_ID, EOS_ID, UNK_ID
from heedful.io import atomic_write_json, staged
from heedful.layers.positional import sinusoidal_encoding
from heedful.output_dirs import DirectoryKind, check_output, replaceable

# ctranslate2 here; huggingface: a Marian or Pegasus directory for transformers (heedful.hf.export)
FORMATS = ("ctranslate2", "huggingface")
# Weight types `heedful export --quantization` accepts (CTranslate2's own names). int8 keeps
# one scale per output row (Dense int8 GEMM); float16/bfloat16 halve the file.
QUANTIZATIONS = ("int8", "int8_float32", "int16", "float16", "bfloat16", "float32")
# Sinusoidal tables are exported at least this long: our encoding extends itself on the fly,
# CTranslate2's explicit table cannot, so it should cover any sentence one would translate.
MIN_SINUSOIDAL_POSITIONS = 1024
EXPORT_FILES = ("config.json", "tokenizer.src", "tokenizer.tgt", "generation.json")
# what CTranslate2's spec.save writes (vocabularies: .json since 3.0, .txt before)
CTRANSLATE2_FILES = re.compile(r"(config\.json|model\.bin|\w*vocabulary\.(json|txt))")


def _is_export(directory: Path) -> bool:
    meta = heedful_config(directory)  # the marker: config.json's "ctranslate2" entry
    return meta is not None and isinstance(meta.get("ctranslate2"), dict)


def _export_entry(path: Path) -> bool:
    if path.is_symlink():
        return False
    if path.name == CTRANSLATE2_DIR and path.is_dir():
        return all(CTRANSLATE2_FILES.fullmatch(p.name) and p.is_file() for p in path.iterdir())
    return path.name in EXPORT_FILES and path.is_file()


# What `heedful export` (CTranslate2) replaces: an export of its own, holding nothing else
CTRANSLATE2_EXPORT = DirectoryKind("a heedful CTranslate2 export", _is_export, _export_entry)


def import_ctranslate2():
    """The ctranslate2 module, or an error that says which extra installs it."""
    try:
        import ctranslate2
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "the ctranslate2 engine and export need CTranslate2: pip install 'heedful[fast]'"
        ) from None
    return ctranslate2


def vocabulary(tokenizer) -> list[str]:
    """Our tokens in id order: CTranslate2 maps token strings to ids by position in this list."""
    tokens = [tokenizer.id_to_token(i) for i in range(len(tokenizer))]
    if len(set(tokens)) != len(tokens):
        seen: set[str] = set()
        twice = next(t for t in tokens if t in seen or seen.add(t))
        raise ValueError(
            f"the vocabulary has the token {twice!r} twice; CTranslate2 looks tokens up by "
            "their text, so every id needs a token of its own"
        )
    return tokens


def _array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float32).numpy().copy()


def _linear(spec, layer: torch.nn.Linear) -> None:
    spec.weight = _array(layer.weight)  # (out, in), as CTranslate2 stores it
    if layer.bias is not None:
        spec.bias = _array(layer.bias)


def _fused(spec, layers: list[torch.nn.Linear]) -> None:
    """Stack projections into one (sum of out, in) linear; a missing bias becomes zeros."""
    spec.weight = np.concatenate([_array(layer.weight) for layer in layers])
    biases = [layer.bias for layer in layers]
    if any(b is not None for b in biases):
        zeros = [torch.zeros(layer.out_features) for layer in layers]
        spec.bias = np.concatenate(
            [_array(b if b is not None else z) for b, z in zip(biases, zeros)]
        )


def _layer_norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _positions(embed, config: ModelConfig) -> np.ndarray:
    """The table our Embedding adds: PE rows 0, 1, ... (D wide)."""
    if config.positional == "learned":
        return _array(embed.positions.embedding.weight)  # (max_positions, D)
    length = max(config.max_positions, MIN_SINUSOIDAL_POSITIONS)
    return _array(sinusoidal_encoding(length, config.d_model))  # (length, D)


def _embeddings(spec, embedding_spec, embed, config: ModelConfig) -> None:
    embedding_spec.weight = _array(embed.tokens.weight)  # (V, D)
    spec.scale_embeddings = True  # tokens · √d_model before the positions are added (§3.4)
    spec.position_encodings.encodings = _positions(embed, config)


def _self_attention(spec, attention, norm) -> None:
    parts = attention.parts()  # W_Q, W_K, W_V, W_O by role (attention.py)
    _fused(spec.linear[0], [parts["q"], parts["k"], parts["v"]])  # [Q; K; V]
    _linear(spec.linear[1], parts["o"])
    _layer_norm(spec.layer_norm, norm)


def _cross_attention(spec, attention, norm) -> None:
    parts = attention.parts()
    _linear(spec.linear[0], parts["q"])  # queries from the decoder
    _fused(spec.linear[1], [parts["k"], parts["v"]])  # [K; V] from the encoder's memory
    _linear(spec.linear[2], parts["o"])
    _layer_norm(spec.layer_norm, norm)


def _feed_forward(spec, feed_forward, norm) -> None:
    first, relu, _, second = feed_forward.net  # Linear, ReLU, Dropout, Linear (§3.3)
    assert isinstance(relu, torch.nn.ReLU), "the CTranslate2 spec below declares ReLU"
    _linear(spec.linear_0, first)
    _linear(spec.linear_1, second)
    _layer_norm(spec.layer_norm, norm)


def ctranslate2_spec(model, config: ModelConfig, src_tokenizer, tgt_tokenizer):
    """A filled, validated ctranslate2.specs.TransformerSpec for our Transformer `model`."""
    import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    pre_norm = config.norm == "pre"
    # post-norm stacks get no final norm, as ours (Identity) have none; num_heads_kv: grouped-
    # query attention's K and V heads, shared as ours (head h reads h // (H / H_kv)); None: H
    stack = dict(pre_norm=pre_norm, activation=common_spec.Activation.RELU)
    stack["num_heads_kv"] = config.num_kv_heads
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(config.encoder.layers, config.num_heads, **stack),
        transformer_spec.TransformerDecoderSpec(config.decoder.layers, config.num_heads, **stack),
    )
    enc_spec, dec_spec, encoder, decoder = spec.encoder, spec.decoder, model.encoder, model.decoder
    _embeddings(enc_spec, enc_spec.embeddings[0], encoder.embed, config)
    for layer_spec, layer in zip(enc_spec.layer, encoder.layers):
        _self_attention(layer_spec.self_attention, layer.self_attn, layer.attn_block.norm)
        _feed_forward(layer_spec.ffn, layer.feed_forward, layer.ff_block.norm)
    _embeddings(dec_spec, dec_spec.embeddings, decoder.embed, config)
    for layer_spec, layer in zip(dec_spec.layer, decoder.layers):
        _self_attention(layer_spec.self_attention, layer.self_attn, layer.self_block.norm)
        _cross_attention(layer_spec.attention, layer.cross_attn, layer.cross_block.norm)
        _feed_forward(layer_spec.ffn, layer.feed_forward, layer.ff_block.norm)
    if pre_norm:
        _layer_norm(enc_spec.layer_norm, encoder.norm)
        _layer_norm(dec_spec.layer_norm, decoder.norm)
    _linear(dec_spec.projection, decoder.generator)  # a copy of the embedding's when tied

    source, target = vocabulary(src_tokenizer), vocabulary(tgt_tokenizer)
    spec.register_source_vocabulary(source)
    spec.register_target_vocabulary(target)
    # Our special tokens by their own names: decoding starts from <s> (decoding.py) and stops
    # at </s>; sources carry neither (Tokenizer.encode adds none).
    spec.config.unk_token = target[UNK_ID]
    spec.config.bos_token = spec.config.decoder_start_token = target[BOS_ID]
    spec.config.eos_token = target[EOS_ID]
    spec.config.add_source_bos = spec.config.add_source_eos = False
    spec.config.layer_norm_epsilon = decoder.layers[0].ff_block.norm.eps  # torch: 1e-5
    spec.validate()
    return spec


def export_ctranslate2(
    model_dir: str | Path, output: str | Path, quantization: str | None = None
) -> Path:
    """Write `output`, a self-contained CTranslate2 export of the Transformer in `model_dir`.

    quantization: None keeps float32 weights; otherwise one of QUANTIZATIONS (int8: weights
    as int8 with a float scale per row, about 4x smaller and faster on CPU).
    """
    ctranslate2 = import_ctranslate2()
    model_dir = Path(model_dir)
    check_output(output, CTRANSLATE2_EXPORT, [model_dir])  # before anything is read
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(
            f"unknown quantization {quantization!r}; choose one of {', '.join(QUANTIZATIONS)}"
        )
    loaded = load_model_dir(model_dir)
    if loaded.model_config.encoder.kind != "text":
        raise CheckpointError(
            f"{model_dir}: an image model (model.encoder.kind "
            f"{loaded.model_config.encoder.kind}); "
            "CTranslate2 reads text"
        )
    if loaded.model_config.arch != "transformer":
        raise CheckpointError(
            f"{model_dir}: only Transformer models export to CTranslate2; this one is "
            f"{loaded.model_config.arch!r} (CTranslate2 has no RNN encoder-decoder)"
        )
    spec = ctranslate2_spec(
        loaded.model, loaded.model_config, loaded.src_tokenizer, loaded.tgt_tokenizer
    )
    spec.optimize(quantization=quantization)  # aliases equal weights (tied ones), quantizes
    with staged(Path(output), check=replaceable(CTRANSLATE2_EXPORT, [model_dir])) as build:
        (build / CTRANSLATE2_DIR).mkdir()
        spec.save(str(build / CTRANSLATE2_DIR))
        for name in ("tokenizer.src", "tokenizer.tgt", "generation.json"):
            shutil.copyfile(model_dir / name, build / name)
        meta, _ = read_model_config(model_dir)  # checked by load_model_dir above
        meta["ctranslate2"] = {
            "version": ctranslate2.__version__,
            "quantization": quantization or "float32",
            "exported_from": str(model_dir.resolve()),
        }
        atomic_write_json(build / "config.json", meta)
    return Path(output)
