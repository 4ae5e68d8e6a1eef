"""The run directory: what a checkpoint holds, which ones are kept, what a kill leaves behind."""

import json
import os

import pytest

from heedful.checkpoint.model_dir import load_model_dir
from heedful.config import (
    Config,
    DecoderConfig,
    GenerationConfig,
    ModelConfig,
    TextEncoderConfig,
    TrainConfig,
)
from heedful.data.tokenizers import CharTokenizer
from heedful.io import CheckpointError
from heedful.models.build import build_model
from heedful.training.distributed import Distributed
from heedful.training.run_dir import Run
from heedful.training.state import TrainState

MODEL = ModelConfig(
    d_model=16,
    num_heads=2,
    d_ff=32,
    encoder=TextEncoderConfig(layers=1),
    decoder=DecoderConfig(layers=1),
)


def saved_run(tmp_path, metric: str, scores: list[float], **generation) -> Run:
    config = Config(
        model=MODEL,
        train=TrainConfig(early_stopping_metric=metric, keep_best=1),
        generation=GenerationConfig(**generation),
    )
    run = Run(tmp_path, config, Distributed())
    tok = CharTokenizer.train(["abc"])
    model = build_model(MODEL, len(tok), len(tok))
    state = TrainState.fresh(model, config.train)
    for step, score in enumerate(scores, start=1):
        state.progress.step = step
        run.save(model, (tok, tok), state, {"step": step, metric: score})
    return run


def test_a_checkpoint_carries_the_configs_search_settings(tmp_path):
    run = saved_run(tmp_path, "bleu", [1.0], num_beams=3, length_penalty=0.6)
    loaded = load_model_dir(run.latest())
    assert loaded.generation == GenerationConfig(num_beams=3, length_penalty=0.6)
    info = json.loads((run.latest() / "training_state.json").read_text())
    assert info["progress"]["step"] == 1 and info["metrics"]["bleu"] == 1.0


@pytest.mark.parametrize(
    ("metric", "scores", "best"),
    [("loss", [2.0, 1.0, 3.0], "step-00000002"), ("bleu", [2.0, 1.0, 3.0], "step-00000003")],
)
def test_the_best_checkpoint_by_the_metrics_direction_is_kept(tmp_path, metric, scores, best):
    saved_run(tmp_path, metric, scores)
    assert (tmp_path / "best").resolve().name == best
    kept = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert kept == sorted({best, "step-00000003"})  # the best 1, and the latest


def test_a_dangling_latest_is_never_read_as_a_fresh_start(tmp_path):
    """Even beside a temporary link a cut-off `_point` left (which once hid the check)."""
    run = Run(tmp_path, Config(), Distributed())
    (tmp_path / "checkpoints").mkdir()
    os.symlink("checkpoints/step-00000008", tmp_path / "latest")
    os.symlink("checkpoints/step-00000004", tmp_path / ".latest.tmp-99")
    with pytest.raises(CheckpointError, match="does not exist"):
        run.resume_point(echo=print)
    assert not os.path.lexists(tmp_path / ".latest.tmp-99")


def test_rewind_drops_the_records_a_resumed_run_logs_again(tmp_path):
    run = Run(tmp_path, Config(), Distributed())
    for step in (1, 2, 3, 4):
        run.log({"step": step, "train_loss": 1.0})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "train_lo')  # cut off by a kill
    run.rewind_metrics(2)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
