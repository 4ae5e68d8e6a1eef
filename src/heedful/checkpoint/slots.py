"""The two sides of a model directory, each read from its slot and checked against config.json:
the source (data/sources.py: a text model's tokenizer.src, an image model's transform.json, or
the tokenizer.src an earlier heedful wrote for one) and the target tokenizer (tokenizer.tgt).

Every problem is a CheckpointError that names the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from heedful.config import ModelConfig
from heedful.data.sources import (
    IMAGE_SLOT,
    TEXT_SLOT,
    ImageSource,
    TextSource,
    read_legacy_image,
    read_transform,
)
from heedful.data.tokenizers import load_tokenizer
from heedful.io import CheckpointError, regular_file


def reads_images(config: ModelConfig) -> bool:
    """Whether a model's encoder reads pictures (model.encoder.kind cnn, vit, torchvision:...)."""
    return config.encoder.kind != "text"


def text_tokenizer(source):
    """The tokenizer of a TextSource; a CheckpointError for an image model's source, which
    anything that reads text (the exports, the CTranslate2 engine) cannot use."""
    if source.kind != "text":
        raise CheckpointError("an image captioning model: it reads pictures, not text")
    return source.tokenizer


def load_source(directory: Path, meta: dict, config: ModelConfig) -> TextSource | ImageSource:
    """The source side of a model directory, by what its model reads (`meta` and `config` as
    read_model_config checked them): a text model's tokenizer (tokenizer.src, checked against
    src_vocab_size); an image model's transform (transform.json, or tokenizer.src as an
    earlier heedful wrote it), whose size must be the model's image_size."""
    directory = Path(directory)
    if not reads_images(config):
        return TextSource(load_side(directory / TEXT_SLOT, "src_vocab_size", meta))
    path, read = directory / IMAGE_SLOT, read_transform
    if not os.path.lexists(path) and os.path.lexists(directory / TEXT_SLOT):
        path, read = directory / TEXT_SLOT, read_legacy_image  # an earlier heedful's place
    source = _read_side(path, read)
    size = config.encoder.image_size
    if source.transform.size != size:
        raise CheckpointError(
            f"{path}: images of {source.transform.size} pixels, but config.json's "
            f"model.encoder.image_size is {size}"
        )
    return source


def load_tokenizers(directory: Path, meta: dict, config: ModelConfig) -> tuple[Any, Any]:
    """tokenizer.src and tokenizer.tgt of a text model, each checked against config.json's
    vocabulary size (what reads text: the CTranslate2 engine). An image model is refused."""
    try:
        tokenizer = text_tokenizer(load_source(directory, meta, config))
    except CheckpointError as error:
        raise CheckpointError(f"{directory}: {error}") from None
    return tokenizer, load_side(Path(directory) / "tokenizer.tgt", "tgt_vocab_size", meta)


def load_side(path: Path, size_field: str, meta: dict):
    """A tokenizer checked against config.json's vocabulary size. One with more pieces than
    the model's embedding has rows makes ids the model cannot look up; one with fewer spells
    the model's outputs as the wrong pieces, silently."""
    tokenizer = _read_side(path, load_tokenizer)
    if len(tokenizer) != meta[size_field]:
        raise CheckpointError(
            f"{path}: the tokenizer has {len(tokenizer)} tokens, but config.json's {size_field} "
            f"(the rows of the model's embedding) is {meta[size_field]}; this tokenizer does not "
            "belong to this model"
        )
    return tokenizer


def _read_side(path: Path, read):
    """read(path), any problem a CheckpointError that names the file."""
    regular_file(path)
    try:
        return read(path)
    except (OSError, ValueError) as error:
        message = str(error) if str(path) in str(error) else f"{path}: {error}"
        raise CheckpointError(message) from None
