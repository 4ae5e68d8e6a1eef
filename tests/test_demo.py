"""The demo end to end on a tiny budget, and the CLI around it."""

import pytest
from click.testing import CliRunner

from heedful.cli import main
from heedful.demo import run_demo


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
