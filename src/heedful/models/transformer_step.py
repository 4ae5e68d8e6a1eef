"""The Transformer decoder's search step without the modules' machinery: DecoderLayer's own
operators at one new position, in one function per layer, each product's checks made once
per search (layers/products.py: Product).

Why: a step's arithmetic at one sentence is a few hundred microseconds, and the modules'
calls around it (nn.Module's __call__, the Residual wrappers and their closures, `apply`'s
checks and lookups for each of 19 products) cost more than that. One sentence at a time,
greedy search ran 1.31x as fast as through the modules and beam 5 1.19x; in batches of 64,
greedy 1.04-1.08x on one thread and 1.10x on two, beam 5 level to 1.04x, the same outputs
(benchmarks/decode_speed.py on an AVX2 EPYC, 2026-12-07; docs/benchmarks.md, "Session 33").

A search gets a StepPlan where nothing would make the modules compute something else or
record something: no autograd, evaluation mode, no autocast, no hooks, plain nn.Linear
layers (int8 layers multiply on their own); `StepPlan.of` says None otherwise, and steps
that ask for attention weights take the modules' path. Hooks registered in the middle of a
search are not seen by its remaining steps: the viewer registers its own before searching.

Shapes: R decode rows, D d_model, H heads, S source positions, t positions so far.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as hooks

from heedful.layers.products import Product, planned
from heedful.models.base import step_log_probs
from heedful.models.transformer_state import KVCache, TransformerState


def _norm(norm: nn.Module):
    """F.layer_norm's arguments after x for a LayerNorm, None for the Identity of post-norm."""
    if isinstance(norm, nn.Identity):
        return None
    return norm.normalized_shape, norm.weight, norm.bias, norm.eps


class LayerPlan:
    """One DecoderLayer's step: its attentions, products and norms."""

    def __init__(self, layer: nn.Module, products: dict[str, Product]):
        self.self_attn, self.cross_attn = layer.self_attn, layer.cross_attn
        self.products = products
        self.norms = [_norm(b.norm) for b in (layer.self_block, layer.cross_block, layer.ff_block)]
        self.norm_first = layer.self_block.norm_first
        heads, kv_heads = layer.self_attn.num_heads, layer.self_attn.num_kv_heads
        self.q_kv_heads = [heads, 2 * kv_heads]  # Q's heads, then K's and V's side by side
        self.d_head = layer.self_attn.d_head

    def sublayer_input(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """What sublayer i reads: LayerNorm(x) pre-norm, x post-norm (Residual's convention)."""
        return F.layer_norm(x, *self.norms[i]) if self.norm_first else x

    def residual(self, i: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """x + y pre-norm, LayerNorm(x + y) post-norm (dropout is the identity in search)."""
        x = x.add_(y)  # x is this step's own (the embedding or a sum before): no copy
        return x if self.norm_first else F.layer_norm(x, *self.norms[i])

    def run(self, x: torch.Tensor, cross_kv, past, src_mask, beams: int):
        """x (R, 1, D) -> x, and this layer's self-attention keys and values so far."""
        p, sa, ca = self.products, self.self_attn, self.cross_attn
        rows = x.size(0)
        # self-attention over the positions so far: the new one's K, V join the cache. One
        # position: the product's (R, 1, D + 2 H_kv D/H) is the heads (R, H + 2 H_kv, 1, D/H)
        # as a view, where split_heads would take a view and a transpose for each of Q, K, V;
        # K's and V's heads side by side are what the cache's buffer holds (one copy)
        qkv = p["qkv"](self.sublayer_input(0, x)).view(rows, -1, 1, self.d_head)
        q, new_kv = qkv.split(self.q_kv_heads, dim=1)
        cache = KVCache.of(past)
        kv = tuple(new_kv.chunk(2, dim=1)) if cache is None else cache.append(new_kv)
        z, _ = sa.heads_context(q, *kv)  # (R, 1, D)
        x = self.residual(0, x, p["self_out"](z))
        # cross-attention: the `beams` rows of a source are one row of queries over its K, V
        q = p["cross_q"](self.sublayer_input(1, x))  # (R, 1, D)
        q = q.view(rows // beams, beams, -1, self.d_head).transpose(1, 2)  # (B_src, H, beams, D/H)
        z, _ = ca.heads_context(q, *cross_kv, src_mask)
        x = self.residual(1, x, p["cross_out"](z.view(rows, 1, -1)))
        # FFN(x) = max(0, x W1 + b1) W2 + b2
        hidden = p["ff_in"](self.sublayer_input(2, x), relu=True)
        return self.residual(2, x, p["ff_out"](hidden)), kv


class StepPlan:
    """A TransformerDecoder's step for one search (models/transformer.py: TransformerDecoder.step
    takes it where init_state made one)."""

    def __init__(self, layers: list[LayerPlan], generator: Product, final_norm):
        self.layers, self.generator, self.final_norm = layers, generator, final_norm

    @classmethod
    def of(cls, decoder: nn.Module) -> StepPlan | None:
        """The plan of `decoder` for a search, or None where the modules' path must run."""
        if (
            torch.is_grad_enabled()
            or decoder.training
            or torch.is_autocast_enabled(decoder.embed.tokens.weight.device.type)
            or hooks._global_forward_hooks
            or hooks._global_forward_pre_hooks
            or any(m._forward_hooks or m._forward_pre_hooks for m in decoder.modules())
        ):
            return None
        layers = []
        for layer in decoder.layers:
            sa, ca, ff = layer.self_attn, layer.cross_attn, layer.feed_forward.net
            products = {
                "qkv": planned(sa, sa.parts("q", "k", "v")),
                "self_out": planned(sa, {"w_o": sa.w_o}),
                "cross_q": planned(ca, {"w_q": ca.w_q}),
                "cross_out": planned(ca, {"w_o": ca.w_o}),
                "ff_in": planned(ff, {"0": ff[0]}),
                "ff_out": planned(ff, {"3": ff[3]}),
            }
            if any(x is None for x in products.values()):
                return None
            layers.append(LayerPlan(layer, products))
        generator = planned(decoder, {"generator": decoder.generator})
        return None if generator is None else cls(layers, generator, _norm(decoder.norm))

    def step(self, decoder: nn.Module, state: TransformerState, last_tokens: torch.Tensor):
        """last_tokens (R,) -> log-probabilities (R, V) of the next token, and the new state."""
        x = self.embed(decoder.embed, last_tokens, state.position)  # (R, 1, D)
        past = []
        for layer, cross_kv, kv in zip(self.layers, state.cross_kv, state.self_kv):
            x, kv = layer.run(x, cross_kv, kv, state.src_mask, state.beams)
            past.append(kv)
        if self.final_norm is not None:  # a pre-norm stack's own LayerNorm
            x = F.layer_norm(x, *self.final_norm)
        state = replace(state, self_kv=past, position=state.position + 1)
        return step_log_probs(self.generator(x)), state

    @staticmethod
    def embed(embed: nn.Module, tokens: torch.Tensor, position: int) -> torch.Tensor:
        """Embedding's forward at one position without its three modules' calls (its dropout
        is the identity in search): tokens (R,) -> (R, 1, D)."""
        x = F.embedding(tokens.view(-1, 1), embed.tokens.weight).mul_(embed.scale)
        return embed.positions.forward(x, position)  # + PE (a plan's modules have no hooks)
