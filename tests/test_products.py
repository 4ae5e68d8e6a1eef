"""Inference's products through oneDNN's packed weights or numpy's OpenBLAS (layers/products.py,
layers/openblas.py) compute what the layers compute, follow the weights when they change, stay
out of autograd, autocast, hooks and float64, and are chosen per CPU as product_way says."""

import contextlib
import copy
import io
import threading

import pytest
import torch
from torch import nn

from heedful.config import ModelConfig
from heedful.cpu import run_side_by_side
from heedful.layers import openblas, products
from heedful.layers.attention import MultiHeadAttention
from heedful.layers.products import (
    CHOICE,
    apply,
    forget_products,
    keep_products,
    product,
    product_way,
    rows_bucket,
)
from heedful.models.build import build_model
from heedful.search.decoding import greedy_search

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this torch was built without oneDNN"
)
BOS, EOS = 1, 2


@pytest.fixture(params=["onednn", "openblas"])
def packing(monkeypatch, request):
    """Packed products on, through each library in turn, whatever this CPU, for weights of
    any size."""
    if request.param == "openblas" and not openblas.available():
        pytest.skip("numpy's BLAS is not OpenBLAS 0.3.27 or later (test_numpys_openblas_is_found)")
    monkeypatch.setattr(products, "_way_here", lambda: request.param)
    monkeypatch.setattr(products, "PACKED_MIN_WEIGHTS", 0)
    threads = torch.get_num_threads()
    if request.param == "openblas":
        torch.set_num_threads(1)  # OpenBLAS takes one-thread work only
    yield request.param
    torch.set_num_threads(threads)


def packed_entry(owner: nn.Module, *names: str):
    """The packed copy a product of owner's layers `names` made (oneDNN's or OpenBLAS's)."""
    entry = products._copies.get(owner, {}).get(names, {})
    return entry.get("packed") if entry.get("packed") is not None else entry.get("transposed")


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


@pytest.mark.parametrize("rows", [1, 5, 12])  # OpenBLAS's way: 5 rows go to oneDNN
@pytest.mark.parametrize("way", ["onednn", "openblas", "blas", "hooked"])
def test_relu_follows_the_product_on_every_path(monkeypatch, way, rows):
    """The feed-forward's max(0, x W1 + b1): oneDNN's post-op where packed, OpenBLAS's product
    then one pass adding the bias and cutting at 0, else after the layer."""
    if way == "openblas" and not openblas.available():
        pytest.skip("numpy's BLAS is not OpenBLAS 0.3.27 or later (test_numpys_openblas_is_found)")
    monkeypatch.setattr(products, "_way_here", lambda: "blas" if way == "hooked" else way)
    monkeypatch.setattr(products, "PACKED_MIN_WEIGHTS", 0)
    torch.manual_seed(4)
    owner = nn.Module()
    owner.layer = nn.Linear(16, 24)
    if way == "hooked":
        owner.layer.register_forward_hook(lambda m, i, o: None)
    x = torch.randn(rows, 16)
    with torch.no_grad(), one_thread():  # OpenBLAS takes one-thread work only
        got = apply(owner, "layer", x, relu=True)
    want = reference(x, owner.layer.weight, owner.layer.bias).clamp(min=0)
    assert (want == 0).any() and (want > 0).any()
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    assert (packed_entry(owner, "layer") is not None) == (way in ("onednn", "openblas"))


def test_row_counts_fall_in_few_buckets():
    """oneDNN keeps a compiled kernel per row count: decoding's counts (one per number of
    unfinished sentences) share 18 at most, each within twice the rows it pads."""
    table = {0: 0, 1: 1, 2: 2, 3: 4, 5: 8, 9: 16, 33: 40, 64: 64, 65: 128, 321: 384, 512: 512}
    assert {rows: rows_bucket(rows) for rows in table} == table
    buckets = {rows_bucket(rows) for rows in range(1, products.MOST_ROWS + 1)}
    assert len(buckets) == 18
    assert all(rows <= rows_bucket(rows) < 2 * rows for rows in range(2, products.MOST_ROWS + 1))


