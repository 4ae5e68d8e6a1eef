"""The model config's image keys (issue 12): which encoder reads the source, and its checks.

`model.encoder` is `text` (token ids, the default), `cnn`, `vit` or `torchvision:<name>`; the
image encoders read size × size pictures (models/vision.py). Kept apart from config/__init__.py
so that the text models' config reads as it did; no torch here either.

`model.freeze_encoder` stops a cnn or torchvision encoder's trunk (pixels to region grid,
models/frozen.py) from learning; then, and only then, `data.feature_cache` may name a folder
where the trunk's output for each image is kept between epochs and runs (data/features.py).
"""

from __future__ import annotations

import math
import re

from heedful.config.file import ConfigError

ENCODERS = ("text", "cnn", "vit", "torchvision:<name>")
# The keys only some image encoders read; a text model reads none of them.
IMAGE_KEYS = {
    "cnn": (
        "image_size",
        "cnn_channels",
        "cnn_blocks",
        "cnn_coords",
        "cnn_layers",
        "attention_penalty",
        "freeze_encoder",
    ),
    "vit": ("image_size", "patch_size", "attention_penalty"),
    "torchvision": ("image_size", "encoder_weights", "attention_penalty", "freeze_encoder"),
}
ALL_IMAGE_KEYS = (
    "encoder",
    "image_size",
    "patch_size",
    "cnn_channels",
    "cnn_blocks",
    "cnn_coords",
    "cnn_layers",
    "encoder_weights",
    "attention_penalty",
    "freeze_encoder",
)
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def encoder_kind(encoder: str) -> str:
    """text | cnn | vit | torchvision (for torchvision:<name>)."""
    return "torchvision" if encoder.startswith("torchvision:") else encoder


def check_encoder(c) -> None:
    """The image keys of a ModelConfig `c`, alone and against the decoder they feed."""
    kind = encoder_kind(c.encoder)
    if kind not in ("text", "cnn", "vit", "torchvision"):
        raise ConfigError(f"model.encoder: {c.encoder!r} is not one of {', '.join(ENCODERS)}")
    if kind == "torchvision" and not _NAME.fullmatch(c.encoder.removeprefix("torchvision:")):
        raise ConfigError(
            f"model.encoder: {c.encoder!r} does not name a torchvision model "
            "(torchvision:resnet18, say)"
        )
    for name in ("image_size", "patch_size", "cnn_channels", "cnn_blocks"):
        if getattr(c, name) < 1:
            raise ConfigError(f"model.{name}: must be > 0, got {getattr(c, name)}")
    if not isinstance(c.cnn_coords, bool):
        raise ConfigError(f"model.cnn_coords: must be true or false, got {c.cnn_coords!r}")
    if isinstance(c.cnn_layers, bool) or not isinstance(c.cnn_layers, int) or c.cnn_layers < 0:
        raise ConfigError(f"model.cnn_layers: must be a whole number >= 0, got {c.cnn_layers!r}")
    if not (math.isfinite(c.attention_penalty) and c.attention_penalty >= 0):
        raise ConfigError(f"model.attention_penalty: must be >= 0, got {c.attention_penalty}")
    _check_freeze(c.freeze_encoder, kind)
    if kind == "text":
        return
    if kind == "vit" and c.arch != "transformer":
        raise ConfigError(
            "model.encoder vit: its encoder is Transformer layers; use model.arch "
            "transformer (an RNN decoder reads cnn or torchvision regions)"
        )
    if kind == "vit" and c.image_size % c.patch_size:
        raise ConfigError(
            f"model.patch_size ({c.patch_size}) must divide model.image_size "
            f"({c.image_size}): patches would leave pixels out"
        )
    if kind == "cnn" and c.image_size < 2**c.cnn_blocks:
        raise ConfigError(
            f"model.cnn_blocks: {c.cnn_blocks} blocks halve a {c.image_size}-pixel "
            "image to nothing; use fewer blocks or a larger model.image_size"
        )
    if kind == "cnn" and c.cnn_layers and c.arch != "transformer":
        raise ConfigError(
            "model.cnn_layers: the CNN's encoder layers take model.num_heads and model.d_ff, "
            "which only arch transformer reads; use arch transformer or cnn_layers: 0"
        )
    if c.arch == "rnn":
        _check_rnn_decoder(c)


def _check_freeze(freeze, kind: str) -> None:
    if not isinstance(freeze, bool):
        raise ConfigError(f"model.freeze_encoder: must be true or false, got {freeze!r}")
    if freeze and kind not in ("cnn", "torchvision"):
        why = (
            "a text model has no image encoder"
            if kind == "text"
            else "a ViT's patch embedding is its projection to d_model: it has no trunk"
        )
        raise ConfigError(
            f"model.freeze_encoder: {why}; it freezes the trunk of model.encoder cnn or "
            "torchvision:<name>"
        )


