"""The Transformer of Vaswani et al. 2017: its encoder of tokens and its decoder, with an
incremental (cached) decoder, whose state between steps is models/transformer_state.py's;
`transformer()` makes the pair, `EncoderDecoder` joins them.

Shapes: B batch, S source length, T target length, D d_model, H heads, L layers, V vocabulary,
H_kv key/value heads (H unless grouped-query attention: num_kv_heads).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn

from heedful.layers.attention import MultiHeadAttention, causal_mask, padding_mask
from heedful.layers.dropout import Dropout
from heedful.layers.positional import POSITIONAL_ENCODINGS
from heedful.layers.products import apply
from heedful.models.base import AttentionMaps, Memory, Seq2SeqOutput, StepAttention, step_log_probs
from heedful.models.transformer_state import KV, KVCache, TransformerState
from heedful.models.transformer_step import EncoderPlan, StepPlan


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position alone (§3.3)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), Dropout(dropout), nn.Linear(d_ff, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dropout = self.net[2]  # net.0 is W1, net.3 W2 (the state dict's names); net.1 ReLU
        hidden = apply(self.net, "0", x, relu=True)  # max(0, x W1 + b1), in one pass
        return apply(self.net, "3", dropout(hidden))  # · W2 + b2


class Residual(nn.Module):
    """A sublayer wrapped in a residual connection and layer norm.

    post-norm (the paper, §5.4): LayerNorm(x + Dropout(f(x)))
    pre-norm (Xiong et al. 2020):  x + Dropout(f(LayerNorm(x))), easier to train deep.
    `f` returns (output, extra); extra (attention weights, caches) is passed through.
    """

    def __init__(self, d_model: int, dropout: float, norm_first: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
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
        num_kv_heads: int | None = None,
    ):
        super().__init__()
        heads = dict(num_heads=num_heads, dropout=attention_dropout, num_kv_heads=num_kv_heads)
        self.self_attn = MultiHeadAttention(d_model, **heads)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.attn_block = Residual(d_model, dropout, norm_first)
        self.ff_block = Residual(d_model, dropout, norm_first)

    def forward(self, x, src_mask, need_weights=False):
        """x (B, S, D), src_mask (B, 1, S) -> x (B, S, D), weights (B, H, S, S) or None"""

        def self_attention(h):
            q, k, v = self.self_attn.project_qkv(h)  # (B, H, S, D/H), k, v (B, H_kv, S, D/H)
            return self.self_attn.attend_heads(q, k, v, src_mask, need_weights)

        x, weights = self.attn_block(x, self_attention)
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
        num_kv_heads: int | None = None,
    ):
        super().__init__()
        heads = dict(num_heads=num_heads, dropout=attention_dropout, num_kv_heads=num_kv_heads)
        self.self_attn = MultiHeadAttention(d_model, **heads)
        self.cross_attn = MultiHeadAttention(d_model, **heads)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.self_block = Residual(d_model, dropout, norm_first)
        self.cross_block = Residual(d_model, dropout, norm_first)
        self.ff_block = Residual(d_model, dropout, norm_first)

    def forward(
        self, x, cross_kv: KV, src_mask, tgt_mask, past_kv: KV | None, need_weights, beams=1
    ):
        """x (B, T, D): the new target positions; past_kv: this layer's keys/values for earlier
        positions (incremental decoding) or None; cross_kv (B / beams, H_kv, S, D/H) and
        src_mask (B / beams, 1, S): each source's, read by `beams` consecutive rows. Returns x,
        the keys/values of all positions so far, self weights (B, H, T, T_all) and cross
        weights (B, H, T, S) (None unless asked)."""

        def self_attention(h):
            q, k, v = self.self_attn.project_qkv(h)  # (B, H, T, D/H), k, v (B, H_kv, T, D/H)
            kv = (k, v)
            if isinstance(past_kv, KVCache):  # incremental decoding: write the new position
                kv = past_kv.append(k, v)
            elif past_kv is not None:  # each step adds one position: cost O(t), not O(t²)
                kv = torch.cat([past_kv[0], k], dim=2), torch.cat([past_kv[1], v], dim=2)
            out, w = self.self_attn.attend_heads(q, *kv, tgt_mask, need_weights)
            return out, (w, kv)

        def cross_attention(h):
            return attend_sources(self.cross_attn, h, cross_kv, src_mask, need_weights, beams)

        x, (self_weights, kv) = self.self_block(x, self_attention)
        x, cross_weights = self.cross_block(x, cross_attention)
        x, _ = self.ff_block(x, lambda h: (self.feed_forward(h), None))
        return x, kv, self_weights, cross_weights


def attend_sources(attn: MultiHeadAttention, h, kv: KV, mask, need_weights: bool, beams: int):
    """Cross-attention of rows h (B, T, D) over the keys and values kv of B / beams sources,
    `beams` consecutive rows each: a source's rows become one row of beams·T queries, which is
    the same attention (no query sees another), over one copy of the source's keys and values.
    Returns (B, T, D) and weights (B, H, T, S) or None."""
    if beams == 1:
        return attn.attend_projected(h, *kv, mask, need_weights)
    rows, t, d = h.shape
    out, weights = attn.attend_projected(
        h.reshape(rows // beams, beams * t, d), *kv, mask, need_weights
    )
    if weights is not None:  # (B / beams, H, beams·T, S) -> (B, H, T, S)
        weights = weights.unflatten(2, (beams, t)).transpose(1, 2).flatten(0, 1)
    return out.reshape(rows, t, d), weights


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
        self.dropout = Dropout(dropout)

    def forward(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return self.dropout(self.positions(self.tokens(tokens) * self.scale, offset))  # (B, L, D)


def run_encoder_layers(layers, x: torch.Tensor, mask: torch.Tensor, need_weights: bool):
    """x (B, S, D) through EncoderLayers, mask (B, 1, S) -> x, and with need_weights their
    self-attention (B, L, H, S, S) (else None). The pixel encoders' layers run here too."""
    all_weights = []
    for layer in layers:
        x, weights = layer(x, mask, need_weights)
        all_weights.append(weights)
    return x, (torch.stack(all_weights, dim=1) if need_weights and all_weights else None)


