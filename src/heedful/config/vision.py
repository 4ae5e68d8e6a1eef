"""model.encoder for pictures (issue 12): one section per image encoder, and their checks.

`model.encoder.kind` is `text` (token ids, config/model.py), `cnn`, `vit` or
`torchvision:<name>`; the image encoders read size × size pictures into a grid of regions the
decoder attends over (models/vision.py). Each kind is its own dataclass, so the keys it reads
are its fields: a key of another kind is an error naming who reads it (config/file.py). No
torch here.

`freeze` stops a cnn or torchvision encoder's trunk (pixels to region grid, models/frozen.py)
from learning; then, and only then, `data.source.feature_cache` may name a folder where the
trunk's output for each image is kept between epochs and runs (data/features.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from heedful.config.file import ConfigError, check_positive

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_NO_TRUNK = "a ViT's patch embedding is its projection to d_model: it has no trunk"


def _check(kind: str, expected: str, sizes: dict) -> None:
    """A section's kind, for one built in Python (from_dict picks the section by its kind),
    and its sizes, each > 0."""
    if kind != expected:
        raise ConfigError(f"model.encoder.kind: {kind!r} is not {expected}, this section's kind")
    for name, value in sizes.items():
        check_positive(f"model.encoder.{name}", value)


@dataclass(frozen=True)
class CNNEncoderConfig:
    """model.encoder kind cnn: conv blocks, each halving the picture, then a grid of regions."""

    KIND: ClassVar[str] = "cnn"
    kind: str = "cnn"
    image_size: int = 224  # pictures are read image_size × image_size
    channels: int = 32  # the first block's channels, doubled by each block after it
    blocks: int = 3  # conv blocks, each halving the image
    coords: bool = False  # x, y coordinate channels beside the pixels (CoordConv)
    # Transformer encoder layers over the grid's cells (they take model.num_heads and
    # model.d_ff: arch transformer only); 0: the regions go to the decoder as they are
    layers: int = 0
    freeze: bool = False  # train all but the trunk (models/frozen.py)

    def __post_init__(self) -> None:
        sizes = {"image_size": self.image_size, "channels": self.channels, "blocks": self.blocks}
        _check(self.kind, "cnn", sizes)
        if not isinstance(self.coords, bool):
            raise ConfigError(f"model.encoder.coords: must be true or false, got {self.coords!r}")
        if isinstance(self.layers, bool) or not isinstance(self.layers, int) or self.layers < 0:
            raise ConfigError(
                f"model.encoder.layers: must be a whole number >= 0, got {self.layers!r}"
            )
        _check_freeze(self.freeze)
        if self.image_size < 2**self.blocks:
            raise ConfigError(
                f"model.encoder.blocks: {self.blocks} blocks halve a {self.image_size}-pixel "
                "image to nothing; use fewer blocks or a larger model.encoder.image_size"
            )


@dataclass(frozen=True)
class ViTEncoderConfig:
    """model.encoder kind vit: P × P patches, projected to d_model, under Transformer layers."""

    KIND: ClassVar[str] = "vit"
    ABSENT: ClassVar[dict] = {"freeze": _NO_TRUNK}  # why a key of another kind is not here
    freeze: ClassVar[bool] = False  # what readers of model.encoder.freeze see
    kind: str = "vit"
    image_size: int = 224
    patch_size: int = 16  # P × P pixels per patch
    layers: int = 2  # Transformer encoder layers over the patches

    def __post_init__(self) -> None:
        sizes = {"image_size": self.image_size, "patch_size": self.patch_size}
        _check(self.kind, "vit", {**sizes, "layers": self.layers})
        if self.image_size % self.patch_size:
            raise ConfigError(
                f"model.encoder.patch_size ({self.patch_size}) must divide "
                f"model.encoder.image_size ({self.image_size}): patches would leave pixels out"
            )


@dataclass(frozen=True)
class BackboneEncoderConfig:
    """model.encoder kind torchvision:<name>: a torchvision classifier's trunk (resnet18...)."""

    KIND: ClassVar[str] = "torchvision:<name>"
    kind: str = "torchvision:resnet18"
    image_size: int = 224
    weights: str | None = None  # a local weights file (else random init; never a download)
    freeze: bool = False  # train all but the trunk (models/frozen.py)

    def __post_init__(self) -> None:
        name = self.kind.removeprefix("torchvision:")
        if not self.kind.startswith("torchvision:") or not _NAME.fullmatch(name):
            raise ConfigError(
                f"model.encoder.kind: {self.kind!r:.60} does not name a torchvision model "
                "(torchvision:resnet18, say)"
            )
        check_positive("model.encoder.image_size", self.image_size)
        _check_freeze(self.freeze)

    @property
    def name(self) -> str:
        """The torchvision model: resnet18 of torchvision:resnet18."""
        return self.kind.removeprefix("torchvision:")


def _check_freeze(freeze) -> None:
    if not isinstance(freeze, bool):
        raise ConfigError(f"model.encoder.freeze: must be true or false, got {freeze!r}")


