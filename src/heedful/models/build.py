"""build_model: the one place where a config meets the model constructors.

A model is EncoderDecoder(encoder, decoder): model.encoder.kind says which encoder reads the
source (text: the family's own; cnn, vit, torchvision:<name>: pixels, models/vision.py) and the
rest of model.encoder how; model.arch which decoder writes the target, model.decoder how; what
both read (widths, heads, dropout, the RNN cell) is in model itself.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from heedful.config import ModelConfig
from heedful.models.encoder_decoder import EncoderDecoder
from heedful.models.rnn import AttentionDecoder, RNNEncoder, make_attention
from heedful.models.transformer import transformer, transformer_decoder


def _transformer_settings(c: ModelConfig, pad_id: int) -> dict:
    """The Transformer's settings (transformer.Settings) and its decoder's shape."""
    return dict(
        d_model=c.d_model,
        num_heads=c.num_heads,
        num_kv_heads=c.num_kv_heads,
        d_ff=c.d_ff,
        dropout=c.dropout,
        attention_dropout=c.attention_dropout,
        norm_first=c.norm == "pre",
        positional=c.positional,
        max_positions=c.max_positions,
        pad_id=pad_id,
        tie_embeddings=c.decoder.tie_embeddings,
    )


def _rnn_decoder(c: ModelConfig, tgt_vocab_size: int, pad_id: int) -> AttentionDecoder:
    d = c.decoder
    attention = make_attention(d.attention, c.hidden_size, d.local_window)
    sizes = (c.d_model, c.hidden_size, c.rnn_cell, c.rnn_layers)  # embed_size is d_model
    return AttentionDecoder(
        tgt_vocab_size, *sizes, attention, d.input_feeding, c.dropout, pad_id, d.copy
    )


def _text_transformer(c: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int):
    settings = _transformer_settings(c, pad_id)
    layers = (c.encoder.layers, c.decoder.layers)
    share = c.encoder.share_embeddings
    return transformer(src_vocab_size, tgt_vocab_size, *layers, share_embeddings=share, **settings)


def _text_rnn(c: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int):
    d = c.decoder
    if d.copy and (d.attention == "none" or src_vocab_size != tgt_vocab_size):
        raise ValueError(
            "copy (the pointer-generator) points with attention at source ids that must "
            "be output ids: it needs attention and one vocabulary for both sides, got "
            f"attention {d.attention!r} and vocabularies of {src_vocab_size} and "
            f"{tgt_vocab_size}"
        )
    sizes = (c.d_model, c.hidden_size, c.rnn_cell, c.rnn_layers)  # embed_size is d_model
    encoder = RNNEncoder(src_vocab_size, *sizes, c.encoder.bidirectional, c.dropout, pad_id)
    return encoder, _rnn_decoder(c, tgt_vocab_size, pad_id)


TEXT_MODELS = {"transformer": _text_transformer, "rnn": _text_rnn}  # (encoder, decoder) by arch


def _pixel_decoder(c: ModelConfig, tgt_vocab_size: int, pad_id: int) -> nn.Module:
    """The family's decoder over image regions; its width is the regions'."""
    if c.arch == "rnn":
        return _rnn_decoder(c, tgt_vocab_size, pad_id)
    settings = _transformer_settings(c, pad_id)
    return transformer_decoder(tgt_vocab_size, c.decoder.layers, **settings)


def _pixel_encoder(c: ModelConfig) -> nn.Module:
    """The encoder model.encoder describes, its regions as wide as the decoder reads them (the
    Transformer's d_model, the RNN's hidden size); models/vision.py."""
    from heedful.models import vision

    width, e = (c.d_model if c.arch == "transformer" else c.hidden_size), c.encoder
    if e.kind == "cnn":
        return vision.CNNEncoder(
            width, e.channels, e.blocks, e.coords, e.layers, c.num_heads, c.d_ff
        )
    if e.kind == "vit":
        return vision.ViTEncoder(
            e.image_size,
            e.patch_size,
            width,
            c.num_heads,
            e.layers,
            c.d_ff,
            c.dropout,
            c.norm == "pre",
            c.positional,
            c.attention_dropout,
        )
    trunk, channels = vision.torchvision_trunk(e.name)
    return vision.BackboneEncoder(trunk, channels, width)  # weights: experiment, not here


def build_model(
    config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int = 0
) -> EncoderDecoder:
    """The model `config` describes. It carries the config as `model.config` (as nanoGPT's
    GPT(config) does), so that code holding a model asks it what it is: `model.config.arch`,
    `model.config.decoder.attention`, never isinstance checks. An image model's source
    vocabulary has no use."""
    c = config
    if c.encoder.kind == "text":
        encoder, decoder = TEXT_MODELS[c.arch](c, src_vocab_size, tgt_vocab_size, pad_id)
    else:  # the encoder first, then the decoder: the order their weights are drawn in
        encoder = _pixel_encoder(c)
        decoder = _pixel_decoder(c, tgt_vocab_size, pad_id)
        if c.encoder.freeze:  # its trunk never learns (models/frozen.py)
            from heedful.models.frozen import freeze_trunk

            freeze_trunk(encoder)
    model = EncoderDecoder(encoder, decoder, c.decoder.attention_penalty)
    model.config = config  # a plain attribute: not a parameter, not in the state dict
    return model


def build_skeleton(
    config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int = 0
) -> EncoderDecoder:
    """The model `config` describes on the meta device: every shape, no memory, no values, to
    check a weights file against before anything is allocated."""
    with torch.device("meta"), _NoInitialisers():
        return build_model(config, src_vocab_size, tgt_vocab_size, pad_id)


class _NoInitialisers(TorchFunctionMode):
    """Skips torch.nn.init's functions on meta tensors, which have no values to draw. Not only
    time: torch runs some of them (normal_) on the meta device through Python decompositions
    whose first call imports torch._dynamo, 71 MiB and a second of start-up for every command
    that loads a model directory."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            tensor = args[0] if args else kwargs.get("tensor")  # torch passes it either way
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor  # each of them returns the tensor it filled
        return func(*args, **kwargs)
