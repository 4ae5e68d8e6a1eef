"""heedful export --format huggingface: a heedful Transformer as a Marian model directory.

transformers' MarianMTModel is the post-norm Transformer of Vaswani et al. 2017, as ours with
norm "post": embeddings × √d_model plus a sinusoidal table from position 0, then per layer
LayerNorm(x + sublayer(x)), ReLU feed-forward (activation_function "relu"), no final norm, and
an output projection whose bias is Marian's final_logits_bias. Weight by weight:

    ours (models/transformer.py)             Marian (modeling_marian.py)
    src_embed.tokens, tgt_embed.tokens       model.encoder / model.decoder .embed_tokens
    encoder_layers.i.self_attn.w_q/k/v/o     model.encoder.layers.i.self_attn.q/k/v/out_proj
    decoder_layers.i.cross_attn.*            model.decoder.layers.i.encoder_attn.*
    attn_block / self_block .norm            self_attn_layer_norm
    cross_block.norm                         encoder_attn_layer_norm
    feed_forward.net.0, net.3; ff_block.norm fc1, fc2; final_layer_norm
    generator (weight, bias)                 lm_head.weight, final_logits_bias

Marian does not store its positional table: it computes one with the sines in the first half of
the dimensions and the cosines in the second (PE[pos, i] = sin, PE[pos, D/2 + i] = cos), where
ours interleave them (sin at 2i, cos at 2i + 1). A Transformer computes the same function when
the D dimensions of its residual stream are renumbered consistently, so every weight that reads
the stream has its columns, and every one that writes it (embeddings, W_O, fc2, the norms) its
rows, taken in the order PERM = [0, 2, 4, ..., 1, 3, 5, ...]: then our table, renumbered, is
Marian's. Attention heads, the feed-forward's inner layer and the vocabulary keep their order.
Our keys have no bias (attention.py), so k_proj's is zero.

Source and target keep their own vocabularies (share_encoder_decoder_embeddings false, and
MarianTokenizer's separate_vocabs), each our SentencePiece model with its pieces in id order;
<pad> 0, <s> 1 (what decoding starts with), </s> 2, <unk> 3 as in heedful. heedful reads no
</s> at the end of a source: tokenize with add_special_tokens=False to get our outputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from heedful.checkpoint import load_model_dir
from heedful.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from heedful.hf.layout import import_transformers
from heedful.io import CheckpointError, atomic_write_json, read_json, staged
from heedful.output_dirs import DirectoryKind, check_output, replaceable

MIN_POSITIONS = 1024  # Marian's table is fixed, ours grows: cover any sentence one translates
MARKER, MARKER_FORMAT = "heedful-export.json", "heedful-huggingface-export"
# What exports made before the marker hold (transformers 4.x's save_pretrained and ours)
EARLIER_FILES = frozenset({"config.json", "generation_config.json", "model.safetensors",
                           "source.spm", "target.spm", "vocab.json", "target_vocab.json",
                           "tokenizer_config.json", "special_tokens_map.json",
                           "added_tokens.json"})  # fmt: skip


def _written(directory: Path) -> frozenset[str] | None:
    """The files an export of ours holds, by its marker (or, made before the marker, by the
    files only ours have: Marian with separate vocabularies); None: not an export of ours."""
    if (directory / MARKER).is_file():
        try:
            marker = read_json(directory / MARKER, 1 << 20)
        except CheckpointError:
            return None
        if not isinstance(marker, dict) or marker.get("format") != MARKER_FORMAT:
            return None
        files = marker.get("files")
        if not isinstance(files, list):
            return None
        return frozenset(name for name in files if isinstance(name, str)) | {MARKER}
    try:
        config = read_json(directory / "config.json", 1 << 20)
    except CheckpointError:
        return None
    ours = ("source.spm", "target.spm", "target_vocab.json")
    if isinstance(config, dict) and config.get("model_type") == "marian":
        return EARLIER_FILES if all((directory / n).is_file() for n in ours) else None
    return None


def _owned(path: Path) -> bool:
    files = _written(path.parent)
    return files is not None and path.name in files and path.is_file() and not path.is_symlink()


# What `heedful export --format huggingface` replaces: an export of its own, holding nothing else
MARIAN_EXPORT = DirectoryKind(
    "a heedful Hugging Face export", lambda d: _written(d) is not None, _owned
)


def _check_exportable(loaded, model_dir) -> None:
    config, why = loaded.model_config, None
    if config.arch != "transformer":
        why = f"it is an {config.arch!r} model; Marian is a Transformer"
    elif config.encoder != "text":
        why = f"it reads images (model.encoder {config.encoder}); Marian reads text"
    elif config.norm != "post":
        why = "it is pre-norm; Marian's layers are post-norm"
    elif config.positional != "sinusoidal":
        why = "its positions are learned; Marian's are sinusoidal"
    elif config.d_model % 2:
        why = f"d_model {config.d_model} is odd; the sinusoids come in pairs"
    else:
        kinds = {getattr(t, "kind", None) for t in (loaded.src_tokenizer, loaded.tgt_tokenizer)}
        if kinds != {"sentencepiece"}:
            why = "its tokenizers are not SentencePiece ones, which MarianTokenizer needs"
    if why:
        raise CheckpointError(f"{model_dir}: cannot export to Hugging Face Marian: {why}")


def marian_config(hf, config, src_vocab: int, tgt_vocab: int, tied: bool):
    return hf.MarianConfig(
        vocab_size=src_vocab,
        decoder_vocab_size=tgt_vocab,
        share_encoder_decoder_embeddings=False,
        tie_word_embeddings=tied,
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.num_heads,
        decoder_attention_heads=config.num_heads,
        encoder_ffn_dim=config.d_ff,
        decoder_ffn_dim=config.d_ff,
        activation_function="relu",
        scale_embedding=True,
        max_position_embeddings=max(config.max_positions, MIN_POSITIONS),
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=0.0,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID,
        forced_eos_token_id=None,
    )


def _attention(prefix: str, attn, perm) -> dict:
    """q/k/v read the stream (columns renumbered); out_proj writes it (rows renumbered)."""
    zeros = torch.zeros(attn.w_k.out_features)
    return {
        f"{prefix}.q_proj.weight": attn.w_q.weight[:, perm],
        f"{prefix}.q_proj.bias": attn.w_q.bias,
        f"{prefix}.k_proj.weight": attn.w_k.weight[:, perm],
        f"{prefix}.k_proj.bias": zeros,
        f"{prefix}.v_proj.weight": attn.w_v.weight[:, perm],
        f"{prefix}.v_proj.bias": attn.w_v.bias,
        f"{prefix}.out_proj.weight": attn.w_o.weight[perm],
        f"{prefix}.out_proj.bias": attn.w_o.bias[perm],
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


def marian_weights(model, perm: torch.Tensor) -> dict[str, torch.Tensor]:
    """Our Transformer's weights under Marian's names, the stream renumbered by perm."""
    out = {
        "model.encoder.embed_tokens.weight": model.src_embed.tokens.weight[:, perm],
        "model.decoder.embed_tokens.weight": model.tgt_embed.tokens.weight[:, perm],
        "lm_head.weight": model.generator.weight[:, perm],
        "final_logits_bias": model.generator.bias.unsqueeze(0),  # (1, V)
    }
    for i, layer in enumerate(model.encoder_layers):
        p = f"model.encoder.layers.{i}"
        out |= _attention(f"{p}.self_attn", layer.self_attn, perm)
        out |= _norm(f"{p}.self_attn_layer_norm", layer.attn_block.norm, perm)
        out |= _feed_forward(p, layer, perm)
    for i, layer in enumerate(model.decoder_layers):
        p = f"model.decoder.layers.{i}"
        out |= _attention(f"{p}.self_attn", layer.self_attn, perm)
        out |= _norm(f"{p}.self_attn_layer_norm", layer.self_block.norm, perm)
        out |= _attention(f"{p}.encoder_attn", layer.cross_attn, perm)
        out |= _norm(f"{p}.encoder_attn_layer_norm", layer.cross_block.norm, perm)
        out |= _feed_forward(p, layer, perm)
    return {name: w.detach().clone().contiguous() for name, w in out.items()}


def _write_tokenizer(hf, loaded, build: Path) -> None:
    """source.spm / target.spm (our SentencePiece models) and their pieces in id order."""
    for name, tokenizer, vocab in (
        ("source", loaded.src_tokenizer, "vocab.json"),
        ("target", loaded.tgt_tokenizer, "target_vocab.json"),
    ):
        tokenizer.save(build / f"{name}.spm")
        pieces = {tokenizer.id_to_token(i): i for i in range(len(tokenizer))}
        (build / vocab).write_text(json.dumps(pieces, ensure_ascii=False), encoding="utf-8")
    marian = hf.MarianTokenizer(
        str(build / "source.spm"),
        str(build / "target.spm"),
        str(build / "vocab.json"),
        target_vocab_file=str(build / "target_vocab.json"),
        separate_vocabs=True,
        unk_token=loaded.src_tokenizer.id_to_token(UNK_ID),
    )
    marian.save_pretrained(build)


def export_huggingface(model_dir: str | Path, output: str | Path) -> Path:
    """Write `output`: the Transformer in `model_dir` as a Marian model directory that
    transformers loads (MarianMTModel / MarianTokenizer .from_pretrained(output))."""
    hf = import_transformers()
    model_dir = Path(model_dir)
    check_output(output, MARIAN_EXPORT, [model_dir])  # before anything is read
    loaded = load_model_dir(model_dir)
    _check_exportable(loaded, model_dir)
    model, config = loaded.model, loaded.model_config
    d = config.d_model
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # Marian's dim -> ours
    tied = model.generator.weight is model.tgt_embed.tokens.weight
    sizes = (len(loaded.src_tokenizer), len(loaded.tgt_tokenizer))
    marian = hf.MarianMTModel(marian_config(hf, config, *sizes, tied))
    missing, unexpected = marian.load_state_dict(marian_weights(model, perm), strict=False)
    computed = {n for n in missing if n.endswith("embed_positions.weight")}
    if set(missing) - computed - ({"model.decoder.embed_tokens.weight"} if tied else set()):
        raise RuntimeError(f"export left Marian weights unset: {sorted(missing)}")
    if unexpected:
        raise RuntimeError(f"export wrote weights Marian does not have: {sorted(unexpected)}")
    marian.generation_config.num_beams = loaded.generation.num_beams
    marian.generation_config.bad_words_ids = None  # heedful's search bans nothing
    with staged(Path(output), check=replaceable(MARIAN_EXPORT, [model_dir])) as build:
        marian.eval().save_pretrained(build)
        _write_tokenizer(hf, loaded, build)
        files = sorted(path.name for path in build.iterdir())  # what a new export may replace
        atomic_write_json(build / MARKER, {"format": MARKER_FORMAT, "files": files})
    return Path(output)
