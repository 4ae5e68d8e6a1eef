"""The sliced output layer + loss against F.cross_entropy in float64, and in training."""

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig, TrainConfig
from heedful.data.batching import InMemoryPairs
from heedful.models.build import build_model
from heedful.training.loop import defers_output_layer, train
from heedful.training.output_loss import ROW_MULTIPLE, output_layer_loss, output_products


def reference(h, layer, targets, smoothing):
    """The plain path in float64: all logits, then the summed smoothed cross-entropy."""
    h64 = h.detach().double().requires_grad_()
    w64 = layer.weight.detach().double().requires_grad_()
    b64 = None if layer.bias is None else layer.bias.detach().double().requires_grad_()
    logits = F.linear(h64, w64, b64)
    loss = F.cross_entropy(
        logits.flatten(0, -2), targets.flatten(), ignore_index=0,
        label_smoothing=smoothing, reduction="sum",
    )  # fmt: skip
    loss.backward()
    return loss, h64.grad, w64.grad, None if b64 is None else b64.grad


CASES = [  # (positions, rows per slice, smoothing, bias)
    (37, 8, 0.1, True),  # 8 does not divide 37: a short last slice
    (37, 64, 0.1, True),  # one slice larger than the batch
    (40, 1, 0.0, False),  # a slice per row, no smoothing, no bias
    (24, 5, 0.3, True),
]