def check_image_model(c) -> None:
    """A ModelConfig `c`'s image encoder against the decoder it feeds."""
    kind = c.encoder.KIND
    if kind == "vit" and c.arch != "transformer":
        raise ConfigError(
            "model.encoder.kind vit: its encoder is Transformer layers; use model.arch "
            "transformer (an RNN decoder reads cnn or torchvision regions)"
        )
    if kind == "cnn" and c.encoder.layers and c.arch != "transformer":
        raise ConfigError(
            "model.encoder.layers: the CNN's encoder layers take model.num_heads and "
            "model.d_ff, which only arch transformer reads; use arch transformer or "
            "model.encoder.layers: 0"
        )
    if c.arch != "rnn":
        return
    decoder = c.decoder
    if decoder.attention.startswith("luong-local"):
        raise ConfigError(
            f"model.decoder.attention {decoder.attention}: local attention centres a window "
            "on a position of a sequence; image regions lie on a grid"
        )
    if decoder.copy:
        raise ConfigError("model.decoder.copy: a caption cannot copy words from an image")
    if decoder.attention == "none" and decoder.attention_penalty > 0:
        raise ConfigError(
            "model.decoder.attention_penalty: regularises attention; this decoder has none"
        )


def check_cache(feature_cache, model) -> None:
    """data.source.feature_cache against the ModelConfig `model`: a folder name, for a frozen
    trunk (the filesystem is checked when training starts, training/captions_task.py)."""
    if feature_cache is None:
        return
    if not isinstance(feature_cache, str):
        raise ConfigError(
            f"data.source.feature_cache: expected a folder name, got "
            f"{type(feature_cache).__name__} {feature_cache!r:.40}"
        )
    if not feature_cache.strip():
        raise ConfigError(
            "data.source.feature_cache: an empty name; give a folder, or leave the key out to "
            "compute the trunk's output every step"
        )
    if not model.encoder.freeze:
        raise ConfigError(
            "data.source.feature_cache keeps a frozen trunk's output, but "
            "model.encoder.freeze is false: set model.encoder.freeze: true (model.encoder.kind "
            "cnn or torchvision:<name>) or remove data.source.feature_cache"
        )


# The data keys only text translation reads, what each is, and what to do with it in an image
# model's config; an image model reads none of them (training/captions_task.py).
_CORPUS_FILES = [f"{s}_{k}" for s in ("train", "valid") for k in ("src", "tgt", "tsv", "jsonl")]
TEXT_DATA_KEYS = {
    **dict.fromkeys(_CORPUS_FILES, ("a text corpus file", "remove the key")),
    "jsonl_src_field": ("a field of JSON Lines text corpora", "remove the key"),
    "jsonl_tgt_field": ("a field of JSON Lines text corpora", "remove the key"),
    "joint_vocab": ("one vocabulary for source and target text", "remove the key"),
    "source.tokenizer": ("the tokenizer of source text", "give data.tgt_tokenizer alone"),
    "prepared": ("text pairs as token ids (heedful prepare)", "remove the key"),
    "shard_tokens": ("the shard size of data.prepared", "remove the key"),
    "corpora": ("text corpora, one per language pair", "remove the key"),
    "max_line_bytes": (
        "the longest line of a text corpus",
        "remove the key (captions files are read with the default, 16 MiB a line)",
    ),
}
# and the ones only captioning reads (data.source.feature_cache: check_cache)
IMAGE_DATA_KEYS = ("source.images", "captions", "valid_captions", "captions_format")


def _value(data, key: str):
    """data's value at `key`, a name or section.name (source.images)."""
    for part in key.split("."):
        data = getattr(data, part)
    return data


def check_task_keys(data, model, train, data_defaults) -> None:
    """The data and train keys of a Config against the task its model.encoder trains
    (experiment.task_for): a key that task would ignore is an error, unless it holds its
    default (run directories written before this check list every key). The tokenizer files
    come in pairs for text; an image model's source is pixels, so it takes a target one alone."""
    kind = model.encoder.kind
    if kind == "text":
        if (data.source.tokenizer is None) != (data.tgt_tokenizer is None):
            raise ConfigError("data.source.tokenizer and data.tgt_tokenizer: give both or neither")
        for key in IMAGE_DATA_KEYS:
            if _value(data, key) != _value(data_defaults, key):
                raise ConfigError(
                    f"data.{key}: only an image model (model.encoder.kind cnn, vit or "
                    "torchvision:<name>) reads it; this model's model.encoder.kind is text: "
                    "remove the key"
                )
        return
    for key, (what, fix) in TEXT_DATA_KEYS.items():
        if _value(data, key) != _value(data_defaults, key):
            raise ConfigError(
                f"data.{key}: {what}; model.encoder.kind {kind} trains on images and "
                f"captions (data.source.images, data.captions, data.valid_captions): {fix}"
            )
    if train.early_stopping_metric == "chrf":
        raise ConfigError(
            "train.early_stopping_metric: chrf is not among a captions run's validation "
            "scores (loss, ppl, bleu, bleu1 to bleu3, exact_match); use bleu or loss"
        )
