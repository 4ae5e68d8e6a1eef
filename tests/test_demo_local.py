"""The dates demo with Luong's local attention (issue 15): `heedful demo --model
rnn-luong-local-p` trains, scores and draws like the other models."""

import pytest
from click.testing import CliRunner

from heedful.cli import main
from heedful.demo.run import DEMO_MODELS, run_demo


@pytest.mark.parametrize("model_name", ["rnn-luong-local-m", "rnn-luong-local-p"])
def test_the_demo_runs_with_local_attention(tmp_path, model_name):
    config = DEMO_MODELS[model_name]
    assert (
        config.decoder.attention == model_name.removeprefix("rnn-")
        and config.decoder.local_window == 5
    )
    result = run_demo(
        model_name, tmp_path, train_size=300, test_size=20, max_steps=5, max_time=1e9,
        progress=False, echo=lambda _: None,
    )  # fmt: skip
    assert result.steps == 5 and 0.0 <= result.exact_match <= 1.0
    assert result.heatmap.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_cli_offers_the_local_models():
    result = CliRunner().invoke(main, ["demo", "--help"])
    assert "rnn-luong-local-m" in result.output and "rnn-luong-local-p" in result.output
