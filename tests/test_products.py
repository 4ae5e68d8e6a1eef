"""Inference's products through oneDNN's packed weights (layers/products.py) compute what the
layers compute, follow the weights when they change, stay out of autograd, autocast, hooks and
float64, and are chosen per CPU as packed_products says."""

import copy
import io

import pytest
import torch
from torch import nn

from heedful.config import ModelConfig
from heedful.layers import products
from heedful.layers.attention import MultiHeadAttention
from heedful.layers.products import (
    CHOICE,
    apply,
    forget_products,
    keep_products,
    packed_products,
    product,
    rows_bucket,
)
from heedful.models.build import build_model
from heedful.search.decoding import greedy_search

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this torch was built without oneDNN"
)
BOS, EOS = 1, 2


@pytest.fixture
def packing(monkeypatch):
    """Packed products on, whatever this CPU's vendor, for weights of any size."""
    monkeypatch.setattr(products, "_packs_here", lambda: True)
    monkeypatch.setattr(products, "PACKED_MIN_WEIGHTS", 0)


def packed_entry(owner: nn.Module, *names: str):
    return products._copies.get(owner, {}).get(names, {}).get("packed")


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    y = x.double() @ weight.double().T  # float64: what both kernels approximate
    return y if bias is None else y + bias.double()


@pytest.mark.parametrize(
    "shape", [(0, 32), (1, 32), (7, 32), (64, 32), (300, 32), (512, 32), (4, 5, 32), (3, 1, 32)]
)
@pytest.mark.parametrize("bias", [True, False])
def test_a_packed_product_equals_the_float64_product(packing, shape, bias):
    torch.manual_seed(0)
    owner = nn.Module()
    owner.layer = nn.Linear(32, 48, bias=bias)
    x = torch.randn(*shape)
    with torch.no_grad():
        got = apply(owner, "layer", x)
    assert packed_entry(owner, "layer") is not None  # the packed path did run
    assert got.shape == (*shape[:-1], 48) and got.dtype == torch.float32
    want = reference(x, owner.layer.weight, owner.layer.bias)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("way", ["packed", "blas", "hooked"])
def test_relu_follows_the_product_on_every_path(monkeypatch, way):
    """The feed-forward's max(0, x W1 + b1): oneDNN's post-op where packed, else after it."""
    monkeypatch.setattr(products, "_packs_here", lambda: way == "packed")
    monkeypatch.setattr(products, "PACKED_MIN_WEIGHTS", 0)
    torch.manual_seed(4)
    owner = nn.Module()
    owner.layer = nn.Linear(16, 24)
    if way == "hooked":
        owner.layer.register_forward_hook(lambda m, i, o: None)
    x = torch.randn(5, 16)
    with torch.no_grad():
        got = apply(owner, "layer", x, relu=True)
    want = reference(x, owner.layer.weight, owner.layer.bias).clamp(min=0)
    assert (want == 0).any() and (want > 0).any()
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    assert (packed_entry(owner, "layer") is not None) == (way == "packed")


def test_row_counts_fall_in_few_buckets():
    """oneDNN keeps a compiled kernel per row count: decoding's counts (one per number of
    unfinished sentences) share 18 at most, each within twice the rows it pads."""
    table = {0: 0, 1: 1, 2: 2, 3: 4, 5: 8, 9: 16, 33: 40, 64: 64, 65: 128, 321: 384, 512: 512}
    assert {rows: rows_bucket(rows) for rows in table} == table
    buckets = {rows_bucket(rows) for rows in range(1, products.MOST_ROWS + 1)}
    assert len(buckets) == 18
    assert all(rows <= rows_bucket(rows) < 2 * rows for rows in range(2, products.MOST_ROWS + 1))


