"""The decoder's step with numpy between its products (models/step_numpy.py) computes what the
modules and StepPlan's torch operators compute, for every kind of Transformer decoder, padded
or not, one row or beams per source; a search may switch between the two from step to step;
and only a float32 model on the CPU with numpy's OpenBLAS takes it."""

from dataclasses import replace

import numpy as np
import pytest
import torch
from test_products import packing, reference  # noqa: F401  (packing: each library's way)
from test_transformer_step import BOS, KINDS, model, sources, steps
from torch import nn

from heedful.layers import openblas, products
from heedful.models import step_numpy, transformer_step

pytestmark = pytest.mark.skipif(
    not openblas.available(), reason="numpy's BLAS is not OpenBLAS 0.3.27 or later"
)


@pytest.fixture(autouse=True)
def openblas_way(monkeypatch):
    """OpenBLAS's way of multiplying, whatever this CPU's (numpy's step takes no other)."""
    monkeypatch.setattr(products, "_way_here", lambda: "openblas")


@pytest.fixture
def numpy_steps(monkeypatch):
    """The count of the steps that took numpy's way."""
    calls = []
    step = step_numpy.NumpyStep.step
    monkeypatch.setattr(step_numpy.NumpyStep, "step", lambda *a: calls.append(1) or step(*a))
    return calls


ROWS = {  # the decode rows compared: sources, beams per source, padded
    "one row": (1, 1, False),
    "nine rows": (3, 3, False),
    "nine rows, padded": (3, 3, True),
}


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("kind", KINDS)
def test_numpys_steps_equal_torchs_the_modules_and_a_float64_reference(
    kind, rows, numpy_steps, monkeypatch
):
    count, beams, padded = ROWS[rows]
    m, src = model(**KINDS[kind]), sources(padded)[:count]
    with_numpy = steps(m, src, True, beams)
    assert len(numpy_steps) == 6  # every step took numpy's way
    modules = steps(m, src, False, beams)
    monkeypatch.setattr(step_numpy, "NUMPY_ROWS", 0)  # StepPlan's torch operators
    with_torch = steps(m, src, True, beams)
    assert len(numpy_steps) == 6
    reference = steps(m.double(), src, False, beams)
    torch.testing.assert_close(with_numpy, modules, rtol=0, atol=1e-5)
    torch.testing.assert_close(with_numpy, with_torch, rtol=0, atol=1e-5)
    torch.testing.assert_close(with_numpy.double(), reference, rtol=0, atol=1e-4)


@pytest.mark.parametrize("kind", ["pre-norm", "grouped-query"])
def test_a_search_may_switch_ways_from_step_to_step(kind, numpy_steps, monkeypatch):
    """The keys and values go into one KVCache whichever way wrote them."""
    m, src = model(**KINDS[kind]), sources(True)
    modules = steps(m, src, False, beams=3)
    limits = iter([step_numpy.NUMPY_ROWS, 0] * 3)  # numpy's way, torch's, numpy's, ..
    step = transformer_step.StepPlan.step

    def switching(self, *args):
        monkeypatch.setattr(step_numpy, "NUMPY_ROWS", next(limits))
        return step(self, *args)

    monkeypatch.setattr(transformer_step.StepPlan, "step", switching)
    torch.testing.assert_close(steps(m, src, True, beams=3), modules, rtol=0, atol=1e-5)
    assert len(numpy_steps) == 3


def test_only_a_float32_model_on_one_thread_takes_numpys_way(numpy_steps):
    m, src = model(), sources(False)[:1]
    steps(m.double(), src, True)
    assert not numpy_steps  # float64: StepPlan's torch operators
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        steps(m.float(), src, True)
    finally:
        torch.set_num_threads(threads)
    assert not numpy_steps  # a batch on two threads: torch's operators share it
    steps(m, src, True)
    assert len(numpy_steps) == 6


def test_a_cache_grown_past_its_capacity_and_two_steps_from_one_state(numpy_steps):
    """20 steps grow the cache's buffer past its 16 positions; a second step from a state must
    not see what the first wrote into the buffer they share (KVCache.room copies)."""
    m, src = model(norm_first=True), sources(False)[:1]
    torch.testing.assert_close(steps(m, src, True, count=20), steps(m, src, False, count=20))
    assert len(numpy_steps) == 20

    def branches(plan: bool):
        with torch.no_grad():
            memory = m.encode(src)
            state = m.init_state(memory)
            state = state if plan else replace(state, plan=None, src_mask=memory.mask)
            for token in (BOS, 5, 6):
                _, state, _ = m.decode_step(memory, state, torch.tensor([token]), False)
            a, a_state, _ = m.decode_step(memory, state, torch.tensor([7]), False)
            b, _, _ = m.decode_step(memory, state, torch.tensor([8]), False)
            return torch.cat([a, b, m.decode_step(memory, a_state, torch.tensor([9]), False)[0]])

    torch.testing.assert_close(branches(True), branches(False), rtol=0, atol=1e-5)


@pytest.mark.parametrize("beams", [2, products.FEW_ROWS])
def test_rows_that_onednn_multiplies_keep_torchs_operators(beams, numpy_steps):
    """2 to FEW_ROWS rows go to oneDNN's copy through torch: numpy's way gained nothing there."""
    steps(model(), sources(False)[:1], True, beams)
    assert not numpy_steps


def test_attention_of_fully_masked_queries_is_zero_and_the_rest_float64s():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s, np.float32) for s in [(2, 2, 3, 8), *[(2, 2, 5, 8)] * 2])
    mask = np.array([[True] * 5, [False] * 5])[:, None, None]  # (2, 1, 1, 5): row 1 masked
    got = step_numpy.attend(q, k, v, mask)
    scores = q[0].astype(np.float64) @ k[0].astype(np.float64).transpose(0, 2, 1) / np.sqrt(8)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    want = weights / weights.sum(-1, keepdims=True) @ v[0].astype(np.float64)
    np.testing.assert_allclose(got[0], want, rtol=0, atol=1e-5)
    assert not got[1].any()  # attention.py's convention: nothing to attend to, zeros


@pytest.mark.parametrize("rows", [1, 5, 12])  # OpenBLAS's way: 5 rows go to oneDNN's copy
@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("small", [True, False])  # below PACKED_MIN_WEIGHTS: never packed
def test_a_products_numpy_call_equals_the_float64_product(packing, rows, relu, small, monkeypatch):  # noqa: F811
    if small:
        monkeypatch.setattr(products, "PACKED_MIN_WEIGHTS", 1 << 30)
    torch.manual_seed(3)
    owner = nn.Module()
    owner.layer = nn.Linear(16, 24)
    x = torch.randn(rows, 16)
    with torch.no_grad():
        product = products.planned(owner, {"layer": owner.layer})
        got = product.numpy(x.numpy(), relu)
    want = reference(x, owner.layer.weight, owner.layer.bias)
    want = want.clamp(min=0) if relu else want
    assert isinstance(got, np.ndarray) and got.shape == (rows, 24) and got.dtype == np.float32
    torch.testing.assert_close(torch.from_numpy(got).double(), want, rtol=1e-5, atol=1e-5)
    # OpenBLAS's way multiplies one row or more than FEW_ROWS through numpy, small or not
    by_numpy = packing == "openblas" and rows != 5
    assert (product.entry["transposed"] is not None) == by_numpy
