"""A model's input side, its Source: what turns the inputs of Translator.translate into the batch
tensor the encoder reads, names an input in errors and traces, and labels the source positions
the attention points at.

    TextSource    texts -> ids (B, S) by a tokenizer (character or SentencePiece, or a Hugging
                  Face model's); the positions are the tokenizer's pieces
    ImageSource   pictures (files, bytes, pixel arrays) -> (B, 3, size, size) by an
                  ImageTransform (data/images.py); the positions are the regions of the grid
                  the model's encoder cuts a picture into, "r1c1" ... row-major

The two are different kinds of thing, each in its own slot of a model directory: a text
model's tokenizer in tokenizer.src, an image model's transform in transform.json. An image
model that an earlier heedful saved keeps its transform in tokenizer.src, as JSON of "kind":
"image"; that is still read (read_legacy_image).

Shapes: B inputs, S source positions (tokens, or gh·gw regions).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from heedful.data.batching import pad
from heedful.data.tokenizers import Tokenizer, load_tokenizer, seen_tokens

TEXT_SLOT, IMAGE_SLOT = "tokenizer.src", "transform.json"  # each kind's file in a model directory
# a file, its bytes, (H, W, 3) uint8 RGB pixels, or a (3, size, size) tensor load_image made
ImageInput = str | Path | bytes | np.ndarray | torch.Tensor


class Source(Protocol):
    """What a Translator needs of its model's input side, whichever kind it is."""

    kind: str  # "text" | "image": what translate() takes
    slot: str  # its file in a model directory
    grid: tuple[int, int] | None  # a picture's gh × gw regions; None for text
    vocab_size: int | None  # rows of the model's source embedding; None for pictures

    def for_model(self, model) -> Source: ...  # as `model` reads it (an image's grid)
    def inputs(self, items: Sequence) -> list: ...  # a list of inputs; one alone is refused
    def blank(self, item) -> bool: ...  # nothing to read: answered with an empty output
    def length(self, item) -> int: ...  # the S the output limit counts (ratio · S + offset)
    def batch(self, items: Sequence, device) -> torch.Tensor: ...  # (B, S) ids or pixels
    def row(self, batch: torch.Tensor, row: int, item) -> torch.Tensor: ...  # one, unpadded
    def labels(self, item) -> list[str]: ...  # Translation.source_tokens
    def seen(self, item) -> list[str]: ...  # a trace's source_tokens: as the model saw them
    def describe(self, item) -> str: ...  # a trace's `source`
    def save(self, directory: Path) -> None: ...  # into its slot


class TextSource:
    """A text model's input side: its source tokenizer."""

    kind, slot = "text", TEXT_SLOT
    grid = None

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer

    @property
    def vocab_size(self) -> int:
        """The rows of the model's source embedding: config.json's src_vocab_size."""
        return len(self.tokenizer)

    def for_model(self, model) -> TextSource:
        return self

    def inputs(self, items: Sequence[str]) -> list[str]:
        return list(items)

    def blank(self, item: str) -> bool:
        return not item.strip()

    def length(self, item: str) -> int:
        return len(self.tokenizer.encode(item))

    def batch(self, items: Sequence[str], device) -> torch.Tensor:
        return pad([self.tokenizer.encode(item) for item in items]).to(device)  # (B, S)

    def row(self, batch: torch.Tensor, row: int, item: str) -> torch.Tensor:
        return batch[row : row + 1, : self.length(item)]  # (1, S) without the padding

    def labels(self, item: str) -> list[str]:
        return self.tokenizer.tokens(item)

    def seen(self, item: str) -> list[str]:
        return seen_tokens(self.tokenizer, item)  # <unk> (猫) where the model saw <unk>

    def describe(self, item: str) -> str:
        return item

    def save(self, directory: Path) -> None:
        self.tokenizer.save(Path(directory) / self.slot)


