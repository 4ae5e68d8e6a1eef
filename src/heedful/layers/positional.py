"""Positional encodings: attention is order-blind, so each position adds a vector of its own."""

from __future__ import annotations

import torch
from torch import nn


def sinusoidal_encoding(
    length: int, d_model: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """(length, d_model): PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same).

    Vaswani et al. 2017, §3.5: each pair of dimensions is a sinusoid of its own wavelength (2π to
    10000·2π), so PE[pos + k] is a linear function of PE[pos]: relative offsets are easy to learn.
    Computed in float64 and cast, so long positions stay accurate.
    """
    if length < 0 or d_model < 1:
        raise ValueError(
            f"need length >= 0 and d_model >= 1, got length={length}, d_model={d_model}"
        )
    pos = torch.arange(length, dtype=torch.float64).unsqueeze(1)  # (L, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(D/2),)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (L, ceil(D/2))
    pe = torch.zeros(length, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.to(dtype)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table; positions past the table are computed on the fly."""

    def __init__(self, d_model: int, max_positions: int = 512):
        super().__init__()
        self.d_model = d_model
        if torch.get_default_device().type == "meta":  # a skeleton (models/build.py): shape only
            table = torch.empty(max_positions, d_model)  # computing it there imports dynamo
        else:
            table = sinusoidal_encoding(max_positions, d_model)
        self.register_buffer("table", table, persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x: (B, L, D) embeddings of positions offset..offset+L-1 -> x + PE"""
        end, table = offset + x.size(1), self.table  # one table, whatever other threads do
        if end > table.size(0):
            table = sinusoidal_encoding(end, self.d_model).to(table.device)
            self.table = table  # decoding side by side (cpu.in_streams) may race on this
        return x + table[offset:end].to(x.dtype)


class LearnedPositionalEncoding(nn.Module):
    """Adds a trained vector per position (as in BERT/GPT); limited to max_positions."""

    def __init__(self, d_model: int, max_positions: int = 512):
        super().__init__()
        self.max_positions = max_positions
        self.embedding = nn.Embedding(max_positions, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        end = offset + x.size(1)
        if end > self.max_positions:
            raise ValueError(
                f"sequence reaches position {end}, past the learned positional table "
                f"(model.max_positions = {self.max_positions})"
            )
        positions = torch.arange(offset, end, device=x.device)
        return x + self.embedding(positions)


POSITIONAL_ENCODINGS = {
    "sinusoidal": SinusoidalPositionalEncoding,
    "learned": LearnedPositionalEncoding,
}
