"""The training batches, epoch after epoch: reproducible, resumable, split across processes.

The position in the stream is (epoch, batch); each epoch's plan is a function of the seed and
the epoch number (batching.epoch_plan), so that pair of numbers, saved in the training state,
is all a resumed run needs to continue with exactly the batches the uninterrupted run would
have seen. In a torchrun run every process computes the same plan and reads only its own rows
of each global batch (rows rank, rank + world_size, ...), so no process reads the whole corpus.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from heedful.data.batching import Batch, EpochPlan, Pairs, epoch_plan


class Shard(NamedTuple):
    """This process's part of one global batch."""

    batch: Batch
    weight: float  # 0.0 when the global batch has fewer rows than processes (a stand-in row)
    global_tokens: int  # target tokens of the whole global batch: what the loss averages over


def _rows(plan: EpochPlan, k: int, rank: int, world_size: int) -> tuple[np.ndarray, float]:
    rows = plan.batch(k)
    mine = rows[rank::world_size]
    return (mine, 1.0) if len(mine) else (rows[:1], 0.0)


class _EpochShards(torch.utils.data.Dataset):
    """Item k: this process's Shard of the epoch's batch k (a Dataset, so a DataLoader's worker
    processes can collate ahead of the training step)."""

    def __init__(self, pairs: Pairs, plan: EpochPlan, rank: int, world_size: int):
        self.pairs, self.plan, self.rank, self.world_size = pairs, plan, rank, world_size

    def __len__(self) -> int:
        return len(self.plan)

    def __getitem__(self, k: int) -> Shard:
        mine, weight = _rows(self.plan, k, self.rank, self.world_size)
        # every target has one more position (</s>) than tokens
        tokens = int((self.pairs.tgt_lengths[self.plan.batch(k)] + 1).sum())
        return Shard(self.pairs.batch(mine), weight, tokens)


class BatchStream:
    """This process's shards of the global batches, from any (epoch, batch) position on.

    workers > 0 collates in that many DataLoader worker processes, a few batches ahead; the
    order and content of the batches do not depend on it.
    """

    def __init__(
        self,
        pairs: Pairs,
        batch_tokens: int,
        seed: int,
        epoch: int = 0,
        batch: int = 0,
        rank: int = 0,
        world_size: int = 1,
        workers: int = 0,
    ):
        self.pairs, self.batch_tokens, self.seed = pairs, batch_tokens, seed
        self.rank, self.world_size, self.workers = rank, world_size, workers
        self.epoch, self.batch = epoch, batch
        self.plan = epoch_plan(pairs, batch_tokens, seed, epoch)
        self._shards = self._iterate()

    def __len__(self) -> int:
        """Batches in the current epoch."""
        return len(self.plan)

    def epochs_done(self) -> int:
        """Complete passes over the data so far."""
        return self.epoch + (1 if self.batch >= len(self.plan) else 0)

    def next(self) -> Shard:
        if self.batch >= len(self.plan):
            self.epoch, self.batch = self.epoch + 1, 0
            self.plan = epoch_plan(self.pairs, self.batch_tokens, self.seed, self.epoch)
            self._shards = self._iterate()
        self.batch += 1
        return next(self._shards)

    def _iterate(self):
        """The current epoch's shards from self.batch on."""
        shards = _EpochShards(self.pairs, self.plan, self.rank, self.world_size)
        if self.workers == 0:
            return (shards[k] for k in range(self.batch, len(self.plan)))
        loader = torch.utils.data.DataLoader(
            shards,
            batch_size=None,  # items are whole batches already
            sampler=range(self.batch, len(self.plan)),
            num_workers=self.workers,
            persistent_workers=False,
        )
        return iter(loader)
