"""The demo end to end on a tiny budget, and the CLI around it."""

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from heedful.cli import main
from heedful.demo.run import DEMO_TRAIN, run_demo, undertrained_warning

TINY = dict(train_size=300, test_size=50, progress=False)


@pytest.mark.parametrize("model_name", ["transformer", "rnn-bahdanau", "rnn-none"])
def test_demo_smoke(tmp_path, model_name):
    lines = []
    result = run_demo(
        model_name,
        tmp_path,
        train_size=300,
        test_size=50,
        max_steps=20,
        max_time=1e9,
        progress=False,
        echo=lines.append,
    )
    assert result.steps == 20
    assert 0.0 <= result.exact_match <= 1.0
    assert result.heatmap.exists() and result.heatmap.parent == tmp_path
    if model_name == "rnn-none":
        assert "no attention" in result.heatmap.read_text()
    else:
        assert result.heatmap.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (result.model_dir / "model.safetensors").exists()
    text = "\n".join(lines)
    assert "exact match on 50 held-out dates" in text and str(result.heatmap) in text


def test_demo_learns_something_in_seconds(tmp_path):
    """A few hundred steps of the RNN with attention already read many dates correctly."""
    result = run_demo(
        "rnn-bahdanau",
        tmp_path,
        train_size=3000,
        test_size=200,
        max_steps=150,
        max_time=1e9,  # a step budget, not the demo's time budget: a busy machine is only slower
        progress=False,
        echo=lambda _: None,
    )
    assert result.exact_match > 0.5


def test_cli_rejects_an_unknown_model():
    result = CliRunner().invoke(main, ["demo", "--model", "rnn-magic"])
    assert result.exit_code == 2
    assert "rnn-magic" in result.output and "rnn-bahdanau" in result.output


def test_run_demo_rejects_an_unknown_model(tmp_path):
    with pytest.raises(ValueError, match="unknown demo model 'gpt'"):
        run_demo("gpt", tmp_path)


def test_stopping_by_max_time_warns_and_labels_the_heatmap(tmp_path, monkeypatch):
    """A busy machine: the time budget ends training after a step, at ~0% exact match."""
    titles = []
    monkeypatch.setattr(
        "heedful.demo.run.plot_alignment", lambda *a: titles.append(a[-1]) or tmp_path / "a.png"
    )
    lines = []
    result = run_demo("transformer", tmp_path, max_time=1e-3, echo=lines.append, **TINY)
    assert result.stopped_by == "max_time" and result.undertrained
    [warning] = [line for line in lines if line.startswith("warning:")]
    assert "stopped by --max-time (0.001 s) before its target" in warning
    assert f"exact match is only {result.exact_match:.1%}" in warning
    assert "rerun with a larger --max-time, or on an idle machine" in warning
    assert lines.index(warning) < next(i for i, ln in enumerate(lines) if "heatmap:" in ln)
    [title] = titles  # the training status first (issue 28, item 5), then the sentence
    status = f"UNDERTRAINED: trained {result.steps} steps (stopped by max_time)\nexact match "
    assert title.startswith(status + f"{100 * result.exact_match:.1f}% on ")
    assert "\ntransformer: " in title


def test_the_warning_names_what_to_do():
    timed = replace(DEMO_TRAIN, max_time=150.0)  # a --max-time given: the demos have none
    assert undertrained_warning("validation", 1.0, DEMO_TRAIN) is None
    assert undertrained_warning("max_time", 1.0, timed) is None  # short, yet all right
    short = undertrained_warning("max_time", 0.984, timed)  # close, but short of its target
    assert short == (
        "warning: training stopped by --max-time (150 s) before its target (every development "
        "pair right); exact match 98.4%: rerun with a larger --max-time, or on an idle machine"
    )
    budget = undertrained_warning("max_steps", 0.95, DEMO_TRAIN)
    assert "stopped at its step budget (--max-steps 6000) before its target" in budget
    low = undertrained_warning("validation", 0.5, DEMO_TRAIN)  # good on dev, bad on held-out
    assert "exact match is only 50.0%" in low and "--train-size" in low


def test_the_training_log_is_drawn_by_heedful_curves(tmp_path):
    result = run_demo("rnn-bahdanau", tmp_path, max_steps=20, echo=lambda _: None, **TINY)
    records = [json.loads(line) for line in result.metrics.read_text().splitlines()]
    assert result.metrics == tmp_path / "metrics.jsonl"
    assert [r["step"] for r in records if "train_loss" in r] == [10, 20]
    [valid] = [r for r in records if r.get("event") == "validation"]
    assert valid["step"] == 20 and {"loss", "bleu", "exact_match"} <= set(valid)
    png = tmp_path / "curves.png"
    drawn = CliRunner().invoke(main, ["curves", str(tmp_path), "--png", str(png)])
    assert drawn.exit_code == 0, drawn.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rerun = run_demo("rnn-bahdanau", tmp_path, max_steps=10, echo=lambda _: None, **TINY)
    assert max(json.loads(ln)["step"] for ln in rerun.metrics.read_text().splitlines()) == 10


def test_the_dialogue_demo_shows_the_articles_example(tmp_path):
    out = tmp_path / "chat"
    args = ["demo", "--task", "dialogue", "--out", str(out)]  # the task's own model
    result = CliRunner().invoke(
        main, [*args, "--train-size", "300", "--max-steps", "10", "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    assert "dialogue task: 300 training pairs, 500 held-out" in result.output
    assert "exact match on 500 held-out questions" in result.output
    assert "'Hi, How are you?' -> " in result.output
    assert "model: rnn-bahdanau" in result.output
    assert (out / "attention-rnn-bahdanau.png").exists()
    assert (out / "model-rnn-bahdanau" / "model.safetensors").exists()


def test_an_unknown_task_is_an_error(tmp_path):
    with pytest.raises(
        ValueError, match="unknown demo task 'chess'; choose one of dates, dialogue"
    ):
        run_demo(task="chess", out_dir=tmp_path)
