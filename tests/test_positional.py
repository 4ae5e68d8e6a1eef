"""positional.py against Vaswani et al. 2017, §3.5, written out with math.sin and math.cos."""

from __future__ import annotations

import math
import zlib

import pytest
import torch

from heedful.layers.positional import (
    POSITIONAL_ENCODINGS,
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
    sinusoidal_encoding,
)


@pytest.fixture(autouse=True)
def seed(request):
    """Fresh random inputs per test (and per parametrization), reproducible run to run."""
    torch.manual_seed(zlib.crc32(request.node.name.encode()))


def pe(pos: int, j: int, d_model: int) -> float:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same), d = d_model."""
    two_i = j - j % 2
    angle = pos / 10000 ** (two_i / d_model)
    return math.sin(angle) if j % 2 == 0 else math.cos(angle)


def pe_table(positions, d_model: int) -> torch.Tensor:
    """The rows of PE for `positions`, in float64, one value at a time."""
    return torch.tensor(
        [[pe(pos, j, d_model) for j in range(d_model)] for pos in positions], dtype=torch.float64
    )


# ---------------------------------------------------------------------------------------------
# sinusoidal_encoding
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("d_model", [1, 2, 5, 8, 9, 16])
def test_sinusoidal_table_matches_formula(d_model):
    table = sinusoidal_encoding(12, d_model)
    assert table.shape == (12, d_model) and table.dtype == torch.float32
    torch.testing.assert_close(table.double(), pe_table(range(12), d_model), rtol=0, atol=1e-6)


@pytest.mark.parametrize("d_model", [7, 64])
def test_sinusoidal_table_is_float64_accurate_at_long_positions(d_model):
    """Computed in float64: position 5000 is as exact as position 1."""
    table = sinusoidal_encoding(5001, d_model, dtype=torch.float64)
    assert table.dtype == torch.float64
    positions = [0, 1, 777, 4096, 5000]
    torch.testing.assert_close(table[positions], pe_table(positions, d_model), rtol=0, atol=1e-9)


@pytest.mark.parametrize("pos, j", [(0, 0), (0, 1), (1, 0), (1, 1), (3, 4), (10, 5), (50, 6)])
def test_sinusoidal_single_values(pos, j):
    """A few entries spelled out: sin on even columns, cos on odd ones, pairs share a frequency."""
    d_model = 8
    table = sinusoidal_encoding(64, d_model, dtype=torch.float64)
    frequency = 1 / 10000 ** ((j // 2) * 2 / d_model)
    expected = (math.sin if j % 2 == 0 else math.cos)(pos * frequency)
    assert table[pos, j].item() == pytest.approx(expected, abs=1e-12)


def test_sinusoidal_odd_d_model_ends_with_a_sine():
    table = sinusoidal_encoding(6, 5, dtype=torch.float64)
    positions = torch.arange(6, dtype=torch.float64)
    # the last column is 2i = 4, a sine with no cosine partner
    torch.testing.assert_close(table[:, 4], torch.sin(positions / 10000 ** (4 / 5)))
    assert table[0].tolist() == [0.0, 1.0, 0.0, 1.0, 0.0]


def test_sinusoidal_empty_length():
    assert sinusoidal_encoding(0, 4).shape == (0, 4)


@pytest.mark.parametrize("length, d_model", [(-1, 4), (3, 0), (3, -2)])
def test_sinusoidal_bad_sizes(length, d_model):
    with pytest.raises(ValueError, match="length"):
        sinusoidal_encoding(length, d_model)


# ---------------------------------------------------------------------------------------------
# Modules: forward(x, offset) = x + PE[offset : offset + L]
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [0, 1, 6, 9, 30])  # 6: ends at the table's end; 9, 30: past it
@pytest.mark.parametrize("d_model", [6, 7])
def test_sinusoidal_module_adds_pe_from_offset(d_model, offset):
    module = SinusoidalPositionalEncoding(d_model, max_positions=10)
    x = torch.randn(2, 4, d_model)
    x_before = x.clone()
    out = module(x, offset=offset)
    assert out.shape == x.shape and out.dtype == x.dtype
    expected = x.double() + pe_table(range(offset, offset + 4), d_model)
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=1e-6)
    assert torch.equal(x, x_before)  # not in place


def test_sinusoidal_module_keeps_working_after_growing_its_table():
    module = SinusoidalPositionalEncoding(4, max_positions=3)
    x = torch.zeros(1, 2, 4)
    module(x, offset=20)  # grows the table
    torch.testing.assert_close(module(x).double()[0], pe_table(range(2), 4), rtol=0, atol=1e-6)
    torch.testing.assert_close(
        module(x, offset=21).double()[0], pe_table(range(21, 23), 4), rtol=0, atol=1e-6
    )


def test_sinusoidal_module_has_no_parameters_and_no_saved_table():
    module = SinusoidalPositionalEncoding(8, max_positions=16)
    assert list(module.parameters()) == []
    assert module.state_dict() == {}  # rebuilt from the formula, never stored in checkpoints


@pytest.mark.parametrize("offset", [0, 3, 6])
def test_learned_module_adds_its_rows_from_offset(offset):
    module = LearnedPositionalEncoding(5, max_positions=10)
    x = torch.randn(2, 4, 5)
    out = module(x, offset=offset)
    assert out.shape == x.shape
    expected = x + module.embedding.weight[offset : offset + 4]
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_learned_module_trains_only_the_positions_it_saw():
    module = LearnedPositionalEncoding(5, max_positions=10)
    module(torch.randn(2, 3, 5), offset=2).sum().backward()
    grad = module.embedding.weight.grad
    used = torch.zeros(10, dtype=torch.bool)
    used[2:5] = True
    assert (grad[used] == 2.0).all()  # two sequences in the batch, each adds the row once
    assert (grad[~used] == 0).all()


@pytest.mark.parametrize("length, offset", [(11, 0), (4, 7), (1, 10), (1, 100)])
def test_learned_module_refuses_positions_past_its_table(length, offset):
    module = LearnedPositionalEncoding(5, max_positions=10)
    with pytest.raises(ValueError, match="max_positions = 10"):
        module(torch.randn(1, length, 5), offset=offset)


def test_learned_module_accepts_exactly_max_positions():
    module = LearnedPositionalEncoding(5, max_positions=10)
    assert module(torch.randn(1, 10, 5)).shape == (1, 10, 5)
    assert module(torch.randn(1, 1, 5), offset=9).shape == (1, 1, 5)


@pytest.mark.parametrize("name", sorted(POSITIONAL_ENCODINGS))
def test_encodings_share_one_call(name):
    module = POSITIONAL_ENCODINGS[name](d_model=6, max_positions=20)
    x = torch.randn(3, 5, 6)
    whole = module(x)
    # positions 2..4 on their own get what they got inside the whole sequence
    torch.testing.assert_close(module(x[:, 2:], offset=2), whole[:, 2:], rtol=0, atol=0)