class TransformerEncoder(nn.Module):
    """The encoder of tokens (§3.1): embedding and positions, N encoder layers and, after a
    pre-norm stack, a LayerNorm of its own (post-norm layers already end normalised)."""

    def __init__(self, embed: Embedding, layers: list[EncoderLayer], norm_first: bool):
        super().__init__()
        self.embed, self.layers = embed, nn.ModuleList(layers)
        self.norm = nn.LayerNorm(embed.tokens.embedding_dim) if norm_first else nn.Identity()
        self.pad_id = embed.tokens.padding_idx

    def source_lengths(self, src: torch.Tensor) -> torch.Tensor:
        return (src != self.pad_id).sum(1)  # (B,)

    def forward(self, src: torch.Tensor, need_weights: bool = False) -> Memory:
        """src (B, S) -> memory (B, S, D), with the self-attention (B, L, H, S, S) if asked"""
        mask = padding_mask(src, self.pad_id)  # (B, 1, S)
        if not need_weights and (plan := EncoderPlan.of(self)) is not None:
            return Memory(plan.run(self, src, mask), mask, src)  # the same operators, no calls
        x, weights = run_encoder_layers(self.layers, self.embed(src), mask, need_weights)
        return Memory(self.norm(x), mask, src, self_attention=weights)


