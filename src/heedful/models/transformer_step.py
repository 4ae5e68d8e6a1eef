"""The Transformer at inference without the modules' machinery: the decoder's search step
(StepPlan: DecoderLayer's own operators at one new position) and the encoder's pass
(EncoderPlan: EncoderLayer's over a batch of sources), in one function per layer, each
product's checks made once per search (layers/products.py: Product).

Why: a step's arithmetic at one sentence is a few hundred microseconds, and the modules'
calls around it (nn.Module's __call__, the Residual wrappers and their closures, `apply`'s
checks and lookups for each of 19 products) cost more than that. One sentence at a time,
greedy search ran 1.31x as fast as through the modules and beam 5 1.19x; in batches of 64,
greedy 1.04-1.08x on one thread and 1.10x on two, beam 5 level to 1.04x, the same outputs
(benchmarks/decode_speed.py on an AVX2 EPYC, 2026-12-07; docs/benchmarks.md, "Session 33").
The encoder of one 8-20 token sentence took 2.8 ms this way against 3.4 through the modules
(one thread of the same EPYC, its plan made afresh for every sentence).

A search gets plans where nothing would make the modules compute something else or record
something: no autograd, evaluation mode, no autocast, no hooks, plain nn.Linear layers (int8
layers multiply on their own); `StepPlan.of` and `EncoderPlan.of` say None otherwise, and
steps or encodes that ask for attention weights take the modules' path. Hooks registered in
the middle of a search are not seen by its remaining steps: the viewer registers its own
before searching.

Shapes: B sources, R decode rows, D d_model, H heads, S source positions, t positions so far.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as hooks

from heedful.layers.products import Product, planned
from heedful.models import step_numpy
from heedful.models.base import step_log_probs
from heedful.models.transformer_state import KVCache, TransformerState


def _norm(norm: nn.Module):
    """F.layer_norm's arguments after x for a LayerNorm, None for the Identity of post-norm."""
    if isinstance(norm, nn.Identity):
        return None
    return norm.normalized_shape, norm.weight, norm.bias, norm.eps


def _plain_inference(module: nn.Module, device_type: str) -> bool:
    """Whether module's forward computes and records nothing the plans would skip: no
    autograd, evaluation mode, no autocast, no hooks on it, its modules or all modules."""
    return not (
        torch.is_grad_enabled()
        or module.training
        or torch.is_autocast_enabled(device_type)
        or hooks._global_forward_hooks
        or hooks._global_forward_pre_hooks
        or any(m._forward_hooks or m._forward_pre_hooks for m in module.modules())
    )


def embed(embedding: nn.Module, tokens: torch.Tensor, offset: int) -> torch.Tensor:
    """transformer.Embedding's forward without its three modules' calls (its dropout is the
    identity at inference): tokens (B, L) -> (B, L, D) at positions offset.."""
    x = F.embedding(tokens, embedding.tokens.weight).mul_(embedding.scale)
    return embedding.positions.forward(x, offset)  # + PE (a plan's modules have no hooks)