class ImageSource:
    """An image model's input side: the ImageTransform of data/images.py (how a picture becomes
    the encoder's input) and, once bound to a model (for_model), the gh × gw grid of regions its
    encoder makes of a picture of transform.size pixels."""

    kind, slot = "image", IMAGE_SLOT
    vocab_size = None  # pixels are not looked up in an embedding

    def __init__(self, transform, grid: tuple[int, int] | None = None):
        self.transform, self.grid = transform, grid

    def for_model(self, model) -> ImageSource:
        return ImageSource(self.transform, tuple(model.grid(self.transform.size)))

    def inputs(self, items: Sequence[ImageInput]) -> list[ImageInput]:
        if isinstance(items, (str, Path, bytes, np.ndarray, torch.Tensor)):
            raise TypeError("translate() takes a list of images, not one image")
        return list(items)

    def blank(self, item: ImageInput) -> bool:
        return False  # a picture always has something to say

    def length(self, item: ImageInput) -> int:
        return 0  # no source length: a caption's limit is max_len_offset (decoding.py)

    def tensor(self, item: ImageInput, index: int = 0) -> torch.Tensor:
        """(3, size, size) float32 of a file, bytes, or (H, W, 3) uint8 pixels, normalised by
        the transform (data/images.py's rules; pixels of another size are resized there too).
        A bad image is an ImageError naming it (bytes and arrays by their position)."""
        from heedful.data.images import ImageError, load_image, normalize

        size = self.transform.size
        if isinstance(item, torch.Tensor):  # already decoded (the server's upload, decoded once)
            if tuple(item.shape) != (3, size, size):
                wanted, got = (3, size, size), tuple(item.shape)
                raise ImageError(f"image {index + 1} (array): expected {wanted}, got {got}")
            return item
        if isinstance(item, bytes):
            return load_image(item, self.transform, f"image {index + 1} (bytes)")
        if not isinstance(item, np.ndarray):
            if isinstance(item, str) and not Path(item).exists():
                raise ImageError(
                    f"{item[:60]!r}: no such image file; this is an image captioning model, "
                    "which reads pictures (files, their bytes or pixel arrays), not text"
                )
            return load_image(item, self.transform)
        name = f"image {index + 1} (array)"
        if item.ndim != 3 or item.shape[2] != 3 or item.dtype != np.uint8:
            got = f"{tuple(item.shape)} {item.dtype}"
            raise ImageError(f"{name}: pixels must be (H, W, 3) uint8 RGB, got {got}")
        if item.shape[:2] == (size, size):
            return normalize(item, self.transform)
        return load_image(_png_bytes(item), self.transform, name)

    def batch(self, items: Sequence[ImageInput], device) -> torch.Tensor:
        tensors = [self.tensor(item, i) for i, item in enumerate(items)]
        return torch.stack(tensors).to(device)  # (B, 3, size, size)

    def row(self, batch: torch.Tensor, row: int, item: ImageInput) -> torch.Tensor:
        return batch[row : row + 1]  # (1, 3, size, size)

    def labels(self, item: ImageInput | None = None) -> list[str]:
        """The S = gh·gw regions' names, row-major, numbered from 1 as a reader counts."""
        rows, columns = self.grid
        return [f"r{i + 1}c{j + 1}" for i in range(rows) for j in range(columns)]

    seen = labels  # every region is seen as it is

    def describe(self, item: ImageInput) -> str:
        if isinstance(item, (str, Path)):
            return Path(item).name
        return "image array" if isinstance(item, (np.ndarray, torch.Tensor)) else "image bytes"

    def save(self, directory: Path) -> None:
        text = json.dumps(self.transform.to_dict())
        (Path(directory) / self.slot).write_text(text, encoding="utf-8")


def _png_bytes(pixels: np.ndarray) -> bytes:
    """Pixels of another size as a PNG, so that they are resized as files are (Pillow)."""
    import io

    from heedful.data.images import ImageError

    try:
        from PIL import Image
    except ImportError:
        raise ImageError("resizing an image array needs Pillow: pip install pillow") from None
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def as_source(side: Any) -> TextSource | ImageSource:
    """A Source as it is, and a tokenizer as the TextSource around it: what callers that hand
    a Translator or save_model_dir a tokenizer (as they always did) give."""
    return side if isinstance(side, (TextSource, ImageSource)) else TextSource(side)


def read_transform(path: Path) -> ImageSource:
    """transform.json: the ImageTransform's fields, every one checked."""
    from heedful.data.images import ImageError, ImageTransform

    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise ValueError(f"{path}: not a JSON image transform ({error})") from None
    try:
        return ImageSource(ImageTransform.from_dict(data))
    except (ImageError, TypeError) as error:
        raise ValueError(f"{path}: {error}") from None


def read_legacy_image(path: Path) -> ImageSource:
    """An image model's tokenizer.src as heedful wrote it before transform.json: JSON of
    {"kind": "image", "transform": {...}}; a text tokenizer there is a ValueError."""
    from heedful.data.images import ImageError, ImageTransform

    def image(data, where) -> ImageSource:
        if set(data) != {"kind", "transform"}:
            raise ValueError(f"{where}: an image model's file has the fields kind and transform")
        try:
            return ImageSource(ImageTransform.from_dict(data["transform"]))
        except (ImageError, TypeError) as error:
            raise ValueError(f"{where}: {error}") from None

    found = load_tokenizer(path, {"image": image})
    if not isinstance(found, ImageSource):
        raise ValueError(
            f"{path}: a text tokenizer, as a text model has; this image model reads pictures "
            f"({IMAGE_SLOT} holds how)"
        )
    return found
