"""What the Transformer decoder carries from step to step in a search: each layer's
self-attention keys and values so far (KVCache), the cross-attention keys and values of the
sources, and which decode rows read which source (TransformerState). Searches reorder, drop and
tile rows through `TransformerState.index_select`; models/transformer.py's decoder reads it."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

KV = tuple[torch.Tensor, torch.Tensor]  # projected keys and values, (B, H_kv, len, D/H) each
LEAST_CAPACITY = 16  # positions a cache's buffer holds at the least


class KVCache(tuple):
    """A decoder layer's self-attention keys and values of the positions so far: the pair
    (k, v), (B, H_kv, t, D/H) each, as views into one buffer (2, B, H_kv, capacity, D/H), K
    then V, with room for more positions (H_kv = H unless grouped-query: the cache is what GQA
    makes smaller). K and V each keep the layout (B, H_kv, ·, D/H) of a buffer of their own,
    so that their rows and heads flatten into one axis without a copy (attention.py's
    one-query path; K's and V's heads side by side per row would not).

    A decoding step writes its one new position in place, where torch.cat would copy the whole
    past every step, and beam search's reordering gathers only the filled positions, with
    index_select (in beam 5 on Multi30k, cat and the gathers by advanced indexing were
    17% of the search's time under torch.profiler). One buffer for both: a search's step gets
    the new K and V side by side from one product (transformer_step.py), so it writes them
    with one copy, and a reordering gathers both with one index_select.
    Caches made one from another share the buffer; `filled` (shared) says how many positions
    hold values, so appending to a cache that is not the newest (two steps from one state)
    copies first, and every cache keeps the values it was made with.
    """

    def __new__(cls, buffer: torch.Tensor, length: int, filled: list[int]):
        # K and V by select, not unbind: under autograd the buffer is written in place after
        # they are made, which views from a function of several outputs do not allow
        kv = buffer.narrow(3, 0, length)
        cache = super().__new__(cls, (kv.select(0, 0), kv.select(0, 1)))
        cache.buffer, cache.length, cache.filled = buffer, length, filled
        return cache

    def __getnewargs__(self):  # copy and pickle build it as __new__ does
        return self.buffer, self.length, self.filled

    @classmethod
    def of(cls, kv: KV | None) -> KVCache | None:
        """A cache of the pair kv (a copy), kv itself if it is one; None stays None."""
        if kv is None or isinstance(kv, KVCache):
            return kv
        return cls._grown(kv, kv[0].size(2), kv[0].size(2))

    @classmethod
    def _grown(cls, kv: KV, length: int, need: int) -> KVCache:
        """A copy of kv's first `length` positions in a new buffer with room for `need`."""
        b, h, _, d = kv[0].shape
        capacity = max(LEAST_CAPACITY, need, 2 * length)  # doubling: the copies cost O(1) per step
        buffer = kv[0].new_empty(2, b, h, capacity, d)
        for i, x in enumerate(kv):  # select: iterating gives views autograd cannot write
            buffer.select(0, i).narrow(2, 0, length).copy_(x.narrow(2, 0, length))
        return cls(buffer, length, [length])

    def append(self, k: torch.Tensor, v: torch.Tensor | None = None) -> KVCache:
        """The cache with positions k, v (B, H_kv, n, D/H) added after its own; or, v None, k
        the pair side by side (B, 2 H_kv, n, D/H), K's heads then V's, written with one copy."""
        t, n = self.length, k.size(2)
        cache = self.room(n)
        new = cache.buffer.narrow(3, t, n)  # (2, B, H_kv, n, D/H)
        if v is None:  # (B, 2 H_kv, n, D/H) as (2, B, H_kv, n, D/H), a view
            b, heads, _, d = k.shape
            new.copy_(k.view(b, 2, heads // 2, n, d).transpose(0, 1))
        else:
            for i, x in enumerate((k, v)):
                new.select(0, i).copy_(x)
        cache.filled[0] = t + n
        return KVCache(cache.buffer, t + n, cache.filled)

    def room(self, n: int) -> KVCache:
        """A cache of these positions whose buffer takes n more after them in place: this one,
        or a copy where the buffer is full or holds a newer cache's positions there."""
        if self.filled[0] != self.length or self.length + n > self.buffer.size(3):
            return KVCache._grown(self, self.length, self.length + n)
        return self

    @classmethod
    def empty(cls, like: torch.Tensor, rows: int, heads: int, d_head: int) -> KVCache:
        """A cache of no positions yet for `rows` rows (like: a tensor of the dtype and device)."""
        return cls(like.new_empty(2, rows, heads, LEAST_CAPACITY, d_head), 0, [0])

    def index_select(self, index: torch.Tensor) -> KVCache:
        """Rows `index` of the filled positions, gathered into a new buffer with room for one
        more position. Not the old capacity: beam search gathers every step, so the room that
        doubling keeps for later appends is never used there, and it was half the peak memory
        of beam 5 (two batches in flight, 3 layers, 320 rows: up to 126 MiB a batch at a
        capacity of 64 positions)."""
        t = self.length
        _, _, h, _, d = self.buffer.shape  # (2, B, H_kv, capacity, D/H)
        buffer = self.buffer.new_empty(2, len(index), h, t + 1, d)
        torch.index_select(self.buffer.narrow(3, 0, t), 1, index, out=buffer.narrow(3, 0, t))
        return KVCache(buffer, t, [t])


@dataclass
class TransformerState:
    """What the decoder carries from step to step. Decode rows that read one source share its
    cross-attention keys and values: rows b·beams .. b·beams + beams - 1 read source b, so beam
    search's K beams of a sentence are K queries against one copy of its keys and values, not K
    copies, and nothing is copied again when a sentence leaves (beam 5, batch 64, 3 layers,
    d_model 256, a 34-piece source: 2 · 3 · 320 · 34 · 256 floats, 64 MiB, become 13 MiB)."""

    cross_kv: list[KV]  # per layer, (B_src, H_kv, S, D/H), computed once per source
    self_kv: list[KV | None]  # per layer, grows by one position each step (KVCache in search)
    position: int = 0
    src_mask: torch.Tensor | None = None  # (B_src, 1, S) the sources' real tokens
    beams: int = 1  # consecutive decode rows per source
    plan: object | None = None  # transformer_step.StepPlan: the step without the modules' calls

    def index_select(self, index: torch.Tensor, same_sources: bool = False) -> TransformerState:
        """Rows `index` of the state. same_sources: each new row reads the same source sentence
        as the old row at its place (beam search reordering beams within their sentence), so
        the cross-attention keys and values, a function of the source alone, stay as they are
        (in int8 beam search on Multi30k the copies of all caches were 35% of the time; leaving
        these out brought them to 18%). index_select, not kv[index]: advanced indexing was 3-4x
        slower for these (B, H, len, D/H) gathers."""

        def pick(kv, rows=index):
            if kv is None or isinstance(kv, KVCache):
                return None if kv is None else kv.index_select(rows)
            return kv[0].index_select(0, rows), kv[1].index_select(0, rows)

        past = [pick(kv) for kv in self.self_kv]
        if same_sources:
            return replace(self, self_kv=past)
        sources, beams = self._sources(index)
        cross = [pick(kv, sources) for kv in self.cross_kv]
        mask = None if self.src_mask is None else self.src_mask.index_select(0, sources)
        return replace(self, cross_kv=cross, self_kv=past, src_mask=mask, beams=beams)

    def _sources(self, index: torch.Tensor) -> tuple[torch.Tensor, int]:
        """The sources the new rows read, and how many consecutive rows read each: one row per
        source unless the rows come in equal runs of one source (search tiling a sentence into
        its beams, or dropping whole sentences), which then share it."""
        sources = torch.div(index, self.beams, rounding_mode="floor")  # (R',) each row's source
        if sources.numel() == 0:
            return sources, 1
        firsts, runs = sources.unique_consecutive(return_counts=True)
        if bool((runs == runs[0]).all()):
            return firsts, int(runs[0])
        return sources, 1
