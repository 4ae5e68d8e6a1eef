"""Token-based, length-bucketed batches: sentences of similar length together, little padding."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import NamedTuple

import torch

from heedful.data.tokenizers import BOS_ID, EOS_ID, PAD_ID


def bucketed_batches(
    src_lengths: Sequence[int],
    tgt_lengths: Sequence[int],
    batch_tokens: int,
    rng: random.Random | None = None,
) -> list[list[int]]:
    """Group example indices into batches of at most `batch_tokens` padded tokens per side.

    Examples are sorted by length (random tie-breaking when `rng` is given) and cut greedily,
    so each batch pads only up to its own longest member; the batch order is then shuffled.
    Every index appears in exactly one batch. A single example longer than the budget still
    forms a batch of its own rather than being dropped.
    """
    order = list(range(len(src_lengths)))
    if rng is not None:
        rng.shuffle(order)  # random order among equal lengths
    order.sort(key=lambda i: (tgt_lengths[i], src_lengths[i]))
    batches, current, longest_src, longest_tgt = [], [], 0, 0
    for i in order:
        s, t = max(longest_src, src_lengths[i]), max(longest_tgt, tgt_lengths[i])
        if current and max(s, t) * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, s, t = [], src_lengths[i], tgt_lengths[i]
        current.append(i)
        longest_src, longest_tgt = s, t
    if current:
        batches.append(current)
    if rng is not None:
        rng.shuffle(batches)
    return batches


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


def collate(src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]]) -> Batch:
    """Source and target id lists -> a Batch: src (B, S), tgt_in = <s> y, tgt_out = y </s>."""
    return Batch(
        pad(src_ids),
        pad([[BOS_ID, *t] for t in tgt_ids]),
        pad([[*t, EOS_ID] for t in tgt_ids]),
    )