def check_cache(feature_cache, model) -> None:
    """data.feature_cache against the ModelConfig `model`: a folder name, for a frozen trunk
    (the filesystem is checked when training starts, training/captions_task.py)."""
    if feature_cache is None:
        return
    if not isinstance(feature_cache, str):
        raise ConfigError(
            f"data.feature_cache: expected a folder name, got {type(feature_cache).__name__} "
            f"{feature_cache!r:.40}"
        )
    if not feature_cache.strip():
        raise ConfigError(
            "data.feature_cache: an empty name; give a folder, or leave the key out to "
            "compute the trunk's output every step"
        )
    if not model.freeze_encoder:
        raise ConfigError(
            "data.feature_cache keeps a frozen trunk's output, but model.freeze_encoder is "
            "false: set model.freeze_encoder: true (model.encoder cnn or torchvision:<name>) "
            "or remove data.feature_cache"
        )


def _check_rnn_decoder(c) -> None:
    if c.attention.startswith("luong-local"):
        raise ConfigError(
            f"model.attention {c.attention}: local attention centres a window on "
            "a position of a sequence; image regions lie on a grid"
        )
    if c.copy:
        raise ConfigError("model.copy: a caption cannot copy words from an image")
    if c.attention == "none" and c.attention_penalty > 0:
        raise ConfigError("model.attention_penalty: regularises attention; this decoder has none")


def unused_image_keys(c) -> set[str]:
    """The image keys a model of this encoder does not read (all of them for text)."""
    kind = encoder_kind(c.encoder)
    if kind == "text":
        return set(ALL_IMAGE_KEYS)
    unused = set(ALL_IMAGE_KEYS) - {"encoder", *IMAGE_KEYS[kind]}
    if kind == "torchvision" and c.encoder_weights is None:
        unused.add("encoder_weights")
    if not c.freeze_encoder:  # model directories written before it stay byte for byte the same
        unused.add("freeze_encoder")
    if kind != "vit":  # the regions go to the decoder as they are: no encoder layers
        unused.add("encoder_layers")
    return unused


def check_given_image(c, given: set[str], defaults, prefix: str) -> None:
    """An image key given for an encoder that does not read it is an error, as for the other
    family's keys, unless it holds its default."""
    ignored = unused_image_keys(c) - {"encoder"}
    for key in sorted(given & ignored):
        if getattr(c, key) != getattr(defaults, key):
            users = [k for k, keys in IMAGE_KEYS.items() if key in keys] or ["text", "vit"]
            raise ConfigError(
                f"{prefix}{key}: only model.encoder {' / '.join(users)} uses it, this model's "
                f"is {c.encoder}; remove the key"
            )


# The data keys only text translation reads, what each is, and what to do with it in an image
# model's config; an image model reads none of them (training/captions_task.py).
_CORPUS_FILES = [f"{s}_{k}" for s in ("train", "valid") for k in ("src", "tgt", "tsv", "jsonl")]
TEXT_DATA_KEYS = {
    **dict.fromkeys(_CORPUS_FILES, ("a text corpus file", "remove the key")),
    "jsonl_src_field": ("a field of JSON Lines text corpora", "remove the key"),
    "jsonl_tgt_field": ("a field of JSON Lines text corpora", "remove the key"),
    "joint_vocab": ("one vocabulary for source and target text", "remove the key"),
    "src_tokenizer": ("the tokenizer of source text", "give data.tgt_tokenizer alone"),
    "prepared": ("text pairs as token ids (heedful prepare)", "remove the key"),
    "shard_tokens": ("the shard size of data.prepared", "remove the key"),
    "corpora": ("text corpora, one per language pair", "remove the key"),
    "max_line_bytes": (
        "the longest line of a text corpus",
        "remove the key (captions files are read with the default, 16 MiB a line)",
    ),
}
# and the ones only captioning reads (data.feature_cache: check_cache)
IMAGE_DATA_KEYS = ("images", "captions", "valid_captions", "captions_format")


def check_task_keys(data, model, train, data_defaults) -> None:
    """The data and train keys of a Config against the task its model.encoder trains
    (experiment.task_for): a key that task would ignore is an error, unless it holds its
    default (run directories written before this check list every key). The tokenizer files
    come in pairs for text; an image model's source is pixels, so it takes a target one alone."""
    if encoder_kind(model.encoder) == "text":
        if (data.src_tokenizer is None) != (data.tgt_tokenizer is None):
            raise ConfigError("data.src_tokenizer and data.tgt_tokenizer: give both or neither")
        for key in IMAGE_DATA_KEYS:
            if getattr(data, key) != getattr(data_defaults, key):
                raise ConfigError(
                    f"data.{key}: only an image model (model.encoder cnn, vit or "
                    "torchvision:<name>) reads it; this model's model.encoder is text: "
                    "remove the key"
                )
        return
    for key, (what, fix) in TEXT_DATA_KEYS.items():
        if getattr(data, key) != getattr(data_defaults, key):
            raise ConfigError(
                f"data.{key}: {what}; model.encoder {model.encoder} trains on images and "
                f"captions (data.images, data.captions, data.valid_captions): {fix}"
            )
    if train.early_stopping_metric == "chrf":
        raise ConfigError(
            "train.early_stopping_metric: chrf is not among a captions run's validation "
            "scores (loss, ppl, bleu, bleu1 to bleu3, exact_match); use bleu or loss"
        )
