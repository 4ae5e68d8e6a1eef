"""build_model: the one place where a config meets the model constructors."""

from __future__ import annotations

from torch import nn

from heedful.config import ModelConfig
from heedful.models.rnn import RNNSeq2Seq
from heedful.models.transformer import Transformer


def _transformer_settings(c: ModelConfig, pad_id: int) -> dict:
    """The Transformer's settings that a text and an image model share: all but the source."""
    return dict(
        d_model=c.d_model,
        num_heads=c.num_heads,
        num_kv_heads=c.num_kv_heads,
        decoder_layers=c.decoder_layers,
        d_ff=c.d_ff,
        dropout=c.dropout,
        attention_dropout=c.attention_dropout,
        norm_first=c.norm == "pre",
        positional=c.positional,
        max_positions=c.max_positions,
        tie_embeddings=c.tie_embeddings,
        pad_id=pad_id,
    )


def _rnn_settings(c: ModelConfig, pad_id: int) -> dict:
    """The RNN decoder's settings that a text and an image model share."""
    return dict(
        embed_size=c.d_model,
        hidden_size=c.hidden_size,
        cell=c.rnn_cell,
        num_layers=c.rnn_layers,
        attention=c.attention,
        input_feeding=c.input_feeding,
        dropout=c.dropout,
        pad_id=pad_id,
    )


def _transformer(c: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int):
    settings = _transformer_settings(c, pad_id)
    return Transformer(src_vocab_size, tgt_vocab_size, encoder_layers=c.encoder_layers, **settings)


def _rnn(c: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int):
    text_only = dict(bidirectional=c.bidirectional, local_window=c.local_window, copy=c.copy)
    return RNNSeq2Seq(src_vocab_size, tgt_vocab_size, **_rnn_settings(c, pad_id), **text_only)


BUILDERS = {"transformer": _transformer, "rnn": _rnn}


def _image_encoder(c: ModelConfig, width: int) -> nn.Module:
    """The encoder model.encoder names, its regions `width` wide (models/vision.py)."""
    from heedful.models import vision

    if c.encoder == "cnn":
        return vision.CNNEncoder(
            width, c.cnn_channels, c.cnn_blocks, c.cnn_coords, c.cnn_layers, c.num_heads, c.d_ff
        )
    if c.encoder == "vit":
        return vision.ViTEncoder(
            c.image_size,
            c.patch_size,
            width,
            c.num_heads,
            c.encoder_layers,
            c.d_ff,
            c.dropout,
            c.norm == "pre",
            c.positional,
            c.attention_dropout,
        )
    trunk, channels = vision.torchvision_trunk(c.encoder.removeprefix("torchvision:"))
    return vision.BackboneEncoder(trunk, channels, width)  # weights: experiment, not here


def _captioner(c: ModelConfig, tgt_vocab_size: int, pad_id: int) -> nn.Module:
    """An image encoder under the family's decoder; the source vocabulary has no use."""
    from heedful.models.vision import ImageRNN, ImageTransformer

    if c.arch == "transformer":
        encoder = _image_encoder(c, c.d_model)
        settings = _transformer_settings(c, pad_id)
        return ImageTransformer(encoder, tgt_vocab_size, c.attention_penalty, **settings)
    encoder = _image_encoder(c, c.hidden_size)
    return ImageRNN(encoder, tgt_vocab_size, c.attention_penalty, **_rnn_settings(c, pad_id))


def build_model(
    config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int = 0
) -> nn.Module:
    """The model `config` describes. It carries the config as `model.config` (as nanoGPT's
    GPT(config) does), so that code holding a model asks it what it is: `model.config.arch`,
    `model.config.attention`, never isinstance checks."""
    if config.encoder != "text":  # a captioning model: images in (models/vision.py)
        model = _captioner(config, tgt_vocab_size, pad_id)
        if config.freeze_encoder:  # its trunk never learns (models/frozen.py)
            from heedful.models.frozen import freeze_trunk, image_encoder

            freeze_trunk(image_encoder(model))
    else:
        model = BUILDERS[config.arch](config, src_vocab_size, tgt_vocab_size, pad_id)
    model.config = config  # a plain attribute: not a parameter, not in the state dict
    return model
