"""Image-caption pairs as training data: the `Pairs` that batching, the batch stream and the
training loop already read (batching.py), with pictures as the sources.

One pair per caption (an image with five captions is five pairs); a batch stacks its images
into one float tensor (B, 3, size, size) and pads its captions as for text. A source's
"length" is its number of regions, so the token budget of a batch (train.batch_tokens) counts
the S regions each image puts in the decoder's memory: batches hold batch_tokens // S images.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from heedful.data.batching import Batch, pad
from heedful.data.tokenizers import BOS_ID, EOS_ID


class ImagePairs:
    """Pair i is (image image_index[i], caption tgt_ids[i]); `load(j)` gives image j as a
    (3, size, size) float tensor, when a batch needs it (a picklable callable, so DataLoader
    workers can collate)."""

    def __init__(
        self,
        load: Callable[[int], torch.Tensor],
        image_index: Sequence[int],
        tgt_ids: Sequence[Sequence[int]],
        regions: int,
    ):
        if len(image_index) != len(tgt_ids):
            raise ValueError(f"{len(image_index)} images but {len(tgt_ids)} captions")
        self.load, self.image_index, self.tgt_ids = load, np.asarray(image_index), tgt_ids
        self.src_lengths = np.full(len(tgt_ids), regions, dtype=np.int64)
        self.tgt_lengths = np.fromiter(map(len, tgt_ids), np.int64, len(tgt_ids))

    def __len__(self) -> int:
        return len(self.tgt_ids)

    def ids(self, indices: np.ndarray) -> tuple[list[list[int]], list[list[int]]]:
        """The image numbers (as one-element "sources") and the caption ids."""
        return [[int(self.image_index[i])] for i in indices], [self.tgt_ids[i] for i in indices]

    def batch(self, indices: np.ndarray) -> Batch:
        images = torch.stack([self.load(int(self.image_index[i])) for i in indices])
        return caption_batch(images, [self.tgt_ids[i] for i in indices])


def caption_batch(images: torch.Tensor, captions: Sequence[Sequence[int]]) -> Batch:
    """images (B, 3, H, W) and caption ids -> Batch(images, <s> y, y </s>), as collate()."""
    return Batch(
        images,
        pad([[BOS_ID, *t] for t in captions]),  # (B, T) <s> y
        pad([[*t, EOS_ID] for t in captions]),  # (B, T) y </s>
    )


class FileImages:
    """Image j of a list of files, read and normalised by data/images.py's load_image."""

    def __init__(self, paths: Sequence[Path], transform):
        self.paths, self.transform = list(paths), transform

    def __call__(self, j: int) -> torch.Tensor:
        from heedful.data.images import load_image

        return load_image(self.paths[j], self.transform)


def caption_pairs(
    items: Sequence[tuple[Path, list[str]]], tokenizer, max_length: int, load, regions: int
) -> ImagePairs:
    """ImagePairs of read_captions' (image, captions) items: one pair per caption of at most
    max_length tokens (longer ones are dropped, as data.max_length drops long text pairs)."""
    index, ids = [], []
    for j, (_, captions) in enumerate(items):
        for caption in captions:
            encoded = tokenizer.encode(caption)
            if 0 < len(encoded) <= max_length:
                index.append(j)
                ids.append(encoded)
    return ImagePairs(load, index, ids, regions)
