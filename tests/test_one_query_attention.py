"""A decoding step's attention (one query a head, many heads, no autograd: attention.py's
`_one_query_attention`) against the formula in float64, and where it is taken."""

import math

import pytest
import torch

from heedful.layers import attention
from heedful.layers.attention import MultiHeadAttention


def reference(q, k, v, mask):
    """softmax(q kᵀ / √d_k) v in float64, over the allowed keys only; zeros where none is."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is None:
        return scores.softmax(-1) @ v
    scores = scores.masked_fill(~mask, -math.inf)
    allowed = mask.any(-1, keepdim=True)
    weights = torch.where(allowed, scores, 0.0).softmax(-1) * mask  # all-masked rows: zeros
    return weights @ v


def heads(b, h, lk, seed=0):
    """q (B, H, 1, 16), k and v (B, H, Lk, 16)."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, length, 16, generator=generator) for length in (1, lk, lk)]


@pytest.mark.parametrize("b, h, lk", [(16, 4, 7), (64, 4, 20), (320, 4, 40), (8, 8, 1)])
@pytest.mark.parametrize("masked", ["none", "padding", "one_row_all_masked"])
def test_one_query_attention_equals_the_formula_in_float64(b, h, lk, masked):
    q, k, v = heads(b, h, lk)
    assert attention._one_query_each(q, 0.0)  # the path under test is the one taken
    mask = None
    if masked != "none":
        lengths = torch.randint(1, lk + 1, (b,), generator=torch.Generator().manual_seed(1))
        mask = (torch.arange(lk) < lengths[:, None])[:, None, None, :]  # (B, 1, 1, Lk)
        if masked == "one_row_all_masked":
            mask[b // 2] = False
    got = attention._one_query_attention(q, k, v, mask)
    want = reference(q, k, v, mask)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    if masked == "one_row_all_masked":
        assert torch.equal(got[b // 2], torch.zeros_like(got[b // 2]))


def test_a_decoding_step_of_multi_head_attention_takes_it_and_agrees(monkeypatch):
    """Through MultiHeadAttention, as a decoder step calls it: the same output as the explicit
    path (which returns weights), within float32 round-off, and the one-query path did run."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, num_kv_heads=2).eval()  # grouped heads repeat first
    query, keys = torch.randn(40, 1, 32), torch.randn(40, 9, 32)
    mask = torch.rand(40, 1, 9) > 0.3
    calls = []
    real = attention._one_query_attention
    monkeypatch.setattr(attention, "_one_query_attention", lambda *a: calls.append(1) or real(*a))
    with torch.no_grad():
        fast, _ = mha(query, keys, keys, mask)
        explicit, _ = mha(query, keys, keys, mask, need_weights=True)
    assert calls == [1]
    torch.testing.assert_close(fast, explicit, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "shape, dropout, grad, device_ok, taken",
    [
        ((64, 1, 1, 16), 0.0, False, True, True),
        ((16, 4, 1, 16), 0.0, False, True, True),  # 64 heads in all
        ((15, 4, 1, 16), 0.0, False, True, False),  # 60: torch's one call is faster
        ((64, 4, 2, 16), 0.0, False, True, False),  # two queries: the fused kernel
        ((64, 4, 1, 16), 0.1, False, True, False),  # dropout: the fused kernel draws it
        ((64, 4, 1, 16), 0.0, True, True, False),  # autograd: the fused kernel's backward
        ((64, 4, 1, 16), 0.0, False, False, False),  # not the CPU
    ],
)
def test_where_the_one_query_path_is_taken(shape, dropout, grad, device_ok, taken):
    q = torch.zeros(shape, requires_grad=grad)
    if not device_ok:
        q = torch.zeros(shape, device="meta")
    assert attention._one_query_each(q, dropout) is taken
