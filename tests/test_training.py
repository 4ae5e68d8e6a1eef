"""The training loop's parts: schedule, data order, stopping limits."""

import pytest
import torch

from heedful.config import ModelConfig, TrainConfig
from heedful.models.build import build_model
from heedful.training import BatchStream, learning_rate_factor, train


def test_schedule_warms_up_linearly_then_decays_as_inverse_sqrt():
    assert learning_rate_factor(50, 100, "inverse_sqrt") == pytest.approx(0.5)
    assert learning_rate_factor(100, 100, "inverse_sqrt") == pytest.approx(1.0)
    assert learning_rate_factor(400, 100, "inverse_sqrt") == pytest.approx(0.5)
    assert learning_rate_factor(400, 100, "constant") == 1.0


def data(n=40):
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(2, 9, (n,), generator=g).tolist()
    src = [torch.randint(4, 12, (length,), generator=g).tolist() for length in lengths]
    return src, [list(reversed(s)) for s in src]


def test_batch_stream_resumes_at_any_position():
    src, tgt = data()
    straight = BatchStream(src, tgt, 40, seed=5)
    batches = [straight.next() for _ in range(25)]  # crosses epoch boundaries
    resumed = BatchStream(src, tgt, 40, seed=5, epoch=straight.epoch, batch=straight.batch)
    again = BatchStream(src, tgt, 40, seed=5)
    for _ in range(11):
        again.next()
    tail = BatchStream(src, tgt, 40, seed=5, epoch=again.epoch, batch=again.batch)
    for i in range(11, 25):
        assert all(torch.equal(a, b) for a, b in zip(tail.next(), batches[i]))
    assert resumed.epochs_done() >= 1


def test_max_epochs_stops_after_exactly_one_pass():
    src, tgt = data()
    config = ModelConfig(d_model=16, num_heads=2, encoder_layers=1, decoder_layers=1, d_ff=32)
    model = build_model(config, 12, 12)
    per_epoch = len(BatchStream(src, tgt, 60, seed=1)._order)
    result = train(
        model,
        src,
        tgt,
        TrainConfig(batch_tokens=60, max_epochs=1, max_steps=1000, seed=1),
        progress=False,
    )
    assert result.stopped_by == "max_epochs" and result.steps == per_epoch


def test_bf16_is_automatic_only_on_a_gpu():
    from heedful.training import use_bf16

    assert use_bf16(None, "cpu") is False
    assert use_bf16(True, "cpu") is True and use_bf16(False, "cpu") is False
    if torch.cuda.is_available():
        assert use_bf16(None, "cuda") == torch.cuda.is_bf16_supported()
