"""Dropout (Srivastava et al. 2014) with a cheaper mask on a CPU.

torch's CPU dropout draws its mask with `bernoulli_`, one generator call per element, and took
12-17% of the Multi30k Transformer's training step on 2 cores under the profiler. Here one
64-bit draw gives four 16-bit uniform numbers, and an element is dropped when its number falls
below p·2¹⁶: the same Bernoulli mask in 2.4x less time, forward and backward (a one-off
measurement: 22.6 against 9.0 ms for 3,000 × 1,024 floats); benchmarks/profile_training.py
measures the whole step with each (docs/benchmarks.md, "Where a training step's time goes").
The drop rate is p rounded to a multiple of 2⁻¹⁶ (0.1 becomes 0.100006), and the kept elements
are scaled by the inverse of the rate actually used, so E[dropout(x)] = x exactly. The draws
come from torch's default generator: torch.manual_seed makes runs repeat, and a resumed run's
saved generator state continues the same masks. A thread may draw from a generator of its own
instead (`drawing_from`): training's pieces of a batch, run side by side on threads
(training/streams.py), would otherwise take their masks from one generator in whatever order
the threads reach it, and no two runs would repeat. Other devices keep torch's fused kernel.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

LEVELS = 1 << 16  # a 16-bit uniform number per element
_thread = threading.local()  # .generator: this thread's own, while drawing_from is in force


@contextmanager
def drawing_from(generator: torch.Generator) -> Iterator[None]:
    """The masks this thread draws inside the block come from `generator`, not torch's
    default one (other threads go on as before)."""
    previous = getattr(_thread, "generator", None)
    _thread.generator = generator
    try:
        yield
    finally:
        _thread.generator = previous


def random_halfwords(shape: torch.Size) -> torch.Tensor:
    """int16 tensor of `shape`, every value equally likely, four from each 64-bit draw."""
    n = shape.numel()
    generator = getattr(_thread, "generator", None)  # None: torch's default generator
    words = torch.empty((n + 3) // 4, dtype=torch.int64)
    words.random_(-(2**63), None, generator=generator)  # all 64 bits
    return words.view(torch.int16)[:n].view(shape)


def check_probability(p: float) -> float:
    if not 0.0 <= p <= 1.0:  # also refuses NaN
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    return p


def dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """x with each element zeroed with probability p and the rest scaled by 1 / (1 - p)."""
    dropped = round(check_probability(p) * LEVELS)  # how many of the 2¹⁶ values drop an element
    if x.device.type != "cpu" or dropped in (0, LEVELS):
        return F.dropout(x, p, training=True) if p > 0.0 else x
    keep = random_halfwords(x.shape) >= dropped - LEVELS // 2  # P(keep) = 1 - dropped / 2¹⁶
    scale = LEVELS / (LEVELS - dropped)  # 1 / P(keep): the expectation stays x
    if torch.finfo(x.dtype).bits >= 32:
        return x * keep.to(x.dtype).mul_(scale)  # one mask holding 0 or the scale
    # bfloat16 or float16 would round the scale (1/0.9 to 1.109 in bfloat16): scale apart
    return x * keep.to(x.dtype) * scale


class Dropout(nn.Module):
    """nn.Dropout's drop-and-rescale in training and the identity in eval mode, through
    `dropout` above."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        self.p = check_probability(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p) if self.training and self.p > 0.0 else x

    def extra_repr(self) -> str:
        return f"p={self.p}"
