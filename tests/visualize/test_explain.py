"""explain prints the model's own numbers: its weights equal the model's and the trace's."""

import pytest
import torch
from click.testing import CliRunner

from heedful.checkpoint.model_dir import save_model_dir
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
    torch.testing.assert_close(result.weights, expected.double(), atol=1e-4, rtol=0)
    text = result.text()
    for heading in (
        "The layer's input x",
        "Scores q·k_j",
        "Scaled by √d_k",
        "Softmax",
        "Weighted sum of V",
    ):
        assert heading in text


@pytest.mark.parametrize("name", ["rnn-bahdanau", "rnn-luong-general"])
def test_rnn_explain_matches_the_trace(name):
    tr = translator(name)
    trace = build_trace(tr, SENTENCE)
    result = explain(tr, SENTENCE, position=2)
    expected = torch.tensor(trace.hypotheses[0].cross_attention[1][0][0])
    torch.testing.assert_close(result.weights, expected.double(), atol=1e-4, rtol=0)
    scores = torch.tensor(trace.hypotheses[0].rnn["scores"][1]).double()
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
    with pytest.raises(ValueError, match=r"no encoder self-attention.*\(--kind cross\)"):
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


def _section(text: str, title: str) -> list[str]:
    """The lines of the section whose title starts with `title`."""
    part = text.split(f"## {title}", 1)[1]
    return part.split("\n## ", 1)[0].splitlines()[1:]


def _decoder_inputs(tr) -> tuple[list[str], list[str]]:
    """What the decoder read at each step (<s> y_1 ..) and what it produced."""
    out = build_trace(tr, SENTENCE).hypotheses[0].tokens
    return ["<s>", *out[:-1]], out


@pytest.mark.parametrize("kind", ["cross", "decoder"])
def test_one_position_has_one_index_and_one_token(kind):
    """The heading's query and the input row x[t] name the same position the same way."""
    import re

    tr = translator("transformer")
    inputs, outputs = _decoder_inputs(tr)
    text = explain(tr, SENTENCE, layer=1, head=1, position=3, kind=kind).text()
    assert f"decoder position 3, which reads {inputs[2]!r} and predicts {outputs[2]!r}" in text
    assert f"x[3] {inputs[2]!r} = " in text
    named = {}  # every "[j] 'token'" of a decoder position: one token per index
    letters = "xh" if kind == "cross" else "xhkv"  # cross-attention's keys are the source's
    for index, token in re.findall(rf"\b[{letters}]\[(\d+)\] ('[^']*')", text):
        assert named.setdefault(index, token) == token
    if kind == "decoder":  # keys are the decoder's own positions, labelled by what they read
        assert all(f"k[{j + 1}] {t!r}" in text for j, t in enumerate(inputs))


def test_masked_keys_are_shown_as_masked():
    tr = translator("transformer")
    inputs, _ = _decoder_inputs(tr)
    assert len(inputs) >= 4
    result = explain(tr, SENTENCE, layer=2, head=1, position=2, kind="decoder")
    text = result.text()
    assert "causal mask" in text
    for j in range(3, len(inputs) + 1):  # the future keys of query 2
        label = f"k[{j}] {inputs[j - 1]!r}"
        [score] = [line for line in _section(text, "3. Scores") if label in line]
        [scaled] = [line for line in _section(text, "4. Scaled") if label in line]
        [weight] = [line for line in _section(text, "5. Softmax") if label in line]
        assert "masked" in score and not any(ch.isdigit() for ch in score.split(label)[1])
        assert "−∞" in scaled and "masked" in scaled
        assert "masked" in weight
        assert result.weights[j - 1] == 0


def test_keys_left_out_are_counted():
    tr = translator("transformer")
    sentence = "abc defg hij abcd"  # 17 keys, more than the 8 listed
    text = explain(tr, sentence, kind="cross").text()
    assert "… 9 more keys not shown (17 in all)" in _section(text, "2. Queries")[-1]
    assert len(_section(text, "3. Scores")) == 17  # the scores list every key


