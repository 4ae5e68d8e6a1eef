"""Tour models that do not depend on the machine (issue 28, item 5): every demo is budgeted by
steps, not seconds, so a busy machine trains the very same model, only slower; shown by
training a demo twice, once beside a process that keeps a core busy, and comparing the weights
bit for bit. The budgets are in `heedful demo --help`, and the model directory says how it was
trained (checkpoint/status.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from safetensors.torch import load_file

from heedful.cli import main
from heedful.demo import run as demo_run
from heedful.demo.run import DEMO_TASKS, run_demo

SMALL = ["--train-size", "300", "--max-steps", "30", "--no-progress"]


def demo(out: Path, *options: str) -> subprocess.CompletedProcess:
    """`heedful demo` in its own process, on two threads as a user's two cores run it."""
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    command = [sys.executable, "-m", "heedful", "demo", "--out", str(out), *options]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_a_busy_machine_trains_the_same_model_bit_for_bit(tmp_path):
    options = ["--task", "dialogue", *SMALL]
    demo(tmp_path / "idle", *options)
    spinning = "import time\nend = time.time() + 600\nwhile time.time() < end: pass"
    busy = subprocess.Popen([sys.executable, "-c", spinning])
    try:
        demo(tmp_path / "busy", *options)
    finally:
        busy.kill()
        busy.wait()
    idle = load_file(tmp_path / "idle" / "model-rnn-bahdanau" / "model.safetensors")
    loaded = load_file(tmp_path / "busy" / "model-rnn-bahdanau" / "model.safetensors")
    assert idle.keys() == loaded.keys()
    different = [name for name in idle if not idle[name].equal(loaded[name])]
    assert different == []  # bit for bit: the same steps, batches and arithmetic
    status = [
        json.loads((tmp_path / run / "model-rnn-bahdanau" / "training.json").read_text())
        for run in ("idle", "busy")
    ]
    assert status[0] == status[1] and status[0]["steps"] == 30


@pytest.mark.parametrize("task", list(DEMO_TASKS))
def test_every_demo_is_budgeted_by_steps_alone(task, tmp_path, monkeypatch):
    """run_demo's TrainConfig: its model's step budget, and no time limit (which would make the
    model depend on how busy the machine is)."""
    seen = {}

    class Stop(Exception):
        pass

    def capture(model, pairs, config, *args, **kwargs):
        seen["train"] = config.train
        raise Stop

    monkeypatch.setattr(demo_run, "train_logged", capture)
    model = DEMO_TASKS[task].model_name
    with pytest.raises(Stop):
        run_demo(model, tmp_path, train_size=40, test_size=10, task=task, echo=lambda _: None)
    assert seen["train"].max_time is None
    assert seen["train"].max_steps == DEMO_TASKS[task].step_budget(model)


def test_the_help_gives_every_models_step_budget():
    output = CliRunner().invoke(main, ["demo", "--help"]).output
    compact = "".join(output.split())  # click wraps lines, at spaces and after hyphens
    for task in DEMO_TASKS.values():
        for model in task.models:
            budget = task.step_budget(model)
            shared = model.startswith("rnn-") and f"rnn-*{budget}" in compact
            assert f"{model}{budget}" in compact or shared, (model, budget)
    text = " ".join(output.split())
    assert "[default: no limit]" in text and "a busy machine trains the same model" in text