def test_only_weights_large_enough_to_pay_are_packed(monkeypatch):
    monkeypatch.setattr(products, "_packs_here", lambda: True)
    small, large = nn.Module(), nn.Module()
    small.layer = nn.Linear(256, 256)  # 2^16 weights: the BLAS
    large.layer = nn.Linear(256, 512)  # 2^17: packed
    x = torch.randn(5, 256)
    with torch.no_grad():
        for owner in (small, large):
            want = reference(x, owner.layer.weight, owner.layer.bias)
            torch.testing.assert_close(
                apply(owner, "layer", x).double(), want, rtol=1e-5, atol=1e-5
            )
    assert packed_entry(small, "layer") is None and packed_entry(large, "layer") is not None


def test_an_encoder_batch_of_many_rows_keeps_the_blas(packing):
    owner = nn.Module()
    owner.layer = nn.Linear(8, 4)
    x = torch.randn(products.MOST_ROWS + 1, 8)
    with torch.no_grad():
        got = apply(owner, "layer", x)
    assert packed_entry(owner, "layer") is None
    want = reference(x, owner.layer.weight, owner.layer.bias)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_a_strided_input_and_stacked_parts_are_multiplied_right(packing):
    torch.manual_seed(1)
    mha = MultiHeadAttention(32, 4)
    x = torch.randn(6, 3, 32)[:, 1:2]  # (6, 1, 32), not contiguous
    with torch.no_grad():
        q, k, v = mha.project_qkv(x)
    assert packed_entry(mha, "q", "k", "v") is not None
    for got, layer in zip((q, k, v), (mha.w_q, mha.w_k, mha.w_v)):
        want = mha.split_heads(reference(x, layer.weight, layer.bias))
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_the_packed_copy_follows_new_weights(packing):
    torch.manual_seed(2)
    owner = nn.Module()
    owner.layer = nn.Linear(16, 8)
    x = torch.randn(3, 16)
    with torch.no_grad():
        apply(owner, "layer", x)
        owner.load_state_dict({"layer.weight": torch.randn(8, 16), "layer.bias": torch.zeros(8)})
        got = apply(owner, "layer", x)  # load_state_dict copies in place: a new version
    want = reference(x, owner.layer.weight, owner.layer.bias)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def tiny_model(seed=0):
    torch.manual_seed(seed)
    config = ModelConfig(d_model=32, num_heads=4, d_ff=64, dropout=0.0)
    return build_model(config, 20, 15).eval()


def search(model, src):
    with torch.no_grad():
        return greedy_search(model, src, BOS, EOS, 0.0, 6)


def test_every_search_packs_the_weights_as_they_are_unless_kept(packing):
    """A write through .data changes a weight without a new version: an encode drops the
    copies of a model whose weights may change, a kept model (a Translator's) keeps them
    until training mode ends that."""
    model, src = tiny_model(), torch.randint(4, 20, (3, 6))
    search(model, src)
    first = packed_entry(model.decoder, "generator")
    search(model, src)
    assert packed_entry(model.decoder, "generator") is not first  # packed again
    keep_products(model)
    search(model, src)
    kept = packed_entry(model.decoder, "generator")
    search(model, src)
    assert packed_entry(model.decoder, "generator") is kept  # kept across searches
    model.train()
    assert model.decoder not in products._copies  # dropped: training will change them
    model.eval()
    search(model, src)
    assert packed_entry(model.decoder, "generator") is not kept
    forget_products(model)  # no longer kept: forgetting drops them
    assert model.decoder not in products._copies


def test_no_packing_under_autograd_autocast_float64_or_hooks(packing):
    owner = nn.Module()
    owner.layer = nn.Linear(16, 8)
    x = torch.randn(3, 16, requires_grad=True)
    apply(owner, "layer", x).sum().backward()  # autograd: the plain product, with a gradient
    assert x.grad is not None and owner not in products._copies
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert apply(owner, "layer", x).dtype == torch.bfloat16  # autocast's product
    assert packed_entry(owner, "layer") is None
    double = nn.Module()
    double.layer = nn.Linear(16, 8).double()
    with torch.no_grad():
        apply(double, "layer", x.double())
    assert packed_entry(double, "layer") is None
    seen = []
    owner.layer.register_forward_hook(lambda m, i, o: seen.append(o))  # the viewer's hooks
    with torch.no_grad():
        assert product(owner, {"layer": owner.layer}, x) is None  # the caller calls the layer
        apply(owner, "layer", x)
    assert len(seen) == 1


