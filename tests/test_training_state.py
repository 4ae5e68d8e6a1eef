"""The training state: parameter groups, the seed, and the round trip through a checkpoint."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig, TrainConfig
from heedful.io import CheckpointError
from heedful.models.build import build_model
from heedful.training.state import (
    TrainProgress,
    TrainState,
    budget_used,
    learning_rate_factor,
    parameter_groups,
    restore_rng,
    rng_state,
)

TRANSFORMER = ModelConfig(
    d_model=16,
    num_heads=2,
    d_ff=32,
    encoder=TextEncoderConfig(layers=1),
    decoder=DecoderConfig(layers=1),
)
RNN = ModelConfig(
    arch="rnn",
    rnn_cell="lstm",
    d_model=8,
    hidden_size=16,
    decoder=DecoderConfig(attention="bahdanau"),
)


def test_schedule_warms_up_linearly_then_decays_as_inverse_sqrt():
    assert learning_rate_factor(50, 100, "inverse_sqrt") == pytest.approx(0.5)
    assert learning_rate_factor(100, 100, "inverse_sqrt") == pytest.approx(1.0)
    assert learning_rate_factor(400, 100, "inverse_sqrt") == pytest.approx(0.5)
    assert learning_rate_factor(400, 100, "constant") == 1.0


def test_the_budget_is_steps_or_time_whichever_runs_out_first():
    assert budget_used(50, 999.0, TrainConfig(max_steps=100)) == 0.5
    assert budget_used(50, 8.0, TrainConfig(max_steps=100, max_time=10.0)) == 0.8
    assert budget_used(90, 1.0, TrainConfig(max_steps=100, max_time=10.0)) == 0.9
    assert budget_used(50, 20.0, TrainConfig(max_steps=100, max_time=10.0)) == 1.0


@pytest.mark.parametrize("warmup", [0, 1, 30])
def test_the_linear_schedule_falls_from_the_peak_to_zero_at_the_budget_end(warmup):
    """By steps alone (an even pace), the line from the end of warm-up to max_steps."""
    total = 120
    factors = [
        learning_rate_factor(step, warmup, "linear", step / total) for step in range(1, total + 1)
    ]
    for step, factor in zip(range(1, total + 1), factors):
        if step < warmup:
            assert factor == pytest.approx(step / warmup)
        else:
            expected = (total - step) / (total - max(warmup, 0))
            assert factor == pytest.approx(expected, abs=1e-12), step
    assert factors[-1] == 0.0 and max(factors) == pytest.approx(1.0 if warmup else 119 / 120)
    after = factors[max(warmup, 1) - 1 :]
    assert all(a >= b for a, b in zip(after, after[1:]))  # never rises after the peak


@pytest.mark.parametrize("warmup_share", [0.05, 0.5, 0.9])
def test_the_linear_schedule_by_time_never_passes_the_peak(warmup_share):
    """Steps at an uneven pace (warm-up took `warmup_share` of the time to step 100): the
    factor stays in [0, 1], is 1 where warm-up ends and 0 once the time is spent."""
    warmup, total_time = 100, 1000.0
    for step in (100, 101, 150, 400, 2000):
        seconds = warmup_share * total_time * min(step, warmup) / warmup
        seconds += max(0, step - warmup) * (1 - warmup_share) * total_time / 2000
        used = budget_used(step, seconds, TrainConfig(max_steps=10**6, max_time=total_time))
        factor = learning_rate_factor(step, warmup, "linear", used)
        assert 0.0 <= factor <= 1.0 + 1e-12, (step, used, factor)
        if step == warmup:
            assert factor == pytest.approx(1.0)
    assert learning_rate_factor(2000, warmup, "linear", 1.0) == 0.0
    assert learning_rate_factor(100, warmup, "linear", 1.0) == 0.0  # spent during warm-up


@pytest.mark.parametrize("config", [TRANSFORMER, RNN], ids=["transformer", "rnn"])
def test_matrices_and_embeddings_decay_biases_and_norms_do_not(config):
    model = build_model(config, 12, 12)
    names = {id(p): name for name, p in model.named_parameters()}
    decay, keep = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and keep["weight_decay"] == 0.0
    decayed = {names[id(p)] for p in decay["params"]}
    kept = {names[id(p)] for p in keep["params"]}
    assert decayed | kept == set(names.values()) and not decayed & kept
    assert all("bias" in n or "norm" in n for n in kept), kept
    assert not any("bias" in n or "norm" in n for n in decayed), decayed
    assert any("embed" in n for n in decayed)  # as nanoGPT: tied with the output projection
    if config.arch == "transformer":
        assert any("norm.weight" in n for n in kept)  # LayerNorm gains


def test_without_decay_one_group_in_model_order_as_before():
    model = build_model(TRANSFORMER, 12, 12)
    [group] = parameter_groups(model, 0.0)
    assert group["params"] == list(model.parameters())


def test_adamw_shrinks_the_matrices_and_leaves_the_norms():
    model = build_model(TRANSFORMER, 12, 12)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = TrainConfig(optimizer="adamw", weight_decay=0.5, lr=0.1, warmup_steps=0)
    state = TrainState.fresh(model, config)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # no gradient: only the decay moves a weight
    state.optimizer.step()
    for name, p in model.named_parameters():
        factor = 1.0 if ("bias" in name or "norm" in name) else 1 - 0.1 * 0.5
        torch.testing.assert_close(p.detach(), before[name] * factor, msg=name)


def test_fresh_state_starts_the_generators_from_the_seed():
    model = build_model(TRANSFORMER, 12, 12)
    TrainState.fresh(model, TrainConfig(seed=7))
    drawn = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(drawn, torch.rand(3))


def _trained_state(model, config, steps=3) -> TrainState:
    state = TrainState.fresh(model, config)
    for _ in range(steps):
        state.optimizer.zero_grad()
        model(torch.tensor([[4, 5, 6]]), torch.tensor([[1, 7, 8]])).logits.sum().backward()
        state.optimizer.step()
        state.scheduler.step()
    state.progress = TrainProgress(step=steps, epoch=1, batch_in_epoch=2, best_score=3.5)
    return state


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_a_saved_state_resumes_exactly(tmp_path, weight_decay):
    config = TrainConfig(optimizer="adamw", weight_decay=weight_decay, warmup_steps=5)
    model = build_model(TRANSFORMER, 12, 12)
    saved = _trained_state(model, config)
    saved.save(tmp_path, seed=config.seed)
    expected_draw = torch.rand(5)  # what the run would draw next (dropout)
    torch.rand(100)  # the resumed process's generator is elsewhere
    resumed = TrainState.resume(tmp_path, model, config)
    assert torch.equal(torch.rand(5), expected_draw)
    assert resumed.progress == saved.progress
    assert resumed.scheduler.get_last_lr() == saved.scheduler.get_last_lr()
    assert resumed.scheduler.last_epoch == saved.scheduler.last_epoch
    a, b = saved.optimizer.state_dict(), resumed.optimizer.state_dict()
    assert json.dumps(a["param_groups"]) == json.dumps(b["param_groups"])  # betas: a list now
    for key, moments in a["state"].items():
        for name, value in moments.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(b["state"][key][name]))


def test_a_state_from_a_gpu_resumes_on_a_cpu(tmp_path):
    """The CUDA generators' states are saved when CUDA is in use; without a GPU they wait."""
    model = build_model(TRANSFORMER, 12, 12)
    config = TrainConfig()
    _trained_state(model, config).save(tmp_path)
    path = tmp_path / "training_state.safetensors"
    tensors = load_file(str(path))
    tensors["rng.cuda.0"] = torch.zeros(16, dtype=torch.uint8)  # as a one-GPU machine adds
    save_file(tensors, str(path))
    torch.set_rng_state(tensors["rng.torch"])
    expected = torch.rand(3)
    TrainState.resume(tmp_path, model, config)
    assert torch.equal(torch.rand(3), expected)


def test_a_state_with_other_parameter_groups_is_named(tmp_path):
    model = build_model(TRANSFORMER, 12, 12)
    _trained_state(model, TrainConfig(optimizer="adamw", weight_decay=0.0)).save(tmp_path)
    with pytest.raises(CheckpointError, match="train.weight_decay.*--force"):
        TrainState.resume(tmp_path, model, TrainConfig(optimizer="adamw", weight_decay=0.1))


def test_the_generators_round_trip_on_this_machine():
    """rng_state/restore_rng on the generators this machine has (the CPU's here; the CUDA
    ones are checked on a GPU by benchmarks/gpu_check.py)."""
    saved = rng_state()
    assert "rng.torch" in saved and all(isinstance(v, torch.Tensor) for v in saved.values())
    expected = torch.rand(4)
    torch.rand(100)
    restore_rng(saved)
    assert torch.equal(torch.rand(4), expected)
