"""The Transformer encoder-decoder of Vaswani et al. 2017, with an incremental (cached) decoder.

Shapes: B batch, S source length, T target length, D d_model, H heads, L layers, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from heedful.attention import MultiHeadAttention, causal_mask, padding_mask
from heedful.models.base import AttentionMaps, Seq2SeqOutput, StepAttention
from heedful.positional import POSITIONAL_ENCODINGS

KV = tuple[torch.Tensor, torch.Tensor]  # projected keys and values, (B, H, len, D/H) each


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position alone (§3.3)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Residual(nn.Module):
    """A sublayer wrapped in a residual connection and layer norm.

    post-norm (the paper, §5.4): LayerNorm(x + Dropout(f(x)))
    pre-norm (Xiong et al. 2020):  x + Dropout(f(LayerNorm(x))), easier to train deep.
    `f` returns (output, extra); extra (attention weights, caches) is passed through.
    """

    def __init__(self, d_model: int, dropout: float, norm_first: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, f: Callable) -> tuple[torch.Tensor, object]:
        out, extra = f(self.norm(x) if self.norm_first else x)
        x = x + self.dropout(out)
        return (x if self.norm_first else self.norm(x)), extra


class EncoderLayer(nn.Module):
    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float,
        norm_first: bool,
        attention_dropout: float = 0.0,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, attention_dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.attn_block = Residual(d_model, dropout, norm_first)
        self.ff_block = Residual(d_model, dropout, norm_first)

    def forward(self, x, src_mask, need_weights=False):
        """x (B, S, D), src_mask (B, 1, S) -> x (B, S, D), weights (B, H, S, S) or None"""
        x, weights = self.attn_block(x, lambda h: self.self_attn(h, h, h, src_mask, need_weights))
        x, _ = self.ff_block(x, lambda h: (self.feed_forward(h), None))
        return x, weights


class DecoderLayer(nn.Module):
    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float,
        norm_first: bool,
        attention_dropout: float = 0.0,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, attention_dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, attention_dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.self_block = Residual(d_model, dropout, norm_first)
        self.cross_block = Residual(d_model, dropout, norm_first)
        self.ff_block = Residual(d_model, dropout, norm_first)

    def forward(self, x, cross_kv: KV, src_mask, tgt_mask, past_kv: KV | None, need_weights):
        """x (B, T, D): the new target positions; past_kv: this layer's keys/values for earlier
        positions (incremental decoding) or None. Returns x, the keys/values of all positions so
        far, self weights (B, H, T, T_all) and cross weights (B, H, T, S) (None unless asked)."""

        def self_attention(h):
            k, v = self.self_attn.project_kv(h, h)  # (B, H, T, D/H)
            if past_kv is not None:  # each step adds one position: cost O(t), not O(t²)
                k, v = torch.cat([past_kv[0], k], dim=2), torch.cat([past_kv[1], v], dim=2)
            out, w = self.self_attn.attend_projected(h, k, v, tgt_mask, need_weights)
            return out, (w, (k, v))

        def cross_attention(h):
            return self.cross_attn.attend_projected(h, *cross_kv, src_mask, need_weights)

        x, (self_weights, kv) = self.self_block(x, self_attention)
        x, cross_weights = self.cross_block(x, cross_attention)
        x, _ = self.ff_block(x, lambda h: (self.feed_forward(h), None))
        return x, kv, self_weights, cross_weights


class Embedding(nn.Module):
    """Token embedding × √d_model + positional encoding, then dropout (§3.4, §3.5)."""

    def __init__(self, vocab_size, d_model, pad_id, positional, max_positions, dropout):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(self.tokens.weight, std=d_model**-0.5)
        with torch.no_grad():
            self.tokens.weight[pad_id].zero_()
        self.positions = POSITIONAL_ENCODINGS[positional](d_model, max_positions)
        self.scale = math.sqrt(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return self.dropout(self.positions(self.tokens(tokens) * self.scale, offset))  # (B, L, D)


@dataclass
class TransformerMemory:
    states: torch.Tensor  # (B, S, D) encoder output
    src_mask: torch.Tensor  # (B, 1, S)
    self_attention: torch.Tensor | None = None  # (B, L, H, S, S)

    def index_select(self, index: torch.Tensor) -> TransformerMemory:
        pick = None if self.self_attention is None else self.self_attention[index]
        return TransformerMemory(self.states[index], self.src_mask[index], pick)


@dataclass
class TransformerState:
    cross_kv: list[KV]  # per layer, computed once per sentence
    self_kv: list[KV | None]  # per layer, grows by one position each step
    position: int = 0

    def index_select(self, index: torch.Tensor, same_sources: bool = False) -> TransformerState:
        """Rows `index` of the state. same_sources: each new row reads the same source sentence
        as the old row at its place (beam search reordering beams within their sentence), so
        the cross-attention keys and values, a function of the source alone, stay as they are
        instead of being copied (in int8 beam search on Multi30k the copies of all caches were
        35% of the time; leaving these out brought them to 18%)."""

        def pick(kv):
            return None if kv is None else (kv[0][index], kv[1][index])

        cross = self.cross_kv if same_sources else [pick(kv) for kv in self.cross_kv]
        return TransformerState(cross, [pick(kv) for kv in self.self_kv], self.position)


class Transformer(nn.Module):
    """Encoder-decoder Transformer; `forward` for training, `encode`/`decode_step` for search."""

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: int = 512,
        num_heads: int = 8,
        encoder_layers: int = 6,
        decoder_layers: int = 6,
        d_ff: int = 2048,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        norm_first: bool = False,
        positional: str = "sinusoidal",
        max_positions: int = 512,
        tie_embeddings: bool = False,
        pad_id: int = 0,
    ):
        super().__init__()
        self.pad_id = pad_id
        emb = (d_model, pad_id, positional, max_positions, dropout)
        self.src_embed = Embedding(src_vocab_size, *emb)
        self.tgt_embed = Embedding(tgt_vocab_size, *emb)
        layer = (d_model, num_heads, d_ff, dropout, norm_first, attention_dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(*layer) for _ in range(encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(*layer) for _ in range(decoder_layers))
        # Pre-norm stacks end with a norm of their own; post-norm layers already end normalised.
        self.encoder_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_embeddings:  # Press & Wolf 2017: one matrix for target embedding and output
            self.generator.weight = self.tgt_embed.tokens.weight
        for name, p in self.named_parameters():
            if p.dim() > 1 and "tokens" not in name and "positions" not in name:
                nn.init.xavier_uniform_(p)

    def encode(self, src: torch.Tensor, need_weights: bool = False) -> TransformerMemory:
        """src (B, S) -> memory (B, S, D)"""
        src_mask = padding_mask(src, self.pad_id)  # (B, 1, S)
        x, all_weights = self.src_embed(src), []
        for layer in self.encoder_layers:
            x, weights = layer(x, src_mask, need_weights)
            all_weights.append(weights)
        stacked = torch.stack(all_weights, dim=1) if need_weights else None  # (B, L, H, S, S)
        return TransformerMemory(self.encoder_norm(x), src_mask, stacked)

    def _cross_kv(self, memory: TransformerMemory) -> list[KV]:
        return [
            layer.cross_attn.project_kv(memory.states, memory.states)
            for layer in self.decoder_layers
        ]

    def _decode(self, x, cross_kv, src_mask, tgt_mask, past, need_weights):
        """Run the decoder stack over embedded target positions x (B, T, D)."""
        new_past, self_ws, cross_ws = [], [], []
        for layer, kv, layer_past in zip(self.decoder_layers, cross_kv, past):
            x, layer_kv, self_w, cross_w = layer(
                x, kv, src_mask, tgt_mask, layer_past, need_weights
            )
            new_past.append(layer_kv)
            self_ws.append(self_w)
            cross_ws.append(cross_w)
        logits = self.generator(self.decoder_norm(x))  # (B, T, V)
        if not need_weights:
            return logits, new_past, None, None
        return (
            logits,
            new_past,
            torch.stack(self_ws, 1),
            torch.stack(cross_ws, 1),
        )  # (B, L, H, T, *)

    def forward(
        self, src: torch.Tensor, tgt_in: torch.Tensor, need_weights: bool = False
    ) -> Seq2SeqOutput:
        """Teacher forcing: src (B, S), tgt_in (B, T) = <s> y1 .. y_{T-1} -> logits (B, T, V)."""
        memory = self.encode(src, need_weights)
        tgt_mask = causal_mask(tgt_in.size(1), tgt_in.device)  # (T, T)
        x = self.tgt_embed(tgt_in)
        past = [None] * len(self.decoder_layers)
        logits, _, self_w, cross_w = self._decode(
            x, self._cross_kv(memory), memory.src_mask, tgt_mask, past, need_weights
        )
        maps = AttentionMaps(cross_w, memory.self_attention, self_w) if need_weights else None
        return Seq2SeqOutput(logits, maps)

    def init_state(self, memory: TransformerMemory) -> TransformerState:
        return TransformerState(self._cross_kv(memory), [None] * len(self.decoder_layers))

    def decode_step(
        self,
        memory: TransformerMemory,
        state: TransformerState,
        last_tokens: torch.Tensor,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, TransformerState, StepAttention | None]:
        """One new position: last_tokens (B,) -> log-probabilities (B, V) of the next token."""
        x = self.tgt_embed(last_tokens.unsqueeze(1), offset=state.position)  # (B, 1, D)
        # No mask needed for self-attention: the cache holds only past positions.
        logits, past, self_w, cross_w = self._decode(
            x, state.cross_kv, memory.src_mask, None, state.self_kv, need_weights
        )
        state = TransformerState(state.cross_kv, past, state.position + 1)
        weights = StepAttention(cross_w[:, :, :, 0], self_w[:, :, :, 0]) if need_weights else None
        return logits[:, 0].log_softmax(-1), state, weights