class _Residuals:
    """A layer's residual blocks as Residual computes them: what each sublayer reads, and how
    its output joins x."""

    def __init__(self, blocks: list[nn.Module]):
        self.norms = [_norm(block.norm) for block in blocks]
        self.norm_first = blocks[0].norm_first

    def sublayer_input(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """What sublayer i reads: LayerNorm(x) pre-norm, x post-norm (Residual's convention)."""
        return F.layer_norm(x, *self.norms[i]) if self.norm_first else x

    def residual(self, i: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """x + y pre-norm, LayerNorm(x + y) post-norm (dropout is the identity at inference)."""
        x = x.add_(y)  # x is this pass's own (the embedding or a sum before): no copy
        return x if self.norm_first else F.layer_norm(x, *self.norms[i])


class LayerPlan(_Residuals):
    """One DecoderLayer's step: its attentions, products and norms."""

    def __init__(self, layer: nn.Module, products: dict[str, Product]):
        super().__init__([layer.self_block, layer.cross_block, layer.ff_block])
        self.self_attn, self.cross_attn = layer.self_attn, layer.cross_attn
        self.products = products
        heads, kv_heads = layer.self_attn.num_heads, layer.self_attn.num_kv_heads
        self.q_kv_heads = [heads, 2 * kv_heads]  # Q's heads, then K's and V's side by side
        self.d_head = layer.self_attn.d_head

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

    def __init__(self, layers: list[LayerPlan], generator: Product, final_norm, numpy=False):
        self.layers, self.generator, self.final_norm = layers, generator, final_norm
        # float32 on the CPU: numpy between the products (step_numpy.py)
        self.numpy = step_numpy.NumpyStep(self) if numpy else None

    @classmethod
    def of(cls, decoder: nn.Module) -> StepPlan | None:
        """The plan of `decoder` for a search, or None where the modules' path must run."""
        if not _plain_inference(decoder, decoder.embed.tokens.weight.device.type):
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
        if generator is None:
            return None
        return cls(layers, generator, _norm(decoder.norm), step_numpy.usable(decoder))

    def step(self, decoder: nn.Module, state: TransformerState, last_tokens: torch.Tensor):
        """last_tokens (R,) -> log-probabilities (R, V) of the next token, and the new state."""
        if self.numpy is not None and step_numpy.takes(last_tokens.size(0), self.generator):
            x = step_numpy.embed(decoder.embed, last_tokens, state.position)
            if x is not None:
                return self.numpy.step(state, x)
        x = embed(decoder.embed, last_tokens.view(-1, 1), state.position)  # (R, 1, D)
        past = []
        for layer, cross_kv, kv in zip(self.layers, state.cross_kv, state.self_kv):
            x, kv = layer.run(x, cross_kv, kv, state.src_mask, state.beams)
            past.append(kv)
        if self.final_norm is not None:  # a pre-norm stack's own LayerNorm
            x = F.layer_norm(x, *self.final_norm)
        state = replace(state, self_kv=past, position=state.position + 1)
        return step_log_probs(self.generator(x)), state


class EncoderLayerPlan(_Residuals):
    """One EncoderLayer's pass: its self-attention, products and norms."""

    def __init__(self, layer: nn.Module, products: dict[str, Product]):
        super().__init__([layer.attn_block, layer.ff_block])
        self.self_attn, self.products = layer.self_attn, products
        kv_heads = layer.self_attn.num_kv_heads
        self.qkv_heads = [layer.self_attn.num_heads, kv_heads, kv_heads]
        self.d_head = layer.self_attn.d_head

    def run(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """x (B, S, D), mask (B, 1, S) or None (no padding) -> x (B, S, D)"""
        p, (b, s, _) = self.products, x.shape
        # the product's (B, S, D + 2 H_kv D/H) as the heads (B, H + 2 H_kv, S, D/H): a view
        heads = p["qkv"](self.sublayer_input(0, x)).view(b, s, -1, self.d_head).transpose(1, 2)
        z, _ = self.self_attn.heads_context(*heads.split(self.qkv_heads, dim=1), mask)
        x = self.residual(0, x, p["out"](z))  # z (B, S, D)
        # FFN(x) = max(0, x W1 + b1) W2 + b2
        hidden = p["ff_in"](self.sublayer_input(1, x), relu=True)
        return self.residual(1, x, p["ff_out"](hidden))


class EncoderPlan:
    """A TransformerEncoder's pass for one encode (models/transformer.py: TransformerEncoder
    takes it where `of` makes one and no attention weights are asked for)."""

    def __init__(self, layers: list[EncoderLayerPlan], final_norm):
        self.layers, self.final_norm = layers, final_norm

    @classmethod
    def of(cls, encoder: nn.Module) -> EncoderPlan | None:
        """The plan of `encoder` for one encode, or None where the modules' path must run."""
        if not _plain_inference(encoder, encoder.embed.tokens.weight.device.type):
            return None
        layers = []
        for layer in encoder.layers:
            sa, ff = layer.self_attn, layer.feed_forward.net
            products = {
                "qkv": planned(sa, sa.parts("q", "k", "v")),
                "out": planned(sa, {"w_o": sa.w_o}),
                "ff_in": planned(ff, {"0": ff[0]}),
                "ff_out": planned(ff, {"3": ff[3]}),
            }
            if any(x is None for x in products.values()):
                return None
            layers.append(EncoderLayerPlan(layer, products))
        return cls(layers, _norm(encoder.norm))

    def run(self, encoder: nn.Module, src: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """src (B, S) ids, mask (B, 1, S) their real tokens -> the states (B, S, D)"""
        x = embed(encoder.embed, src, 0)
        attend = None if bool(mask.all()) else mask  # no padding (one sentence): no masking
        for layer in self.layers:
            x = layer.run(x, attend)
        return x if self.final_norm is None else F.layer_norm(x, *self.final_norm)