class TransformerDecoder(nn.Module):
    """The decoder (§3.1): embedding and positions, N decoder layers that each attend over the
    memory, a LayerNorm after a pre-norm stack, and the output layer to the vocabulary (the
    "generator", annotated-transformer's name). `forward` for training, `step` for search."""

    def __init__(
        self, embed: Embedding, layers: list[DecoderLayer], norm_first: bool, tie: bool = False
    ):
        super().__init__()
        self.embed, self.layers = embed, nn.ModuleList(layers)
        d_model, vocab_size = embed.tokens.embedding_dim, embed.tokens.num_embeddings
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.generator = nn.Linear(d_model, vocab_size)
        if tie:  # Press & Wolf 2017: one matrix for target embedding and output
            self.generator.weight = self.embed.tokens.weight
        self.pad_id = embed.tokens.padding_idx

    def init_state(self, memory: Memory) -> TransformerState:
        """The memory's keys and values for every layer's cross-attention, once per sentence."""
        cross_kv = [  # per layer (k, v), each (B, H_kv, S, D/H)
            layer.cross_attn.project_kv(memory.states, memory.states) for layer in self.layers
        ]
        if not torch.is_grad_enabled():  # a search reads them at every step: in the layout
            # its one-query attention reads in place (layers/attention.py), copied once here
            cross_kv = [(k.contiguous(), v.contiguous()) for k, v in cross_kv]
        plan = None if torch.is_grad_enabled() or self.training else StepPlan.of(self)
        mask = memory.mask
        if plan is not None and bool(mask.all()):  # no padding (one sentence, or pixels):
            mask = None  # every step's cross-attention is then a plain one, with no masking
        return TransformerState(cross_kv, [None] * len(self.layers), src_mask=mask, plan=plan)

    def _run(self, x, state: TransformerState, tgt_mask, need_weights, project=True):
        """The stack over embedded target positions x (B, T, D) -> logits (B, T, V), or the
        final states (B, T, D) when not `project`; the keys and values of every layer's
        positions so far; self (B, L, H, T, T_all) and cross (B, L, H, T, S) weights or None."""
        new_past, self_ws, cross_ws = [], [], []
        for layer, kv, past in zip(self.layers, state.cross_kv, state.self_kv):
            x, layer_kv, self_w, cross_w = layer(
                x, kv, state.src_mask, tgt_mask, past, need_weights, state.beams
            )
            new_past.append(layer_kv)
            self_ws.append(self_w)
            cross_ws.append(cross_w)
        x = self.norm(x)
        out = apply(self, "generator", x) if project else x  # (B, T, V) or (B, T, D)
        if not need_weights:
            return out, new_past, None, None
        return out, new_past, torch.stack(self_ws, 1), torch.stack(cross_ws, 1)  # (B, L, H, T, *)

    def forward(
        self, tgt_in: torch.Tensor, memory: Memory, need_weights=False, project=True
    ) -> Seq2SeqOutput:
        """Teacher forcing: tgt_in (B, T) = <s> y1 .. y_{T-1} -> logits (B, T, V); project=False:
        the states before the output layer instead, and that layer."""
        tgt_mask = causal_mask(tgt_in.size(1), tgt_in.device)  # (T, T)
        state = self.init_state(memory)
        x = self.embed(tgt_in)
        out, _, self_w, cross_w = self._run(x, state, tgt_mask, need_weights, project)
        maps = AttentionMaps(cross_w, decoder=self_w) if need_weights else None
        if not project:
            return Seq2SeqOutput(None, maps, features=out, output_layer=self.generator)
        return Seq2SeqOutput(out, maps)

    def step(
        self, memory: Memory, state: TransformerState, last_tokens: torch.Tensor, need_weights=True
    ) -> tuple[torch.Tensor, TransformerState, StepAttention | None]:
        """One new position: last_tokens (B,) -> log-probabilities (B, V) of the next token.
        Through the search's StepPlan where init_state made one and no weights are asked for
        (the same operators without the modules' calls), else through the modules."""
        if state.plan is not None and not need_weights:
            log_probs, state = state.plan.step(self, state, last_tokens)
            return log_probs, state, None
        x = self.embed(last_tokens.unsqueeze(1), offset=state.position)  # (B, 1, D)
        # No mask needed for self-attention: the cache holds only past positions.
        past = replace(state, self_kv=[KVCache.of(kv) for kv in state.self_kv])
        logits, past, self_w, cross_w = self._run(x, past, None, need_weights)
        state = replace(state, self_kv=past, position=state.position + 1)
        weights = StepAttention(cross_w[:, :, :, 0], self_w[:, :, :, 0]) if need_weights else None
        return step_log_probs(logits), state, weights


