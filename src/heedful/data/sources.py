"""A model's source side, what tokenizer.src holds: a text tokenizer (character or SentencePiece)
or, for an image model, the transform that turns a picture into the encoder's input.

The two are different kinds of thing in one slot of a model directory; this module is where
the slot is read, so that tokenizers.py knows nothing of pictures (and imports no image code).
"""

from __future__ import annotations

from pathlib import Path

from heedful.data.image_pairs import ImageSource
from heedful.data.tokenizers import Tokenizer, load_tokenizer


def load_source(path: str | Path) -> Tokenizer | ImageSource:
    """tokenizer.src (or .tgt) of a model directory: a tokenizer, or JSON of "kind": "image"
    (an image model's ImageSource, its ImageTransform inside)."""
    return load_tokenizer(path, {"image": ImageSource.from_json})
