"""A training batch in pieces side by side (training/streams.py): the gradient of the whole
batch, the same weights whoever runs the pieces, and the models where pieces cannot repeat."""

import threading
import time
from dataclasses import replace
from functools import partial

import pytest
import torch
from torch import nn

from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig, TrainConfig
from heedful.data.batching import Batch, collate
from heedful.data.stream import BatchStream
from heedful.models.build import build_model
from heedful.training import loop, streams
from heedful.training.streams import (
    PIECES,
    Streams,
    backward_in_pieces,
    pieces_for,
    plan,
    split,
)
from tests.test_training import data

MODEL = ModelConfig(
    d_model=16,
    num_heads=2,
    d_ff=32,
    dropout=0.3,
    encoder=TextEncoderConfig(layers=2),
    decoder=DecoderConfig(layers=2),
)


@pytest.fixture
def threads():
    """Restores torch's thread count after a test that changes it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("side_by_side", [1, 2])
def test_the_pieces_give_the_gradient_of_the_whole_batch_in_float64(side_by_side, threads):
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = build_model(replace(MODEL, dropout=0.0), 12, 12).double().train()
    batch = BatchStream(data(), 120, seed=3).next().batch
    tokens = batch.target_tokens()
    loss_of = partial(loop._loss, model, True, 0.1)
    whole = loss_of(batch)
    (whole / tokens).backward()
    reference = grads(model)
    model.zero_grad(set_to_none=True)
    total = backward_in_pieces(loss_of, model, split(batch, 3), 1 / tokens, side_by_side)
    assert total == pytest.approx(whole.item(), rel=1e-12)
    for expected, got in zip(reference, grads(model), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    assert torch.get_num_threads() == 2  # the pieces' threads gave the count back


def trained(pieces: int, threads: int, steps: int = 4) -> list[torch.Tensor]:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build_model(MODEL, 12, 12)
    config = TrainConfig(batch_tokens=80, max_steps=steps, seed=1, pieces=pieces, lr=1e-2)
    loop.train(model, data(), config, progress=False)
    return [p.detach().clone() for p in model.parameters()]


def test_the_weights_do_not_depend_on_how_many_threads_ran_the_pieces(threads):
    """Dropout on: each piece draws its masks from a generator of its own, and the gradients
    are added in piece order, so one thread (the pieces one after the other) and two (side by
    side) train the same weights to the last bit."""
    one, two = trained(PIECES, 1), trained(PIECES, 2)
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))
    whole = trained(1, 2)  # other masks, other sums: the pieces did run
    assert not all(torch.equal(a, b) for a, b in zip(one, whole, strict=True))


def test_split_keeps_every_row_once_and_cuts_each_piece_to_its_own_lengths():
    src = [[5, 6, 7, 8, 9], [5, 6], [7], [5, 6, 7]]
    tgt = [[4], [4, 5, 6, 7], [4, 5], [6]]
    batch = collate(src, tgt)
    first, second = split(batch, 2)
    assert first.src.tolist() == [[5, 6, 7, 8, 9], [5, 6, 0, 0, 0]]
    assert second.src.tolist() == [[7, 0, 0], [5, 6, 7]]  # cut to its own longest source
    assert second.tgt_out.shape == (2, 3) and first.tgt_out.shape == (2, 5)
    assert torch.equal(torch.cat([first.tgt_in[:, :3], second.tgt_in]), batch.tgt_in[:, :3])
    assert not batch.tgt_in[2:, 3:].any() and not batch.src[2:, 3:].any()  # cut: padding only
    assert first.target_tokens() + second.target_tokens() == batch.target_tokens()
    assert [len(p.src) for p in split(batch, 3)] == [2, 1, 1]


@pytest.mark.parametrize(
    "batch, pieces",
    [
        (collate([[5]], [[6]]), 2),  # fewer rows than pieces
        (collate([[5], [6]], [[6], [7]]), 1),  # one piece: the batch itself
        (Batch(torch.zeros(2, 3, 8, 8), torch.ones(2, 2).long(), torch.ones(2, 2).long()), 2),
    ],
    ids=["one-row", "one-piece", "pictures"],
)
def test_split_leaves_whole_what_it_cannot_cut(batch, pieces):
    assert split(batch, pieces) is None


def with_module(module: nn.Module) -> nn.Module:
    model = build_model(replace(MODEL, dropout=0.1), 12, 12)
    model.extra = module
    return model


@pytest.mark.parametrize(
    "setting, model, device, world_size, sliced, pieces, why",
    [
        (None, build_model(MODEL, 12, 12), "cpu", 1, True, PIECES, None),
        (3, build_model(MODEL, 12, 12), "cpu", 1, True, 3, None),
        (1, build_model(MODEL, 12, 12), "meta", 4, False, 1, None),
        (None, build_model(MODEL, 12, 12), "meta", 1, True, 1, "on a CPU only"),
        (None, build_model(MODEL, 12, 12), "cpu", 2, True, 1, "torchrun"),
        (None, build_model(MODEL, 12, 12), "cpu", 1, False, 1, "bfloat16"),
        (None, build_model(replace(MODEL, attention_dropout=0.1), 12, 12), "cpu", 1, True, 1,
         "attention dropout"),
        (None, with_module(nn.Dropout(0.1)), "cpu", 1, True, 1, "extra: torch's dropout"),
        (None, with_module(nn.GRU(4, 4, num_layers=2, dropout=0.2)), "cpu", 1, True, 1,
         "between the layers of torch's GRU"),
        (None, with_module(nn.BatchNorm2d(3)), "cpu", 1, True, 1, "batch norm"),
        (None, with_module(nn.GRU(4, 4, num_layers=1)), "cpu", 1, True, PIECES, None),
        (None, with_module(nn.Dropout(0.0)), "cpu", 1, True, PIECES, None),
    ],
)  # fmt: skip
def test_pieces_only_where_they_repeat(setting, model, device, world_size, sliced, pieces, why):
    got, reason = pieces_for(setting, model, device, world_size, sliced)
    assert got == pieces
    assert (reason is None) == (why is None) and (why is None or why in reason), reason


def test_pieces_asked_for_and_refused_are_told_and_the_default_is_quiet(threads):
    torch.set_num_threads(2)
    lines = []
    refused = build_model(replace(MODEL, attention_dropout=0.1), 12, 12)
    assert plan(3, refused, "cpu", 1, True, lines.append) == (1, 1)
    assert plan(None, refused, "cpu", 1, True, lines.append) == (1, 1)
    assert lines == [
        "train.pieces: 1, not 3: encoder.layers.0.self_attn: attention dropout (torch's kernel "
        "draws the mask)"
    ]
    assert plan(3, build_model(MODEL, 12, 12), "cpu", 1, True, lines.append) == (3, 2)
    torch.set_num_threads(1)
    assert plan(None, build_model(MODEL, 12, 12), "cpu", 1, True) == (PIECES, 1)


def test_an_error_in_a_piece_is_raised_and_the_threads_come_back(threads):
    torch.set_num_threads(2)
    model = build_model(MODEL, 12, 12)
    batch = BatchStream(data(), 120, seed=3).next().batch
    calls = []

    def failing(part):
        calls.append(part)
        if len(calls) == 2:
            raise RuntimeError("piece failed")
        return loop._loss(model, True, 0.1, part)

    with pytest.raises(RuntimeError, match="piece failed"):
        backward_in_pieces(failing, model, split(batch, 3), 0.01, 2)
    assert torch.get_num_threads() == 2


def test_a_piece_that_ends_first_waits_to_add_its_gradient_in_piece_order(threads, monkeypatch):
    """Piece 0 ends last, yet adds first: the sums repeat, and at most `streams` pieces'
    gradients are held at once (the others wait before computing theirs)."""
    torch.set_num_threads(2)
    model = build_model(replace(MODEL, dropout=0.0), 12, 12)
    parts = split(BatchStream(data(), 160, seed=3).next().batch, 4)
    here, order = threading.local(), []

    def loss_of(part):
        here.i = next(i for i, p in enumerate(parts) if p is part)
        if here.i == 0:
            time.sleep(0.3)  # the others finish first
        return loop._loss(model, True, 0.1, part)

    real_add = streams._add
    monkeypatch.setattr(streams, "_add", lambda *a: (order.append(here.i), real_add(*a)))
    total = backward_in_pieces(loss_of, model, parts, 0.01, 2)
    assert order == [0, 1, 2, 3]
    expected = sum(loop._loss(model, True, 0.1, part).item() for part in parts)
    assert total == pytest.approx(expected, rel=1e-6)


def test_a_step_with_pieces_side_by_side_runs_on_each_streams_share_of_the_threads(threads):
    """The clipping and the update too (Streams.step): a two-thread region there would wait
    for the thread that shares its core with another process."""
    torch.set_num_threads(2)
    with Streams(2, 2).step():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with Streams(2, 1).step():  # the pieces one after the other: every thread for each
        assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError, match="mid-step"), Streams(2, 2).step():
        raise RuntimeError("mid-step")
    assert torch.get_num_threads() == 2