@pytest.mark.parametrize("way", ["onednn", "openblas"])
def test_where_each_row_count_goes(monkeypatch, way):
    """OpenBLAS's way multiplies 2 to FEW_ROWS rows by oneDNN's copy at their own count (where
    OpenBLAS was 2-4x slower), the rest by OpenBLAS's; oneDNN's way pads every count to
    rows_bucket's."""
    if way == "openblas" and not openblas.available():
        pytest.skip("numpy's BLAS is not OpenBLAS 0.3.27 or later (test_numpys_openblas_is_found)")
    monkeypatch.setattr(products, "_way_here", lambda: way)
    monkeypatch.setattr(products, "PACKED_MIN_WEIGHTS", 0)
    multiply, padded = products._onednn_product, {}

    def spy(entry, x, relu, padded_rows):
        padded[x.numel() // x.size(-1)] = padded_rows
        return multiply(entry, x, relu, padded_rows)

    monkeypatch.setattr(products, "_onednn_product", spy)
    torch.manual_seed(2)
    layer, counts, by_openblas = nn.Linear(16, 24), range(1, products.FEW_ROWS + 3), set()
    for rows in counts:
        owner = nn.Module()  # copies of its own: which library made one
        owner.layer = layer
        x = torch.randn(rows, 16)
        with torch.no_grad(), one_thread():
            got = apply(owner, "layer", x)
        want = reference(x, layer.weight, layer.bias)
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
        if products._copies[owner][("layer",)]["transposed"] is not None:
            by_openblas.add(rows)
    if way == "onednn":
        assert padded == {rows: rows_bucket(rows) for rows in counts} and not by_openblas
    else:
        assert padded == {rows: rows for rows in range(2, products.FEW_ROWS + 1)}
        assert by_openblas == {1, products.FEW_ROWS + 1, products.FEW_ROWS + 2}


@contextlib.contextmanager
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def test_openblas_takes_only_work_that_torch_runs_on_one_thread(monkeypatch):
    """A single batch on several threads keeps the BLAS: OpenBLAS's threads beside torch's
    spinning ones decoded 10x slower."""
    if not openblas.available():
        pytest.skip("numpy's BLAS is not OpenBLAS 0.3.27 or later (test_numpys_openblas_is_found)")
    monkeypatch.setattr(products, "_way_here", lambda: "openblas")
    monkeypatch.setattr(products, "PACKED_MIN_WEIGHTS", 0)
    threads = torch.get_num_threads()
    x, taken = torch.randn(5, 16), []
    try:
        for count in (2, 1):
            torch.set_num_threads(count)
            owner = nn.Module()
            owner.layer = nn.Linear(16, 8)
            with torch.no_grad():
                got = apply(owner, "layer", x)
            want = reference(x, owner.layer.weight, owner.layer.bias)
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
            taken.append(packed_entry(owner, "layer") is not None)
    finally:
        torch.set_num_threads(threads)
    assert taken == [False, True]


def test_only_weights_large_enough_to_pay_are_packed(monkeypatch):
    monkeypatch.setattr(products, "_way_here", lambda: "onednn")
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
    """The same model's step log-probabilities through oneDNN (or OpenBLAS) and through the
    BLAS: two float32 kernels, so equal within round-off, not bit for bit."""
    model, src = tiny_model(3), torch.randint(4, 20, (4, 7))
    bos = torch.full((4,), BOS)
    with torch.no_grad():
        memory = model.encode(src)
        packed, _, _ = model.decode_step(memory, model.init_state(memory), bos)
        assert packed_entry(model.decoder, "generator") is not None
        monkeypatch.setattr(products, "_way_here", lambda: "blas")
        memory = model.encode(src)
        plain, _, _ = model.decode_step(memory, model.init_state(memory), bos)
        assert packed_entry(model.decoder, "generator") is None
    torch.testing.assert_close(packed, plain, rtol=1e-5, atol=1e-5)


AMD, X86, AVX2, AVX512 = "AuthenticAMD", "x86_64", {"avx2", "fma"}, {"avx2", "avx512f"}


@pytest.mark.parametrize(
    "environ, vendor, machine, flags, openblas_ok, want",
    [
        ({}, AMD, X86, AVX2, True, "openblas"),  # the Zen 3 EPYC
        ({}, AMD, X86, AVX2, False, "onednn"),  # numpy without OpenBLAS's per-thread count
        ({}, AMD, X86, AVX512, True, "onednn"),  # the Zen 4 EPYC
        ({}, "HygonGenuine", X86, AVX2, True, "openblas"),
        ({}, "GenuineIntel", X86, AVX2, True, "blas"),  # MKL on Intel's CPUs
        ({}, "", X86, AVX2, True, "blas"),  # vendor unknown: as before
        ({}, "", "aarch64", set(), True, "blas"),
        ({CHOICE: "onednn"}, "GenuineIntel", X86, AVX2, True, "onednn"),
        ({CHOICE: " OneDNN\n"}, "", "aarch64", set(), True, "onednn"),
        ({CHOICE: "openblas"}, "GenuineIntel", X86, AVX512, True, "openblas"),
        ({CHOICE: "OpenBLAS"}, AMD, X86, AVX512, False, "onednn"),  # the next way it can take
        ({CHOICE: "blas"}, AMD, X86, AVX2, True, "blas"),
        ({CHOICE: ""}, AMD, X86, AVX512, True, "onednn"),  # empty: unset
    ],
)
def test_where_products_go(environ, vendor, machine, flags, openblas_ok, want):
    assert product_way(environ, vendor, machine, flags, openblas_ok) == want


@pytest.mark.parametrize("value", ["1", "mkl", "yes", "onednn,blas", "oneDNN\x00", "é" * 5000])
def test_a_bad_choice_is_refused_by_name(value):
    with pytest.raises(ValueError, match=CHOICE) as error:
        product_way({CHOICE: value}, AMD, X86, AVX2, True)
    assert "onednn, openblas or blas" in str(error.value)


def test_numpys_openblas_is_found():
    """Where numpy's wheel carries OpenBLAS 0.3.27 or later (PyPI's numpy 2 does), openblas.py
    finds its per-thread count, so the OpenBLAS tests above run rather than skip."""
    numpy = pytest.importorskip("numpy")
    blas = numpy.show_config(mode="dicts")["Build Dependencies"]["blas"]
    version = tuple(int(part) for part in blas.get("version", "0").split(".")[:3])
    if "openblas" in blas["name"] and version >= (0, 3, 27):
        assert openblas.available()


LIBS = "/venv/site-packages/numpy.libs"
LINE = "7f3a-7f3b r-xp 00001000 08:01 1234     "  # address, permissions, offset, device, inode


@pytest.mark.parametrize(
    "maps, want",
    [
        (f"{LINE}{LIBS}/libscipy_openblas64_-32a4.so", f"{LIBS}/libscipy_openblas64_-32a4.so"),
        (
            f"{LINE}{LIBS}/libopenblas64_p-r0-0cf96a72.3.23.so",
            f"{LIBS}/libopenblas64_p-r0-0cf96a72.3.23.so",
        ),
        ("", None),  # empty
        (f"{LINE}", None),  # an anonymous mapping: no path
        (f"{LINE}{LIBS}/libgfortran-040039e1.so.5", None),  # numpy's, not OpenBLAS
        (f"{LINE}/usr/lib/libopenblas.so.0", None),  # another OpenBLAS than numpy's
        (f"{LINE}{LIBS}/libscipy_openblas64_.so (deleted)", None),  # replaced on disk
        (f"{LINE}{LIBS}/sub dir/libopenblas.so", None),  # below the folder, a space in its name
        ("7f3a-7f3b r-xp", None),  # truncated
        ("\x00\ufffd" * 10_000, None),  # binary, huge
    ],
)
def test_numpys_openblas_is_told_from_other_libraries(maps, want):
    from pathlib import Path

    got = openblas.bundled_openblas(maps, Path(LIBS))
    assert got == (None if want is None else Path(want))


def test_openblas_runs_on_one_thread_and_puts_the_count_back(monkeypatch):
    """A product sets the calling thread's OpenBLAS count to one for its own call only:
    numpy's other work keeps the count it had."""
    if not openblas.available():
        pytest.skip("numpy's BLAS is not OpenBLAS 0.3.27 or later (test_numpys_openblas_is_found)")
    setter, seen = openblas._thread_setter(), []
    monkeypatch.setattr(openblas, "_thread_setter", lambda: lambda n: seen.append(n) or setter(n))
    x, weight = torch.randn(9, 16), torch.randn(16, 4)
    before = setter(3)
    try:
        got = openblas.linear(x, weight.numpy(), None, relu=False)
    finally:
        assert setter(before) == 3  # put back
    assert seen == [1, 3]
    torch.testing.assert_close(got.double(), x.double() @ weight.double(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("relu", [False, True])
def test_openblas_multiplies_rows_in_fours_and_returns_the_rows_asked(monkeypatch, relu):
    """Up to PADDED_ROWS rows are padded with zeros to a multiple of ROW_MULTIPLE for OpenBLAS's
    kernels (one row stays a matrix-vector product, more rows stay as they are); what comes
    back is each asked row's x Wᵀ + b, exactly its count, against a float64 reference."""
    import numpy

    if not openblas.available():
        pytest.skip("numpy's BLAS is not OpenBLAS 0.3.27 or later (test_numpys_openblas_is_found)")
    matmul, multiplied = numpy.matmul, []
    monkeypatch.setattr(numpy, "matmul", lambda a, b: multiplied.append(len(a)) or matmul(a, b))
    torch.manual_seed(7)
    weight, bias = torch.randn(24, 16), torch.randn(24)
    for rows in [*range(1, 14), openblas.PADDED_ROWS - 1, openblas.PADDED_ROWS + 1, 63]:
        x = torch.randn(rows, 1, 16)
        got = openblas.linear(x, *openblas.operands(weight, bias), relu)
        want = reference(x, weight, bias)
        want = want.clamp(min=0) if relu else want
        assert got.shape == (rows, 1, 24)
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
        step = openblas.ROW_MULTIPLE if 1 < rows <= openblas.PADDED_ROWS else 1
        assert multiplied.pop() == -(-rows // step) * step


def test_copies_dropped_by_a_search_beside_are_not_taken_from_under_another(packing, monkeypatch):
    """A search on a model not kept drops its copies at every encode (forget_products); one
    side by side may do so between another's making of an entry and its use: the entry made
    is the one used, for product, apply and planned alike (the demo's evaluation met a
    KeyError there once encodes made plans too)."""
    torch.manual_seed(9)
    owner = nn.Module()
    owner.layer = nn.Linear(16, 24)
    stack = products._stack

    def stack_then_forget(layers):  # the other search's encode, at the worst moment
        stacked = stack(layers)
        products.forget_products(owner)
        return stacked

    monkeypatch.setattr(products, "_stack", stack_then_forget)
    x, parts = torch.randn(3, 16), {"layer": owner.layer}
    want = reference(x, owner.layer.weight, owner.layer.bias)
    with torch.no_grad():
        made = products.planned(owner, parts)
        for got in (product(owner, parts, x), apply(owner, "layer", x), made(x)):
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_products_side_by_side_in_streams_are_each_right(packing):
    """Decoding's streams multiply at once, each from its own thread (cpu.in_streams): each
    product equals its float64 reference."""
    torch.manual_seed(5)
    owner = nn.Module()
    owner.layer = nn.Linear(64, 96)
    inputs, got, lock = (
        [torch.randn(rows, 64) for rows in (1, 7, 64, 200, 33, 512)],
        {},
        threading.Lock(),
    )

    def multiply(i: int) -> None:
        with torch.no_grad():
            y = apply(owner, "layer", inputs[i], relu=i % 2 == 1)
        with lock:
            got[i] = y

    run_side_by_side(multiply, list(range(len(inputs))) * 3, streams=2)
    for i, x in enumerate(inputs):
        want = reference(x, owner.layer.weight, owner.layer.bias)
        want = want.clamp(min=0) if i % 2 == 1 else want
        torch.testing.assert_close(got[i].double(), want, rtol=1e-5, atol=1e-5)


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
    products._way_here.cache_clear()
    try:
        with pytest.raises(ValueError, match=f"{CHOICE}='fast'"):
            Translator.load(reverse_model_dir)
    finally:
        monkeypatch.delenv(CHOICE)
        products._way_here.cache_clear()
