"""The RNN attention scores are declared once (src/heedful/layers/scores.py): every name config
accepts has its entry, nothing else names them, and each entry's form, recomputed in float64 from
the parts its module gives, is the module's own score."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from heedful.config import DecoderConfig, ModelConfig
from heedful.demo.run import DEMO_MODELS
from heedful.layers.scores import FORMS, RNN_ATTENTIONS, SCORES
from heedful.models.build import build_model
from heedful.visualize.trace_check import ATTENTIONS

SRC = Path(__file__).resolve().parents[1] / "src" / "heedful"
N, S, T, WINDOW = 6, 7, 5, 2


def test_every_attention_config_accepts_is_declared_once():
    assert RNN_ATTENTIONS == ("none", *SCORES)
    assert ATTENTIONS == ("multi-head", *RNN_ATTENTIONS)  # what a trace may name
    assert {f"rnn-{name}" for name in SCORES} <= DEMO_MODELS.keys()
    for name, score in SCORES.items():
        assert score.name == name and score.form in FORMS
        assert (
            ModelConfig(arch="rnn", decoder=DecoderConfig(attention=name)).decoder.attention == name
        )


def test_no_other_module_or_script_lists_or_tests_a_score():
    """A new score is one entry, not a name added to lists in six files and two languages: a
    score's name appears elsewhere only as a value chosen (`attention="bahdanau"`, a default),
    never compared with, a key, or one of a list."""
    quoted = "|".join(rf"""["']{re.escape(name)}["']""" for name in SCORES)
    chosen = re.compile(rf"(?<![=!<>])=\s*({quoted})")
    named = [
        f"{path.relative_to(SRC)}: {match.group()}"
        for path in sorted(SRC.rglob("*.py")) + sorted(SRC.rglob("*.js"))
        if path.name != "scores.py"
        for match in re.finditer(quoted, chosen.sub("", path.read_text(encoding="utf-8")))
    ]
    assert named == []
    for path in sorted((SRC / "visualize" / "assets").glob("*.js")):  # nor what one computes
        text = path.read_text(encoding="utf-8")
        assert "model.attention ===" not in text and "[model.attention]" not in text, path.name


def formed_score(score, parts, states, queries) -> torch.Tensor:
    """The declared form in float64 from the parts: q_t = h_t, k_s = h̄_s where none is given."""
    q = (queries if parts.queries is None else parts.queries).double()  # (T, A)
    k = (states if parts.keys is None else parts.keys).double()  # (S, A)
    if score.form == "additive":  # vᵀ tanh(q_t + k_s)
        return torch.tanh(q[:, None, :] + k[None, :, :]) @ parts.v.double()  # (T, S)
    return score.scale(N) * (q @ k.T)  # scale · q_t · k_s


@pytest.mark.parametrize("name", SCORES)
def test_each_declared_form_is_the_modules_score(name):
    torch.manual_seed(0)
    score = SCORES[name]
    module = score.build(N, WINDOW)
    states, queries = torch.randn(S, N), torch.randn(T, N)
    with torch.no_grad():
        module64 = module.double()
        parts = module64.score_parts(states.double(), queries.double())
        expected = module64.score(queries.double(), module64.prepare_keys(states.double()))
        formed = formed_score(score, parts, states.double(), queries.double())
    assert formed.dtype == torch.float64 and formed.shape == (T, S)
    torch.testing.assert_close(formed, expected, rtol=1e-12, atol=1e-12)
    assert (parts.v is None) == (score.form == "dot")
    described = score.describe(N)
    assert described["form"] == score.form and score.formula in described["formula"]
    assert described.get("scale", 1.0) == score.scale(N)


@pytest.mark.parametrize("name", SCORES)
def test_each_score_trains_a_step(name):
    torch.manual_seed(0)
    config = ModelConfig(
        arch="rnn",
        d_model=8,
        hidden_size=N,
        dropout=0.0,
        decoder=DecoderConfig(attention=name, local_window=WINDOW),
    )
    model = build_model(config, 11, 11)
    src, tgt = torch.randint(3, 11, (2, S)), torch.randint(3, 11, (2, T + 1))
    before = [p.detach().clone() for p in model.decoder.attention.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loss = torch.nn.functional.cross_entropy(
        model(src, tgt[:, :-1]).logits.flatten(0, 1), tgt[:, 1:].flatten()
    )
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    after = list(model.decoder.attention.parameters())
    assert all(not torch.equal(a, b) for a, b in zip(before, after))  # the score learned


def test_an_unknown_score_is_refused_by_name():
    from heedful.config import ConfigError, load_config
    from heedful.models.rnn import make_attention

    with pytest.raises(ConfigError, match="model.decoder.attention: 'luong-cubic'"):
        ModelConfig(arch="rnn", decoder=DecoderConfig(attention="luong-cubic"))
    with pytest.raises(ConfigError, match="model.attention: 'luong-cubic'"):  # as written
        load_config(None, ["model.arch=rnn", "model.attention=luong-cubic"])
    with pytest.raises(ValueError, match="unknown RNN attention 'luong-cubic'"):
        make_attention("luong-cubic", N)


def test_scaled_general_is_luong_general_over_the_root_of_n():
    """The score added after the table (issue 27, item 8): Luong's general score h_tᵀ W_a h̄_s
    divided by √N, the Transformer's scaling, with the same W_a; config, demo and the trace
    know it from its one entry."""
    torch.manual_seed(0)
    scaled, general = (
        SCORES[name].build(N, WINDOW) for name in ("scaled-general", "luong-general")
    )
    general.load_state_dict(scaled.state_dict())  # one W_a for both
    states, queries = torch.randn(S, N, dtype=torch.float64), torch.randn(T, N, dtype=torch.float64)
    with torch.no_grad():
        scaled, general = scaled.double(), general.double()
        expected = general.score(queries, general.prepare_keys(states)) / N**0.5
        actual = scaled.score(queries, scaled.prepare_keys(states))
    torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12)
    assert SCORES["scaled-general"].describe(N) == {
        "form": "dot",
        "formula": "score = h_tᵀ W_a h̄_s / √N  (Luong et al. 2015, §3.1, general; scaled as "
        "Vaswani et al. 2017, §3.2.1)",
        "scale": 1 / N**0.5,
    }
    config = ModelConfig(arch="rnn", decoder=DecoderConfig(attention="scaled-general"))
    assert config.used()["decoder"]["attention"] == "scaled-general"
    assert DEMO_MODELS["rnn-scaled-general"].decoder.attention == "scaled-general"