@dataclass(frozen=True)
class Settings:
    """What every part of one Transformer shares; the defaults are the paper's base model."""

    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    norm_first: bool = False
    positional: str = "sinusoidal"
    max_positions: int = 512
    pad_id: int = 0
    num_kv_heads: int | None = None

    def embedding(self, vocab_size: int) -> Embedding:
        s = self
        return Embedding(vocab_size, s.d_model, s.pad_id, s.positional, s.max_positions, s.dropout)

    def layers(self, kind: type, count: int) -> list[nn.Module]:
        """`count` EncoderLayers or DecoderLayers."""
        s = self
        sizes = (s.d_model, s.num_heads, s.d_ff, s.dropout, s.norm_first, s.attention_dropout)
        return [kind(*sizes, s.num_kv_heads) for _ in range(count)]


def xavier_init(module: nn.Module) -> nn.Module:
    """Xavier-uniform (Glorot & Bengio 2010) for every matrix but the embeddings and learned
    positions, which keep N(0, 1/d_model) and N(0, 0.02²); as annotated-transformer's
    make_model initialises its parts."""
    for name, p in module.named_parameters():
        if p.dim() > 1 and "tokens" not in name and "positions" not in name:
            nn.init.xavier_uniform_(p)
    return module


def transformer_decoder(
    vocab_size: int, num_layers: int = 6, tie_embeddings: bool = False, **settings
) -> TransformerDecoder:
    """The decoder alone, for an encoder of another kind (pixels: models/vision.py);
    settings: those of Settings."""
    s = Settings(**settings)
    decoder = TransformerDecoder(
        s.embedding(vocab_size), s.layers(DecoderLayer, num_layers), s.norm_first, tie_embeddings
    )
    return xavier_init(decoder)


def transformer(
    src_vocab_size: int,
    tgt_vocab_size: int,
    encoder_layers: int = 6,
    decoder_layers: int = 6,
    tie_embeddings: bool = False,
    share_embeddings: bool = False,
    **settings,
) -> tuple[TransformerEncoder, TransformerDecoder]:
    """Vaswani et al. 2017's encoder and decoder of tokens; settings: those of Settings.

    The parts are made in the order the one Transformer module made them before they became
    two (both embeddings, the encoder layers, the decoder layers, the output layer, then the
    Xavier draws), so that a seed gives the weights it gave. share_embeddings: the encoder
    reads the decoder's token table (§3.4 shares it between both sides and the output layer
    for a joint BPE vocabulary); each side keeps its own positions.
    """
    if share_embeddings and src_vocab_size != tgt_vocab_size:
        raise ValueError(
            "share_embeddings needs one vocabulary for both sides, got vocabularies of "
            f"{src_vocab_size} and {tgt_vocab_size}"
        )
    s = Settings(**settings)
    src_embed, tgt_embed = s.embedding(src_vocab_size), s.embedding(tgt_vocab_size)
    encoder = TransformerEncoder(src_embed, s.layers(EncoderLayer, encoder_layers), s.norm_first)
    decoder = TransformerDecoder(
        tgt_embed, s.layers(DecoderLayer, decoder_layers), s.norm_first, tie_embeddings
    )
    encoder, decoder = xavier_init(encoder), xavier_init(decoder)
    if share_embeddings:  # drawn as before, then one table: the seed gives the decoder's
        encoder.embed.tokens = decoder.embed.tokens
    return encoder, decoder
