"""A training batch in pieces, side by side on the CPU's cores, one thread each.

Why: torch splits each operator of a step among its threads, and every operator ends with the
threads waiting for each other. Beside another busy process that costs most of a core: the
thread that shares its core with that process runs only part of the time, and the other waits
for it at every operator. So training dropped to one thread there (cpu.FreeCores) and kept the
rate of one core, 52-56% of the idle rate on a 2-core AMD EPYC, short of issue 30's 60%. Pieces
of the batch, each a forward and backward of its own on one thread, wait for each other once a
step instead, and the clipping and the update run on one thread too (Streams.step): beside a
busy loop `heedful train` kept 61% of its idle rate, and on the idle machine it trained the
Multi30k Transformer at 2,848 target tokens/s against 2,633 for whole batches on two threads
(docs/benchmarks.md, "Training on shared cores"), the tiny Transformer and the GRU 1.15x and
1.11x faster. torch lets go of Python's lock inside its operators, so one piece's Python runs
while the other's products do.

The pieces are the same whatever ran them: `pieces` rows of the batch each (a fixed count,
not one that follows the cores), each piece's dropout drawn from a generator of its own that
the step seeds from torch's default one (layers/dropout.drawing_from), and the pieces'
gradients added in piece order. So one thread running the pieces one after the other and two
running them side by side give the same weights to the last bit, and a resumed run repeats.

Only where that holds: a model whose randomness is all heedful's dropout (torch's dropout
modules, a multi-layer nn.GRU's dropout and attention dropout draw from the default generator)
and whose rows do not meet in a layer (batch norm); float32 on a CPU, one process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

import torch
from torch import nn

from heedful.cpu import run_side_by_side
from heedful.data.batching import Batch
from heedful.data.tokenizers import PAD_ID
from heedful.layers.attention import MultiHeadAttention
from heedful.layers.dropout import drawing_from

PIECES = 2  # a batch's pieces on a CPU when train.pieces is not set (measured on 2 cores)


class Streams(NamedTuple):
    pieces: int  # each batch's pieces
    side_by_side: int  # pieces at a time, in threads of our own (torch's threads shared among them)

    @contextmanager
    def step(self) -> Iterator[None]:
        """A whole optimizer step on each stream's share of torch's threads, the clipping and
        the update too: beside a busy process, a parallel region of two threads there would
        wait for the one that shares its core, as the pieces no longer do. And on the idle
        2-core EPYC, a first version that went back to two threads for the update every step
        trained the tiny Transformer 0.95-0.97x as fast as whole batches; this one, 1.15x
        (docs/benchmarks.md, "Pieces of a batch side by side")."""
        threads = torch.get_num_threads()
        each = max(1, threads // self.side_by_side)
        if each != threads:
            torch.set_num_threads(each)
        try:
            yield
        finally:
            if each != threads:
                torch.set_num_threads(threads)


def plan(setting: int | None, model: nn.Module, device, world_size: int, sliced: bool, echo=None):
    """Streams for train.pieces (`setting`) and the threads torch has now; a line to `echo`
    where pieces were asked for and cannot be."""
    pieces, why = pieces_for(setting, model, device, world_size, sliced)
    if why is not None and setting is not None and echo is not None:
        echo(f"train.pieces: 1, not {setting}: {why}")
    return Streams(pieces, min(pieces, torch.get_num_threads()))


def pieces_for(setting: int | None, model: nn.Module, device, world_size: int, sliced: bool):
    """(pieces per batch, why not more than one or None): train.pieces, or PIECES on a CPU
    where the pieces can give the weights one batch gives (the module docstring)."""
    wanted = PIECES if setting is None else setting
    if wanted == 1:
        return 1, None
    if torch.device(device).type != "cpu":
        why = "the pieces run on a CPU only"
    elif world_size > 1:
        why = "torchrun's processes already split each batch"
    elif not sliced:
        why = "bfloat16, or a model that cannot defer its output layer"
    else:
        why = _own_randomness(model)
    return (1, why) if why is not None else (wanted, None)


def _own_randomness(model: nn.Module) -> str | None:
    """Why the pieces of a batch would not repeat in `model`, or None."""
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0:
            return f"{name}: torch's dropout"
        if isinstance(module, nn.RNNBase) and module.dropout > 0 and module.num_layers > 1:
            return f"{name}: dropout between the layers of torch's {type(module).__name__}"
        if isinstance(module, MultiHeadAttention) and module.dropout > 0:
            return f"{name}: attention dropout (torch's kernel draws the mask)"
        if isinstance(module, nn.modules.batchnorm._NormBase):
            return f"{name}: batch norm, whose statistics take every row"
    return None


def split(batch: Batch, pieces: int) -> list[Batch] | None:
    """The batch's rows in `pieces` runs of (nearly) equal count, each cut to its own longest
    source and target; None where the source is not token ids or there are too few rows."""
    if pieces < 2 or len(batch.src) < pieces or batch.src.is_floating_point():
        return None
    parts = []
    for rows in torch.arange(len(batch.src)).tensor_split(pieces):
        src, tgt_in, tgt_out = (t[rows[0] : rows[-1] + 1] for t in batch)
        s = _length(src != PAD_ID)
        t = _length(tgt_out != PAD_ID)  # tgt_in is padding wherever tgt_out is
        parts.append(Batch(src[:, :s], tgt_in[:, :t], tgt_out[:, :t]))
    return parts


def _length(kept: torch.Tensor) -> int:
    """1 + the last column where any row keeps a token (at least 1)."""
    columns = kept.any(dim=0).nonzero()
    return int(columns[-1]) + 1 if len(columns) else 1


def backward_in_pieces(
    loss_of: Callable[[Batch], torch.Tensor],
    model: nn.Module,
    parts: list[Batch],
    scale: float,
    streams: int,
) -> float:
    """Σ loss_of(part) over the parts, each part's gradient of scale · loss added to the
    parameters' .grad in part order; `streams` parts at a time, side by side. A part that ends
    before the one ahead of it waits for it to add its gradient, so at most `streams` parts'
    gradients are held at once, whatever the count of parts."""
    params = [p for p in model.parameters() if p.requires_grad]
    # one draw each from the default generator: the pieces' masks, whoever runs them
    seeds = torch.randint(0, 2**62, (len(parts),)).tolist()
    added = [threading.Event() for _ in parts]  # set once part i is done with .grad
    losses: list[float] = []

    def run(i: int) -> None:
        try:
            with drawing_from(torch.Generator().manual_seed(seeds[i])):
                loss = loss_of(parts[i])
                grads = torch.autograd.grad(loss * scale, params, allow_unused=True)
            if i > 0:
                added[i - 1].wait()  # set in a finally: a part that failed does not hold us
            _add(params, grads)
            losses.append(loss.item())
        finally:
            added[i].set()

    if streams > 1:  # inside Streams.step the threads are already each stream's share
        run_side_by_side(run, list(range(len(parts))), streams, torch.get_num_threads())
    else:
        for i in range(len(parts)):
            run(i)
    return sum(losses)  # in part order: each part appends after the one ahead of it


def _add(params: list[nn.Parameter], grads) -> None:
    for p, g in zip(params, grads, strict=True):
        if g is not None:
            # contiguous: a gradient torch returned expanded cannot be added to in place
            p.grad = g.contiguous() if p.grad is None else p.grad.add_(g)
