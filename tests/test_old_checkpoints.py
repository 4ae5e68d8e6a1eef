"""Training checkpoints written before the models became EncoderDecoder(encoder, decoder)
resume: their weights load under today's names and their optimizer state, numbered by the
order of the earlier model's parameters, reaches the tensors it belongs to.

tests/fixtures/make_old_runs.py ran each run to step 4 with the earlier code, kept that
checkpoint, and let the earlier code resume it to step 8 (expected.safetensors). Resumed here
from step 4, a run must reach the same weights: a moment of Adam handed to another tensor
moves the weights at once by up to the learning rate. Compared per tensor against how far the
four steps moved it, as tests/test_output_loss.py does (round-off differs between CPUs, and
today's captioner takes the sliced loss and fused attention where the earlier one did not).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from heedful.checkpoint.model_dir import load_model_dir
from heedful.checkpoint.names import current_names

FIXTURES = Path(__file__).resolve().parent / "fixtures"
sys.path.insert(0, str(FIXTURES))

import make_old_runs  # noqa: E402


def today(path: Path) -> dict[str, torch.Tensor]:
    """A weights file's tensors under today's names."""
    tensors = load_file(str(path))
    return {name: tensors[old] for old, name in current_names(tensors).items()}


def resume(name: str, tmp_path: Path):
    """The fixture's step-4 checkpoint as the latest of a run directory, trained to step 8."""
    from heedful.training.experiment import train_from_config

    data = make_old_runs.DATA[name](tmp_path / "data")
    run = tmp_path / "run"
    shutil.copytree(
        FIXTURES / "old_runs" / name / "step-00000004", run / "checkpoints" / "step-00000004"
    )
    (run / "metrics.jsonl").touch()  # a run directory from before train.lock
    (run / "latest").symlink_to("checkpoints/step-00000004")
    lines = []
    config = make_old_runs.config(name, data, 8)
    result = train_from_config(config, run, progress=False, echo=lines.append)
    return result, lines, run


@pytest.mark.parametrize("name", sorted(make_old_runs.RUNS))
def test_a_run_checkpointed_under_the_earlier_names_resumes(name, tmp_path):
    result, lines, run = resume(name, tmp_path)
    assert result.steps == 8 and any(
        "resuming from" in line and "(step 4)" in line for line in lines
    )
    fixture = FIXTURES / "old_runs" / name
    start, expected = (
        today(fixture / "step-00000004" / "model.safetensors"),
        today(fixture / "expected.safetensors"),
    )
    reached = load_model_dir(run / "latest").model.state_dict()
    for tensor, want in expected.items():
        moved = (want - start[tensor]).abs().max().item()
        error = (reached[tensor] - want).abs().max().item()
        assert error <= 1e-3 * moved + 1e-6, (tensor, error, moved)
    written = load_file(str(run / "latest" / "model.safetensors"))
    assert set(written) <= set(reached) and "encoder.layers.0.self_attn.w_q.weight" in written
    info = json.loads((run / "latest" / "training_state.json").read_text())
    assert set(info["optimizer_parameters"]) <= set(reached)  # today's names, listed