def _float64_head(mha, q_in, kv_in, head, mask=None):
    """softmax(q kᵀ/√d_k) V of one head, in float64 from the layer's own weights and inputs."""
    w = {n: getattr(mha, n) for n in ("w_q", "w_k", "w_v")}
    cols = slice(head * mha.d_head, (head + 1) * mha.d_head)

    def project(name, x):
        bias = 0 if w[name].bias is None else w[name].bias.double()[cols]
        return x.double() @ w[name].weight.double()[cols].T + bias

    q, k, v = project("w_q", q_in), project("w_k", kv_in), project("w_v", kv_in)
    scores = q @ k.T / mha.d_head**0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ v  # (positions, d_k)


@pytest.mark.parametrize("kind, layer", [("encoder", 1), ("decoder", 2), ("cross", 3)])
def test_weighted_values_sum_to_the_models_head_output(kind, layer):
    """weight_j × v_j are listed and sum to the head's output, which equals a float64
    recomputation and the attention output the model itself fed to W_O."""
    tr = translator("transformer")
    block = (tr.model.encoder if kind == "encoder" else tr.model.decoder).layers[layer - 1]
    mha = block.cross_attn if kind == "cross" else block.self_attn
    seen = {}
    hooks = [
        getattr(mha, n).register_forward_hook(
            lambda _m, args, _out, n=n: seen.__setitem__(n, args[0][0])
        )
        for n in ("w_q", "w_k", "w_o")
    ]
    try:
        result = explain(tr, SENTENCE, layer=layer, head=2, position=3, kind=kind)
    finally:
        for hook in hooks:
            hook.remove()
    n = seen["w_k"].size(0)
    mask = torch.ones(n, n, dtype=torch.bool).tril() if kind == "decoder" else None
    expected = _float64_head(mha, seen["w_q"], seen["w_k"], head=1, mask=mask)[2]
    model_output = seen["w_o"][2, mha.d_head :].double()  # head 2's slice of the concat
    torch.testing.assert_close(result.context, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(result.context, model_output, atol=1e-5, rtol=0)
    torch.testing.assert_close(result.model_context, model_output)
    text = result.text()
    assert "v = [" in text and "× [" in _section(text, "6. Weighted sum")[1]
    assert "Σ_j weight_j · v_j" in text and "the model's head output" in text


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_a_later_layer_reads_the_previous_layers_output(kind):
    """Layer 2's x is layer 1's output (captured from the model), not the embeddings."""
    tr = translator("transformer")
    layers = (tr.model.encoder if kind == "encoder" else tr.model.decoder).layers
    outputs = {}  # the last call is replay's, over every position

    def keep(_module, _args, out):
        outputs[1] = out[0][0]

    hook = layers[0].register_forward_hook(keep)
    try:
        text = explain(tr, SENTENCE, layer=2, head=1, position=2, kind=kind).text()
    finally:
        hook.remove()
    section = _section(text, "1. The layer's input x")
    assert f"the output of {kind} layer 1" in text.split("\n## 2.")[0]
    x_row = outputs[1][1, :6].tolist()
    assert ", ".join(f"{v:+.4f}" for v in x_row) in section[1]
    first = explain(tr, SENTENCE, layer=1, head=1, position=2, kind=kind).text()
    assert "embeddings + positional encoding" in first


def test_an_rnn_refuses_a_head_or_layer_before_translating(monkeypatch):
    tr = translator("rnn-bahdanau")

    def no_search(*args, **kwargs):
        raise AssertionError("translated before refusing")

    monkeypatch.setattr(tr, "search", no_search)
    with pytest.raises(ValueError, match="head 3: an RNN has one attention distribution"):
        explain(tr, SENTENCE, head=3)
    with pytest.raises(ValueError, match="layer 2: an RNN has one attention distribution"):
        explain(tr, SENTENCE, layer=2)
    with pytest.raises(ValueError, match=r"no decoder self-attention.*--kind cross"):
        explain(tr, SENTENCE, kind="decoder")


def test_unknown_source_characters_are_labelled_unk():
    tr = translator("transformer")
    result = explain(tr, "abc 猫d", kind="cross")
    assert "<unk> (猫)" in result.keys
    assert "k[5] '<unk> (猫)'" in result.text()
