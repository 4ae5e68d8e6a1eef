"""EncoderDecoder: any encoder under any decoder, the one model search, training and pictures
read (annotated-transformer's EncoderDecoder; torchtune adds vision to a text model the same
way, by composition). An encoder of tokens (Transformer, RNN) or of pixels (CNN, ViT,
torchvision backbone) hands the decoder one Memory; the decoder (Transformer, RNN attention
decoder) derives what it needs from it in init_state. build.py chooses the two.

Shapes: B batch, S source positions, T target length, V target vocabulary, L layers, H heads.
"""

from __future__ import annotations

import torch
from torch import nn

from heedful.layers.products import forget_products, keep_products
from heedful.models.base import Memory, Seq2SeqOutput, StepAttention


def attention_penalty(cross: torch.Tensor, target_mask: torch.Tensor) -> torch.Tensor:
    """Show, Attend and Tell's doubly stochastic regulariser (Xu et al. 2015, eq. 14), summed
    over the batch: Σ_b Σ_s (1 − Σ_t α_bts)², so that every region is looked at over the caption.

    cross (B, L, H, T, S): α, averaged over layers and heads (an RNN has one of each);
    target_mask (B, T): True at real target positions (padding steps do not attend).
    """
    alpha = cross.mean(dim=(1, 2)) * target_mask[..., None]  # (B, T, S)
    return ((1.0 - alpha.sum(1)) ** 2).sum()  # Σ_t then Σ_s, Σ_b


class EncoderDecoder(nn.Module):
    """An encoder and a decoder offering the contract of models/base.py: `forward` for
    training, `encode` / `init_state` / `decode_step` for search, and `grid` where the encoder
    reads pixels. attention_penalty: λ of Show, Attend and Tell's regulariser, which the
    training forward adds as out.penalty (0: none)."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module, attention_penalty: float = 0.0):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.pad_id = decoder.pad_id
        self.attention_penalty = attention_penalty

    def train(self, mode: bool = True) -> EncoderDecoder:
        """Training mode also ends keep_products: the optimizer will change the weights."""
        if mode:
            keep_products(self, False)
        return super().train(mode)

    def source_lengths(self, src: torch.Tensor) -> torch.Tensor:
        return self.encoder.source_lengths(src)

    def grid(self, image_size: int) -> tuple[int, int]:
        """The grid of regions a pixel encoder makes of an image_size × image_size picture."""
        return self.encoder.grid(image_size)

    def encode(self, src: torch.Tensor, need_weights: bool = False) -> Memory:
        """src (B, S) ids or (B, 3, H, W) pixels -> memory (B, S, D)"""
        forget_products(self)  # a search's weights are fixed from here on (products.py)
        return self.encoder(src, need_weights)

    def init_state(self, memory: Memory):
        return self.decoder.init_state(memory)

    def decode_step(
        self, memory: Memory, state, last_tokens: torch.Tensor, need_weights: bool = True
    ) -> tuple[torch.Tensor, object, StepAttention | None]:
        """One new position: last_tokens (B,) -> log-probabilities (B, V) of the next token."""
        return self.decoder.step(memory, state, last_tokens, need_weights)

    def forward(
        self,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        need_weights: bool = False,
        project: bool = True,
    ) -> Seq2SeqOutput:
        """Teacher forcing: src, tgt_in (B, T) = <s> y1 .. y_{T-1} -> logits (B, T, V), with
        need_weights every attention map (the encoder's own among them); project=False: the
        states before the output layer instead, and that layer (output_loss.py). While
        training with a penalty, out.penalty = λ · Σ_b Σ_s (1 − Σ_t α_bts)²."""
        penalize = self.training and self.attention_penalty > 0
        memory = self.encode(src, need_weights)
        out = self.decoder(tgt_in, memory, need_weights or penalize, project)
        if penalize:
            mask = tgt_in != self.pad_id  # (B, T): padding steps do not attend
            out.penalty = self.attention_penalty * attention_penalty(out.attention.cross, mask)
        if need_weights:
            out.attention.encoder = memory.self_attention  # (B, L, H, S, S) or None
        else:
            out.attention = None  # computed for the penalty, not returned unasked
        return out