def test_a_packed_model_can_still_be_copied_and_saved(packing):
    """Packed tensors can be neither deep-copied nor saved: they are kept beside the model."""
    model = tiny_model()
    keep_products(model)
    search(model, torch.randint(4, 20, (2, 5)))
    copy.deepcopy(model)
    torch.save(model, io.BytesIO())
    torch.save(model.state_dict(), io.BytesIO())


def test_a_search_packed_agrees_with_the_blas_one_within_float32(packing, monkeypatch):
    """The same model's step log-probabilities through oneDNN and through the BLAS: two float32
    kernels, so equal within round-off, not bit for bit."""
    model, src = tiny_model(3), torch.randint(4, 20, (4, 7))
    bos = torch.full((4,), BOS)
    with torch.no_grad():
        memory = model.encode(src)
        packed, _, _ = model.decode_step(memory, model.init_state(memory), bos)
        assert packed_entry(model.decoder, "generator") is not None
        monkeypatch.setattr(products, "_packs_here", lambda: False)
        memory = model.encode(src)
        plain, _, _ = model.decode_step(memory, model.init_state(memory), bos)
        assert packed_entry(model.decoder, "generator") is None
    torch.testing.assert_close(packed, plain, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "environ, vendor, machine, want",
    [
        ({}, "AuthenticAMD", "x86_64", True),
        ({}, "HygonGenuine", "x86_64", True),
        ({}, "GenuineIntel", "x86_64", False),  # MKL on Intel's CPUs
        ({}, "", "x86_64", False),  # vendor unknown: as before
        ({}, "", "aarch64", False),
        ({CHOICE: "onednn"}, "GenuineIntel", "x86_64", True),
        ({CHOICE: " OneDNN\n"}, "", "aarch64", True),
        ({CHOICE: "blas"}, "AuthenticAMD", "x86_64", False),
        ({CHOICE: ""}, "AuthenticAMD", "x86_64", True),  # empty: unset
    ],
)
def test_where_products_are_packed(environ, vendor, machine, want):
    assert packed_products(environ, vendor, machine) is want


@pytest.mark.parametrize("value", ["1", "mkl", "yes", "onednn,blas", "oneDNN\x00", "é" * 5000])
def test_a_bad_choice_is_refused_by_name(value):
    with pytest.raises(ValueError, match=CHOICE) as error:
        packed_products({CHOICE: value}, "AuthenticAMD", "x86_64")
    assert "onednn or blas" in str(error.value)


def test_a_loaded_translator_keeps_its_products_across_calls(packing, reverse_model_dir):
    """Packing a model's weights costs about one product each: a Translator, whose weights
    do not change, packs once, not for every batch it translates."""
    from heedful.inference.translator import Translator

    translator = Translator.load(reverse_model_dir)
    decoder = translator.model.decoder
    first = translator.translate(["abcdef", "hgf"], batch_size=1)
    kept = packed_entry(decoder, "generator")
    assert kept is not None
    again = translator.translate(["abcdef", "hgf"], batch_size=1)
    assert packed_entry(decoder, "generator") is kept
    assert [t.text for t in again] == [t.text for t in first]


def test_a_bad_choice_stops_loading_a_translator(monkeypatch, reverse_model_dir):
    from heedful.inference.translator import Translator

    monkeypatch.setenv(CHOICE, "fast")
    products._packs_here.cache_clear()
    try:
        with pytest.raises(ValueError, match=f"{CHOICE}='fast'"):
            Translator.load(reverse_model_dir)
    finally:
        monkeypatch.delenv(CHOICE)
        products._packs_here.cache_clear()