@pytest.mark.parametrize(("n", "rows", "smoothing", "bias"), CASES)
def test_loss_and_gradients_match_cross_entropy_in_float64(n, rows, smoothing, bias):
    g = torch.Generator().manual_seed(n + rows)
    layer = nn.Linear(16, 50, bias=bias)
    h = torch.randn(2, n // 2 if n % 2 == 0 else n, 16, generator=g).reshape(-1, 16)[:n]
    h = h.clone().requires_grad_()
    targets = torch.randint(1, 50, (n,), generator=g)
    targets[::5] = 0  # padding positions count nothing
    loss = output_layer_loss(h, layer, targets, smoothing, ignore_index=0, rows=rows)
    loss.backward()
    ref_loss, ref_h, ref_w, ref_b = reference(h, layer, targets, smoothing)
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5)
    torch.testing.assert_close(h.grad.double(), ref_h, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(layer.weight.grad.double(), ref_w, rtol=1e-4, atol=1e-6)
    if bias:
        torch.testing.assert_close(layer.bias.grad.double(), ref_b, rtol=1e-4, atol=1e-6)
    assert h.grad[::5].abs().max() == 0  # a padding position gets no gradient


def test_the_incoming_gradient_scales_every_gradient():
    layer, h = nn.Linear(8, 20), torch.randn(10, 8, requires_grad=True)
    targets = torch.randint(1, 20, (10,))
    output_layer_loss(h, layer, targets, 0.1, 0, rows=3).backward()
    once = (h.grad.clone(), layer.weight.grad.clone(), layer.bias.grad.clone())
    h.grad, layer.weight.grad, layer.bias.grad = None, None, None
    (output_layer_loss(h, layer, targets, 0.1, 0, rows=3) * -2.5).backward()
    for a, b in zip(once, (h.grad, layer.weight.grad, layer.bias.grad)):
        torch.testing.assert_close(b, -2.5 * a)


def test_a_tied_weight_adds_the_output_gradient_to_the_embedding_one():
    embed, layer = nn.Embedding(20, 8), nn.Linear(8, 20)
    layer.weight = embed.weight
    tokens = torch.randint(1, 20, (2, 6))
    loss = output_layer_loss(embed(tokens), layer, tokens.roll(1, 1), 0.1, 0, rows=4)
    loss.backward()
    sliced = embed.weight.grad.clone()
    embed.weight.grad = None
    logits = layer(embed(tokens))
    F.cross_entropy(
        logits.flatten(0, 1), tokens.roll(1, 1).flatten(), ignore_index=0,
        label_smoothing=0.1, reduction="sum",
    ).backward()  # fmt: skip
    torch.testing.assert_close(sliced, embed.weight.grad, rtol=1e-4, atol=1e-5)


def reversal_pairs(lengths, vocab: int, generator) -> InMemoryPairs:
    """Random sources of these lengths (ids 4 to vocab - 1), each target its source reversed."""
    src = [torch.randint(4, vocab, (int(n),), generator=generator).tolist() for n in lengths]
    return InMemoryPairs(src, [list(reversed(s)) for s in src])


def relative_error(value, ref):
    return float((value.double() - ref).norm() / ref.norm())


@pytest.mark.parametrize(("n", "bias"), [(37, True), (200, False), (64, True), (2, True)])
def test_bfloat16_products_keep_the_float64_loss_and_gradients_to_their_rounding(n, bias):
    """bfloat16 carries 8 significant bits (relative rounding 2⁻⁹ ≈ 0.002): the loss and the
    gradients stay within about that of float64 (a dropped slice, a lost padding row or a
    wrong dtype in the sums would be off by far more); 37, 200 and 2 positions need padding
    rows, 64 none."""
    g = torch.Generator().manual_seed(n)
    layer = nn.Linear(24, 300, bias=bias)
    h = torch.randn(n, 24, generator=g).requires_grad_()
    targets = torch.randint(1, 300, (n,), generator=g)
    targets[::7] = 0
    loss = output_layer_loss(h, layer, targets, 0.1, 0, rows=128, products=torch.bfloat16)
    loss.backward()
    ref_loss, ref_h, ref_w, ref_b = reference(h, layer, targets, 0.1)
    assert loss.dtype == torch.float32 and h.grad.shape == h.shape
    assert loss.item() == pytest.approx(ref_loss.item(), rel=2e-3)
    for value, ref in [(h.grad, ref_h), (layer.weight.grad, ref_w)] + (
        [(layer.bias.grad, ref_b)] if bias else []
    ):
        assert value.dtype == torch.float32 and relative_error(value, ref) < 1e-2
    assert h.grad[::7].abs().max() == 0  # a padding position gets no gradient


def test_bfloat16_products_see_a_bounded_set_of_shapes():
    """oneDNN keeps a kernel for every shape it multiplies: over 150 batch sizes the bfloat16
    products meet row counts in multiples of ROW_MULTIPLE only, at most ROWS / ROW_MULTIPLE of
    them (a batch's last slice would otherwise bring a new shape with most batches)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Shapes(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.mm.default and args[0].dtype == torch.bfloat16:
                self.seen.add((*args[0].shape, args[1].shape[1]))
            return func(*args, **(kwargs or {}))

    layer, rows = nn.Linear(24, 300), 4 * ROW_MULTIPLE
    with Shapes() as shapes:
        for n in range(1, 600, 4):
            h = torch.randn(n, 24, requires_grad=True)
            targets = torch.randint(1, 300, (n,))
            output_layer_loss(h, layer, targets, 0.1, 0, rows=rows, products=torch.bfloat16)
    counts = {d for shape in shapes.seen for d in shape if d not in (24, 300)}
    assert counts and all(d % ROW_MULTIPLE == 0 and d <= rows for d in counts)
    assert len(shapes.seen) <= 3 * rows // ROW_MULTIPLE  # z, dz W and dzᵀ h per row count


def test_bfloat16_products_need_slices_of_whole_row_multiples():
    layer, h = nn.Linear(8, 20), torch.randn(10, 8)
    with pytest.raises(ValueError, match="rows: a multiple of 64"):
        output_layer_loss(h, layer, torch.ones(10, dtype=torch.long), 0.1, 0, 100, torch.bfloat16)


@pytest.mark.parametrize(
    ("setting", "device", "flags", "dtype"),
    [
        ("auto", "cpu", {"avx2", "avx512f", "avx512_bf16"}, torch.bfloat16),  # Zen 4
        ("auto", "cpu", {"avx512f", "amx_bf16", "amx_tile"}, torch.bfloat16),  # a Xeon with AMX
        ("auto", "cpu", {"avx2", "fma"}, None),  # emulated bfloat16: slower; the states' float32
        ("auto", "cpu", set(), None),  # flags unknown
        ("auto", "cuda", {"avx512_bf16"}, None),  # not the CPU's products
        ("bfloat16", "cpu", {"avx2"}, torch.bfloat16),  # asked for (the log warns)
        ("float32", "cpu", {"avx512_bf16"}, None),
    ],
)
def test_output_products_follow_the_setting_and_the_cpu(setting, device, flags, dtype):
    assert output_products(setting, device, flags) == dtype


@pytest.mark.parametrize("n", [0, 3])
def test_only_padding_or_no_positions_give_zero_loss_and_gradients(n):
    layer, h = nn.Linear(8, 20), torch.randn(n, 8, requires_grad=True)
    loss = output_layer_loss(h, layer, torch.zeros(n, dtype=torch.long), 0.1, 0, rows=2)
    loss.backward()
    assert loss.item() == 0.0 and layer.weight.grad.abs().max() == 0
    assert h.grad.shape == (n, 8) and (n == 0 or h.grad.abs().max() == 0)


@pytest.mark.parametrize(
    "config",
    [
        ModelConfig(
            d_model=16,
            num_heads=2,
            d_ff=32,
            encoder=TextEncoderConfig(layers=1),
            decoder=DecoderConfig(layers=1),
        ),
        ModelConfig(arch="rnn", d_model=8, hidden_size=16),
        ModelConfig(
            arch="rnn",
            d_model=8,
            hidden_size=16,
            rnn_cell="lstm",
            decoder=DecoderConfig(input_feeding=True),
        ),
    ],
    ids=["transformer", "rnn", "rnn-lstm-input-feeding"],
)
def test_models_hand_over_the_states_before_the_output_layer(config):
    model = build_model(config, 12, 12)
    assert defers_output_layer(model)
    src = torch.randint(4, 12, (2, 5))
    model.eval()  # no dropout: the two calls must see the same network
    out = model(src, src, project=False)
    assert out.logits is None and out.features.shape[:2] == (2, 5)
    torch.testing.assert_close(out.output_layer(out.features), model(src, src).logits)


def test_the_pointer_generator_keeps_its_mixture_when_asked_for_states():
    """Its log P(w) mixes the softmax with copied attention: no output layer alone gives it."""
    model = build_model(
        ModelConfig(arch="rnn", d_model=8, hidden_size=16, decoder=DecoderConfig(copy=True)), 12, 12
    )
    src = torch.randint(4, 12, (2, 5))
    model.eval()
    out = model(src, src, project=False)
    assert out.features is None
    torch.testing.assert_close(out.logits, model(src, src).logits)


@pytest.mark.parametrize(
    "model_config",
    [
        ModelConfig(
            d_model=16,
            num_heads=2,
            d_ff=32,
            dropout=0.0,
            encoder=TextEncoderConfig(layers=1),
            decoder=DecoderConfig(layers=1),
        ),
        ModelConfig(arch="rnn", d_model=8, hidden_size=16, dropout=0.0),
        ModelConfig(
            arch="rnn", d_model=8, hidden_size=16, dropout=0.0, decoder=DecoderConfig(copy=True)
        ),
    ],
    ids=["transformer", "rnn", "pointer-generator"],
)
def test_training_through_the_sliced_loss_follows_the_plain_one(monkeypatch, model_config):
    """The same 6 steps with the logits whole (the model made to look like it cannot defer)
    and in slices: the weights agree to float round-off."""
    g = torch.Generator().manual_seed(0)
    pairs = reversal_pairs(torch.randint(2, 9, (40,)), 12, g)
    config = TrainConfig(batch_tokens=60, max_steps=6, warmup_steps=2, seed=2, lr=0.01)
    models = []
    for sliced in (True, False):
        monkeypatch.setattr("heedful.training.loop.defers_output_layer", lambda m, s=sliced: s)
        torch.manual_seed(0)
        model = build_model(model_config, 12, 12)
        train(model, pairs, replace(config), progress=False)
        models.append(model.state_dict())
    # Per tensor, the two runs' difference against how far training moved it. Not element by
    # element: Adam divides each update by √v, so an element whose gradient is round-off
    # (a ReLU unit that is nearly dead) can take a different step of up to lr in either run;
    # that happened on an AVX2 EPYC after the Multi30k test had run in the same process (its
    # allocations change which kernels' round-off the next runs get): 1 element of 512 off by
    # 2.5e-4. A wrong sliced loss moves whole tensors, far beyond 1e-3 of their movement.
    torch.manual_seed(0)
    initial = build_model(model_config, 12, 12).state_dict()
    moved = 0.0
    for name, value in models[0].items():
        movement = (value - initial[name]).double().norm()
        difference = (value - models[1][name]).double().norm()
        assert difference <= 1e-3 * movement + 1e-6, (name, float(difference), float(movement))
        moved = max(moved, float((value - initial[name]).abs().max()))
    assert moved > 1e-3  # the weights did move: the comparison is not of two untrained models


def test_training_with_bfloat16_output_products_follows_float32():
    """6 steps with the output layer's products in bfloat16 against float32: the two runs'
    weights differ by a small part of how far training moved them (bfloat16's rounding nudges
    Adam's steps, most where a gradient is near 0: a rare token's row; a wrong gradient would
    send the weights elsewhere), and the log says which ran."""
    g = torch.Generator().manual_seed(0)
    pairs = reversal_pairs(torch.randint(2, 9, (40,), generator=g), 40, g)
    model_config = ModelConfig(
        d_model=32,
        num_heads=2,
        d_ff=64,
        dropout=0.0,
        encoder=TextEncoderConfig(layers=1),
        decoder=DecoderConfig(layers=1),
    )
    runs, lines = {}, {}
    for products in ("float32", "bfloat16"):
        config = TrainConfig(
            batch_tokens=60, max_steps=6, warmup_steps=2, seed=2, lr=0.01, output_products=products
        )
        torch.manual_seed(0)
        model = build_model(model_config, 40, 40)
        lines[products] = []
        train(model, pairs, config, progress=False, echo=lines[products].append)
        runs[products] = model.state_dict()
    torch.manual_seed(0)
    initial = build_model(model_config, 40, 40).state_dict()
    moved, apart = 0.0, 0.0  # squared norms over the whole model
    for name, value in runs["bfloat16"].items():
        moved += float((runs["float32"][name] - initial[name]).double().norm()) ** 2
        apart += float((value - runs["float32"][name]).double().norm()) ** 2
    assert 0 < apart**0.5 < 0.1 * moved**0.5  # bfloat16 ran, and close (measured: 0.03)
    assert any("output layer's products in bfloat16" in line for line in lines["bfloat16"])
    assert not any("products in bfloat16" in line for line in lines["float32"])
