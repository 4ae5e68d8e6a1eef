"""The decoder's search step on one CPU thread with numpy between its products.

Why: one sentence at a time, a step's arithmetic between its products is a few thousand
numbers (one query's attention over a few dozen keys, residual sums over 256), and each torch
operator around them costs far more than its arithmetic: about 9 µs inside a step, where the
products stream the weights through the caches and evict torch's own code and data (one
thread of the Zen 3 EPYC, docs/benchmarks.md "Session 35"); numpy's calls on such arrays cost
a few. The products themselves go through numpy's OpenBLAS with no torch call between
(Product.numpy), the small weights too, which StepPlan's torch path multiplies by torch's
BLAS. A greedy step of the Multi30k recipe's Transformer at one row took 2.5 ms this way
against 3.0 ms through StepPlan's torch operators, inside whole searches (docs/benchmarks.md,
"Session 36"). LayerNorm stays torch's (one operator, where numpy's takes seven calls).

The step is StepPlan's (models/transformer_step.py), operator for operator, with the plan's
own products (layers/products.py) and the same KVCache, so that a search's steps may switch
between the two ways from one step to the next (beam search's first step has one row a
sentence, the next ones K). Sums are float32 as torch's, in another order: outputs may differ
from the torch path's where two words' scores nearly tie.

Shapes: R decode rows, D d_model, H heads (H_kv of keys and values, G = H / H_kv), t
positions so far, S source positions.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F

from heedful.layers import openblas
from heedful.layers.positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding
from heedful.layers.products import MOST_ROWS
from heedful.models.base import step_log_probs
from heedful.models.transformer_state import KVCache, TransformerState

NUMPY_ROWS = MOST_ROWS  # at most this many decode rows take the numpy step (measured: 1-320)


def takes(rows: int, generator) -> bool:
    """Whether a step of `rows` decode rows takes the numpy step, `generator` its output
    layer's Product: up to NUMPY_ROWS, where the products go through numpy's OpenBLAS (one
    thread; one row or more than products.FEW_ROWS). At 2 to FEW_ROWS rows oneDNN multiplies
    through torch, and a beam 5 search of one sentence at a time ran 0.97x as fast this way."""
    return rows <= NUMPY_ROWS and generator.by_numpy(rows)


def usable(decoder: torch.nn.Module) -> bool:
    """Whether a search of `decoder` may take the numpy step: float32 weights on the CPU, and
    numpy's BLAS an OpenBLAS whose threads heedful sets (openblas.py: numpy's products and
    torch's threads side by side, each spinning while the other works, ran 10x slower)."""
    weight = decoder.embed.tokens.weight
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and openblas.available()


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask) -> np.ndarray:
    """softmax(q kᵀ / √d_k) · v: q (N, H_kv, M, D/H), k and v (N, H_kv, t, D/H), mask (N, 1,
    1, t) or None -> (N, H_kv, M, D/H). A query whose keys are all masked gets zeros, as
    attention.py's masked softmax gives."""
    scores = np.matmul(q, k.transpose(0, 1, 3, 2))  # (N, H_kv, M, t)
    scores *= 1 / math.sqrt(q.shape[-1])
    if mask is not None:
        scores[np.broadcast_to(~mask, scores.shape)] = np.finfo(scores.dtype).min
    scores -= scores.max(-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(-1, keepdims=True)
    if mask is not None:
        scores[np.broadcast_to(~mask, scores.shape)] = 0.0
    return np.matmul(scores, v)


class NumpyLayer:
    """One LayerPlan's step (transformer_step.py) with numpy between its products."""

    def __init__(self, plan):
        self.products, self.norms, self.norm_first = plan.products, plan.norms, plan.norm_first
        self.heads, self.d_head = plan.q_kv_heads[0], plan.d_head
        self.kv_heads = plan.q_kv_heads[1] // 2

    def _input(self, i: int, x: np.ndarray) -> np.ndarray:
        """What sublayer i reads: LayerNorm(x) pre-norm, x post-norm."""
        return layer_norm(x, self.norms[i]) if self.norm_first else x

    def _residual(self, i: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """x + y pre-norm, LayerNorm(x + y) post-norm; x is this step's own."""
        x += y
        return x if self.norm_first else layer_norm(x, self.norms[i])

    def run(self, x: np.ndarray, cross_kv, past, src_mask, beams: int):
        """x (R, D) -> x, and this layer's self-attention keys and values so far."""
        p, rows, kv_heads, d = self.products, x.shape[0], self.kv_heads, self.d_head
        groups = self.heads // kv_heads
        # self-attention: the new position's K and V written into the cache's buffer
        qkv = p["qkv"].numpy(self._input(0, x))  # (R, (H + 2 H_kv) D/H): Q's heads, K's, V's
        cache = KVCache.of(past) or KVCache.empty(cross_kv[0], rows, kv_heads, d)
        cache = cache.room(1)
        t, buffer = cache.length, cache.buffer.numpy()  # (2, R, H_kv, capacity, D/H)
        new = qkv[:, self.heads * d :].reshape(rows, 2, kv_heads, d)
        buffer[:, :, :, t] = new.transpose(1, 0, 2, 3)
        cache.filled[0] = t + 1
        # heads h = j·G + g read K, V head j (GQA): a row's G queries of head j side by side
        q = qkv[:, : self.heads * d].reshape(rows, kv_heads, groups, d)
        z = attend(q, buffer[0, :, :, : t + 1], buffer[1, :, :, : t + 1], None)
        x = self._residual(0, x, p["self_out"].numpy(z.reshape(rows, -1)))
        # cross-attention: the `beams` rows of a source are its queries over its K, V
        q = p["cross_q"].numpy(self._input(1, x))  # (R, D)
        q = q.reshape(rows // beams, beams, kv_heads, groups, d).transpose(0, 2, 3, 1, 4)
        q = q.reshape(rows // beams, kv_heads, groups * beams, d)  # (B, H_kv, G·beams, D/H)
        mask = None if src_mask is None else src_mask.numpy()[:, None]  # (B, 1, 1, S)
        z = attend(q, cross_kv[0].numpy(), cross_kv[1].numpy(), mask)
        z = z.reshape(rows // beams, kv_heads, groups, beams, d).transpose(0, 3, 1, 2, 4)
        x = self._residual(1, x, p["cross_out"].numpy(z.reshape(rows, -1)))
        # FFN(x) = max(0, x W1 + b1) W2 + b2
        hidden = p["ff_in"].numpy(self._input(2, x), relu=True)
        x = self._residual(2, x, p["ff_out"].numpy(hidden))
        return x, KVCache(cache.buffer, t + 1, cache.filled)


def layer_norm(x: np.ndarray, norm: tuple) -> np.ndarray:
    """F.layer_norm of x (R, D) with a plan's arguments (transformer_step._norm): torch's own,
    one operator, where numpy's mean, variance and scaling take seven calls (41 µs against
    15 µs inside a step, one thread of the Zen 3 EPYC)."""
    return F.layer_norm(torch.from_numpy(x), *norm).numpy()


def embed(embedding: torch.nn.Module, tokens: torch.Tensor, offset: int) -> np.ndarray | None:
    """token embedding · √D + PE at position offset (R, D), as transformer_step.embed computes
    it, for the positional tables that hold `offset`; None otherwise (the torch path's
    errors and tables grown on demand stay its own)."""
    positions = embedding.positions
    if isinstance(positions, SinusoidalPositionalEncoding):
        table = positions.table
    elif isinstance(positions, LearnedPositionalEncoding):
        table = positions.embedding.weight
    else:
        return None
    if offset >= table.size(0):
        return None
    x = embedding.tokens.weight.detach().numpy()[tokens.numpy()]  # (R, D), a copy
    x *= np.float32(embedding.scale)
    x += table[offset].detach().numpy()
    return x


class NumpyStep:
    """StepPlan's step (transformer_step.py) with numpy between its products."""

    def __init__(self, plan):
        self.layers = [NumpyLayer(layer) for layer in plan.layers]
        self.final_norm, self.generator = plan.final_norm, plan.generator

    def step(self, state: TransformerState, x: np.ndarray):
        """x (R, D) the embedded last tokens (`embed`) -> log-probabilities (R, V) of the next
        token, and the new state."""
        past = []
        with openblas.one_thread():  # numpy's own products too (attention's)
            for layer, cross_kv, kv in zip(self.layers, state.cross_kv, state.self_kv):
                x, kv = layer.run(x, cross_kv, kv, state.src_mask, state.beams)
                past.append(kv)
            if self.final_norm is not None:  # a pre-norm stack's own LayerNorm
                x = layer_norm(x, self.final_norm)
            logits = torch.from_numpy(self.generator.numpy(x))  # (R, V)
        state = replace(state, self_kv=past, position=state.position + 1)
        return step_log_probs(logits.unsqueeze(1)), state
