"""layers/dropout.py: the same Bernoulli mask as torch's dropout, drawn 16 bits an element."""

from __future__ import annotations

import math

import pytest
import torch

from heedful.layers.dropout import LEVELS, Dropout, dropout, random_halfwords

N = 1 << 20  # elements per statistical check


def rate(p: float) -> float:
    """The drop rate actually used: p rounded to a multiple of 2⁻¹⁶."""
    return round(p * LEVELS) / LEVELS


def within(observed: float, expected: float, n: int, sigmas: float = 6.0) -> bool:
    """A binomial proportion within `sigmas` standard deviations of its expectation."""
    return abs(observed - expected) <= sigmas * math.sqrt(expected * (1 - expected) / n) + 1e-12


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_each_element_drops_with_probability_p_in_every_lane_of_a_draw(p):
    torch.manual_seed(0)
    out = dropout(torch.ones(N, dtype=torch.float64), p)
    dropped = out == 0
    assert within(dropped.double().mean().item(), rate(p), N)
    # Four elements come from one 64-bit draw: each of the four places must drop at rate p
    # (a draw whose top bit is always 0 would leave every fourth element undropped).
    for lane in range(4):
        assert within(dropped[lane::4].double().mean().item(), rate(p), N // 4), lane


def test_the_kept_elements_are_scaled_so_that_the_expectation_is_x():
    torch.manual_seed(1)
    x = torch.randn(N, dtype=torch.float64)
    out = dropout(x, 0.1)
    kept = out != 0
    scale = 1.0 / (1.0 - rate(0.1))
    torch.testing.assert_close(out[kept], x[kept] * scale, rtol=1e-15, atol=0)
    mean = dropout(torch.ones(N, dtype=torch.float64), 0.1).mean().item()
    assert abs(mean - 1.0) <= 6 * scale * math.sqrt(rate(0.1) * (1 - rate(0.1)) / N)


def test_the_gradient_flows_through_the_kept_elements_only_scaled_alike():
    torch.manual_seed(2)
    x = torch.randn(4096, dtype=torch.float64, requires_grad=True)
    out = dropout(x, 0.3)
    out.backward(torch.ones_like(out))
    scale = 1.0 / (1.0 - rate(0.3))
    expected = (out != 0).double() * scale
    torch.testing.assert_close(x.grad, expected, rtol=1e-15, atol=0)


def test_the_masks_repeat_under_one_seed_and_differ_between_calls():
    torch.manual_seed(3)
    first, second = dropout(torch.ones(1000), 0.5), dropout(torch.ones(1000), 0.5)
    torch.manual_seed(3)
    assert torch.equal(dropout(torch.ones(1000), 0.5), first)
    assert not torch.equal(first, second)


def test_the_draws_take_every_int16_value_alike():
    torch.manual_seed(4)
    values = random_halfwords(torch.Size((N,))).long() + LEVELS // 2  # 0 .. 2¹⁶ - 1
    counts = torch.bincount(values // 4096, minlength=16).double()  # 16 equal bins
    expected = N / 16
    assert float(((counts - expected) ** 2 / expected).sum()) < 50.0  # χ², 15 dof: p < 1e-4
    assert random_halfwords(torch.Size((3, 5))).shape == (3, 5)  # sizes not a multiple of 4


def test_bfloat16_keeps_its_dtype_and_scales_each_element_once():
    torch.manual_seed(5)
    x = torch.randn(4096).bfloat16()
    out = dropout(x, 0.1)
    kept = out != 0
    assert out.dtype == torch.bfloat16
    scale = 1.0 / (1.0 - rate(0.1))
    torch.testing.assert_close(out[kept], (x[kept].float() * scale).bfloat16(), rtol=0, atol=0)


def test_the_module_is_the_identity_in_eval_mode_and_at_zero():
    x = torch.randn(64, 8)
    layer = Dropout(0.5).eval()
    assert layer(x) is x
    assert Dropout(0.0).train()(x) is x
    assert torch.equal(Dropout(1.0).train()(x), torch.zeros_like(x))
    assert "p=0.5" in repr(layer)


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_a_probability_outside_0_1_is_refused(p):
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(p)
    with pytest.raises(ValueError, match="dropout probability"):
        dropout(torch.ones(3), p)
