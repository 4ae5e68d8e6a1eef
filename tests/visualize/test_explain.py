"""explain prints the model's own numbers: its weights equal the model's and the trace's."""

import pytest
import torch
from click.testing import CliRunner

from heedful.checkpoint import save_model_dir
from heedful.cli import main
from heedful.visualize.explain import explain
from heedful.visualize.trace import build_trace

from .test_trace import MODELS, SENTENCE, translator


@pytest.mark.parametrize("kind", ["cross", "encoder", "decoder"])
@pytest.mark.parametrize("layer, head, position", [(1, 1, 1), (2, 2, 3), (None, 2, 2)])
def test_transformer_explain_matches_model_and_trace(kind, layer, head, position):
    tr = translator("transformer")
    result = explain(tr, SENTENCE, layer=layer, head=head, position=position, kind=kind)
    trace = build_trace(tr, SENTENCE)
    li = (layer or trace.model["decoder_layers"]) - 1
    hyp = trace.hypotheses[0]
    if kind == "cross":
        expected = torch.tensor(hyp.cross_attention[position - 1][li][head - 1])
    elif kind == "encoder":
        li = (layer or trace.model["encoder_layers"]) - 1
        expected = torch.tensor(trace.encoder_self_attention[li][head - 1][position - 1])
    else:
        expected = torch.tensor(hyp.decoder_self_attention[li][head - 1][position - 1])
    torch.testing.assert_close(result.weights, expected.float(), atol=1e-4, rtol=0)
    text = result.text()
    for heading in (
        "Embeddings + positional encoding",
        "Scores q·kᵀ",
        "Scaled by √d_k",
        "Softmax",
        "Weighted sum of V",
    ):
        assert heading in text
    assert "<pre>" in result.html()


@pytest.mark.parametrize("name", ["rnn-bahdanau", "rnn-luong-general"])
def test_rnn_explain_matches_the_trace(name):
    tr = translator(name)
    trace = build_trace(tr, SENTENCE)
    result = explain(tr, SENTENCE, position=2)
    expected = torch.tensor(trace.hypotheses[0].cross_attention[1][0][0])
    torch.testing.assert_close(result.weights, expected.float(), atol=1e-4, rtol=0)
    scores = torch.tensor(trace.hypotheses[0].rnn["scores"][1]).float()
    torch.testing.assert_close(scores.softmax(-1), result.weights, atol=1e-3, rtol=0)
    text = result.text()
    for heading in (
        "Decoder state h_t",
        "Score of each encoder state",
        "Context c_t",
        "[h_t; c_t]",
        "top predicted words",
    ):
        assert heading in text


def test_explain_errors_are_clear():
    tr = translator("transformer")
    with pytest.raises(ValueError, match="empty sentence"):
        explain(tr, "   ")
    with pytest.raises(ValueError, match="layer 9 out of range"):
        explain(tr, SENTENCE, layer=9)
    with pytest.raises(ValueError, match="head 5 out of range"):
        explain(tr, SENTENCE, head=5)
    with pytest.raises(ValueError, match="position 99 out of range"):
        explain(tr, SENTENCE, position=99)
    with pytest.raises(ValueError, match="no encoder self-attention"):
        explain(translator("rnn-bahdanau"), SENTENCE, kind="encoder")
    with pytest.raises(ValueError, match="no attention"):
        explain(translator("rnn-none"), SENTENCE)


def test_cli_attention_explain_positional_curves(tmp_path):
    from heedful.config import ModelConfig

    tr = translator("transformer")
    config = ModelConfig(**{k: v for k, v in MODELS["transformer"].__dict__.items()})
    save_model_dir(tmp_path / "m", tr.model, config, tr.src_tokenizer, tr.tgt_tokenizer)
    runner = CliRunner()
    out = tmp_path / "a.png"
    result = runner.invoke(
        main,
        [
            "attention",
            str(tmp_path / "m"),
            SENTENCE,
            "--png",
            str(out),
            "--html",
            str(tmp_path / "v.html"),
            "--json",
            str(tmp_path / "t.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG" and (tmp_path / "v.html").stat().st_size > 1000
    result = runner.invoke(main, ["explain", str(tmp_path / "m"), SENTENCE, "--head", "2"])
    assert result.exit_code == 0 and "Softmax" in result.output
    result = runner.invoke(main, ["explain", str(tmp_path / "m"), SENTENCE, "--layer", "7"])
    assert result.exit_code != 0 and "layer 7 out of range" in result.output
    result = runner.invoke(
        main, ["attention", str(tmp_path / "nowhere"), SENTENCE, "--png", str(out)]
    )
    assert result.exit_code != 0 and "model directory not found" in result.output
    result = runner.invoke(
        main, ["positional", "--d-model", "32", "--length", "20", "--png", str(tmp_path / "pe.png")]
    )
    assert result.exit_code == 0 and (tmp_path / "pe.png").exists()
