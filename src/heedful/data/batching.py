"""Token-based, length-bucketed batches: sentences of similar length together, little padding.

Everything here works on length arrays and index arrays (numpy), never on Python lists of the
whole corpus, so the same code batches 29 thousand pairs held in memory and 5 million pairs
memory-mapped from a prepared directory (data/prepared.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np
import torch

from heedful.data.tokenizers import BOS_ID, EOS_ID, PAD_ID


def length_buckets(
    src_lengths: Sequence[int] | np.ndarray,
    tgt_lengths: Sequence[int] | np.ndarray,
    batch_tokens: int,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Example indices sorted by length and cut into batches of at most `batch_tokens` padded
    tokens per side -> (order, bounds): batch k is order[bounds[k]:bounds[k + 1]].

    Sorted by (target, source) length, with ties in random order when `rng` is given; each cut
    is greedy: a batch takes examples while (its longest side) × (its size) stays within the
    budget, so it pads only up to its own longest member. Every index is in exactly one batch;
    an example longer than the budget forms a batch of its own rather than being dropped.
    """
    src = np.asarray(src_lengths, dtype=np.int64)
    tgt = np.asarray(tgt_lengths, dtype=np.int64)
    order = np.arange(len(src)) if rng is None else rng.permutation(len(src))
    order = order[np.lexsort((src[order], tgt[order]))]  # stable: the shuffle breaks ties
    src, tgt = src[order], tgt[order]
    bounds, i = [0], 0
    while i < len(order):
        # Targets only grow from i on, so no batch starting at i holds more than this many.
        window = max(1, batch_tokens // max(1, int(tgt[i])))
        longest = np.maximum(np.maximum.accumulate(src[i : i + window]), tgt[i : i + window])
        cost = longest * np.arange(1, len(longest) + 1)  # padded tokens, non-decreasing
        i += max(1, int(np.searchsorted(cost, batch_tokens, side="right")))
        bounds.append(i)
    return order, np.asarray(bounds, dtype=np.int64)


def bucketed_batches(
    src_lengths: Sequence[int] | np.ndarray,
    tgt_lengths: Sequence[int] | np.ndarray,
    batch_tokens: int,
    rng: np.random.Generator | None = None,
) -> list[list[int]]:
    """length_buckets as lists of indices, in length order (or shuffled when `rng` is given)."""
    order, bounds = length_buckets(src_lengths, tgt_lengths, batch_tokens, rng)
    batches = [order[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])]
    if rng is not None:
        batches = [batches[k] for k in rng.permutation(len(batches))]
    return batches


class Pairs(Protocol):
    """Tokenized (source, target) pairs, in memory or memory-mapped: their lengths (without
    <s> / </s>) as arrays, and the ids of any subset."""

    src_lengths: np.ndarray
    tgt_lengths: np.ndarray

    def __len__(self) -> int: ...
    def ids(self, indices: np.ndarray) -> tuple[list[list[int]], list[list[int]]]: ...
    def batch(self, indices: np.ndarray) -> Batch: ...


class InMemoryPairs:
    """Pairs held as Python lists of ids (a corpus small enough to read whole)."""

    def __init__(self, src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]]):
        if len(src_ids) != len(tgt_ids):
            raise ValueError(f"{len(src_ids)} sources but {len(tgt_ids)} targets")
        self.src_ids, self.tgt_ids = src_ids, tgt_ids
        self.src_lengths = np.fromiter(map(len, src_ids), np.int64, len(src_ids))
        self.tgt_lengths = np.fromiter(map(len, tgt_ids), np.int64, len(tgt_ids))

    def __len__(self) -> int:
        return len(self.src_ids)

    def ids(self, indices: np.ndarray) -> tuple[list[list[int]], list[list[int]]]:
        return [self.src_ids[i] for i in indices], [self.tgt_ids[i] for i in indices]

    def batch(self, indices: np.ndarray) -> Batch:
        return collate(*self.ids(indices))


class EpochPlan(NamedTuple):
    """One epoch's batches: batch k holds order[bounds[b]:bounds[b + 1]] with b = shuffle[k]."""

    order: np.ndarray
    bounds: np.ndarray
    shuffle: np.ndarray

    def __len__(self) -> int:
        return len(self.shuffle)

    def batch(self, k: int) -> np.ndarray:
        b = self.shuffle[k]
        return self.order[self.bounds[b] : self.bounds[b + 1]]


def epoch_plan(pairs: Pairs, batch_tokens: int, seed: int, epoch: int) -> EpochPlan:
    """The batches of one epoch, a function of (seed, epoch) alone: a resumed run, or another
    process of the same run, computes the same plan without being told it.

    Lengths count <s> or </s> (+1), as the decoder's input and output do.
    """
    rng = np.random.default_rng([seed, epoch])
    order, bounds = length_buckets(pairs.src_lengths, pairs.tgt_lengths + 1, batch_tokens, rng)
    return EpochPlan(order, bounds, rng.permutation(len(bounds) - 1))


def pad(sequences: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> torch.Tensor:
    """Right-pad id lists into a (B, L) tensor."""
    width = max((len(s) for s in sequences), default=0)
    out = torch.full((len(sequences), max(width, 1)), pad_id, dtype=torch.long)
    for row, seq in enumerate(sequences):
        out[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    return out


class Batch(NamedTuple):
    """Padded ids: src (B, S); tgt_in (B, T) = <s> y, what the decoder reads; tgt_out (B, T) =
    y </s>, what it should predict (teacher forcing)."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor

    def to(self, device: str | torch.device) -> Batch:
        return Batch(*(t.to(device) for t in self))

    def target_tokens(self) -> int:
        """The target positions that are not padding: what the loss averages over."""
        return int((self.tgt_out != PAD_ID).sum())


def from_padded(src: np.ndarray, tgt: np.ndarray, tgt_lengths: np.ndarray) -> Batch:
    """collate() for ids already in zero-padded arrays (B, S) and (B, T) with the targets'
    lengths: the same Batch, built without a loop over sentences."""
    rows = np.arange(len(tgt))
    tgt_in = np.zeros((len(tgt), tgt.shape[1] + 1), np.int64)
    tgt_in[:, 0], tgt_in[:, 1:] = BOS_ID, tgt  # <s> y
    tgt_out = np.zeros_like(tgt_in)
    tgt_out[:, :-1] = tgt
    tgt_out[rows, tgt_lengths] = EOS_ID  # y </s>
    if src.shape[1] == 0:
        src = np.zeros((len(src), 1), np.int64)
    return Batch(*(torch.from_numpy(a) for a in (src, tgt_in, tgt_out)))


def collate(src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]]) -> Batch:
    """Source and target id lists -> a Batch: src (B, S), tgt_in = <s> y, tgt_out = y </s>."""
    return Batch(
        pad(src_ids),
        pad([[BOS_ID, *t] for t in tgt_ids]),
        pad([[*t, EOS_ID] for t in tgt_ids]),
    )
