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
from heedful.training.output_loss import output_layer_loss


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
    src = [
        torch.randint(4, 12, (int(n),), generator=g).tolist() for n in torch.randint(2, 9, (40,))
    ]
    pairs = InMemoryPairs(src, [list(reversed(s)) for s in src])
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
