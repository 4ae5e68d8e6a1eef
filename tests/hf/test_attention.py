"""The attention heedful reports for a Hugging Face model is the model's own, and explain
recomputes one head of it from the model's projections.

In float64 the adapter's replay, Translation.attention and the trace must equal what a plain
forward pass with output_attentions=True returns, map for map, in our layout (B, L, H, ., .).
"""

from __future__ import annotations

import copy

import pytest
import torch

from heedful.data.tokenizers import EOS_ID
from heedful.visualize.explain import explain
from heedful.visualize.trace import DECIMALS, build_trace

from .builders import TEXTS
from .conftest import ARCHS


@pytest.fixture(scope="module")
def in_float64(translators):
    """Each translator with its model in float64 (a copy: the others stay float32)."""
    out = {}
    for name, translator in translators.items():
        twin = copy.copy(translator)
        twin.model = copy.deepcopy(translator.model).double()
        out[name] = twin
    return out


def reference(translator, src, tgt_in):
    """output_attentions=True from the model itself, on its own ids."""
    adapter = translator.model
    out = adapter.hf(
        input_ids=adapter.ids.to_model(src),
        attention_mask=torch.ones_like(src),
        decoder_input_ids=adapter.ids.to_model(tgt_in),
        output_attentions=True,
    )
    return {
        "cross": torch.stack(out.cross_attentions, 1),
        "encoder": torch.stack(out.encoder_attentions, 1),
        "decoder": torch.stack(out.decoder_attentions, 1),
    }


@pytest.mark.parametrize("arch", ARCHS)
def test_replay_reports_the_models_attention(in_float64, arch):
    translator = in_float64[arch]
    src = torch.tensor([translator.src_tokenizer.encode(TEXTS[1])])
    [[hyp]] = translator.search(src, 1, 1, max_len_ratio=0.0, max_len_offset=8)
    tgt_in = torch.tensor([hyp.decoder_input(1, EOS_ID)])
    maps = translator.replay(src, hyp).attention
    expected = reference(translator, src, tgt_in)
    for kind in ("cross", "encoder", "decoder"):
        got = getattr(maps, kind)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, expected[kind], rtol=0, atol=1e-12)
        torch.testing.assert_close(got.sum(-1), torch.ones_like(got.sum(-1)))
    future = torch.ones(tgt_in.size(1), tgt_in.size(1), dtype=torch.bool).triu(1)
    assert (maps.decoder[..., future] == 0).all()  # causal


@pytest.mark.parametrize("arch", ARCHS)
def test_translation_and_trace_carry_the_same_weights(translators, arch):
    translator = translators[arch]
    [out] = translator.translate([TEXTS[2]], num_beams=1, need_weights=True)
    trace = build_trace(translator, TEXTS[2], num_beams=1)
    first = trace.hypotheses[0]
    assert first.tokens == out.tokens and trace.source_tokens == out.source_tokens
    cross = torch.tensor(first.cross_attention, dtype=torch.float64)  # (T, L, H, S)
    torch.testing.assert_close(cross, out.attention.double(), rtol=0, atol=10**-DECIMALS)
    assert trace.internals is None  # the calculation panels are for heedful's own models


@pytest.mark.parametrize("kind", ["cross", "encoder", "decoder"])
@pytest.mark.parametrize("arch", ARCHS)
def test_explain_recomputes_a_head_of_every_kind(translators, arch, kind):
    translator = translators[arch]
    for layer, head, position in ((1, 1, 1), (2, 4, 2)):
        e = explain(translator, TEXTS[0], layer=layer, head=head, position=position, kind=kind)
        maps = translator.replay(*_replayed(translator, TEXTS[0])).attention
        reported = getattr(maps, kind)[0, layer - 1, head - 1, position - 1]
        torch.testing.assert_close(e.weights.float(), reported, rtol=0, atol=1e-5)
        torch.testing.assert_close(e.context, e.model_context, rtol=0, atol=1e-4)
        assert arch in e.heading and "## 6." in e.text()


def _replayed(translator, text):
    src = torch.tensor([translator.src_tokenizer.encode(text)])
    [[hyp]] = translator.search(src, num_beams=1, n_best=1)
    return src, hyp


def test_t5_explain_shows_the_position_bias_and_no_scaling(translators):
    text = explain(translators["t5"], TEXTS[0], layer=2, kind="encoder", position=3).text()
    assert "position bias" in text and "not scaled" in text
    text = explain(translators["marian"], TEXTS[0], kind="cross").text()
    assert "d_k^-0.5" in text and "post-norm" in text


def test_explain_names_what_is_out_of_range(translators):
    with pytest.raises(ValueError, match="layer 3 out of range: the model has 2 decoder layers"):
        explain(translators["bart"], TEXTS[0], layer=3)
    with pytest.raises(ValueError, match="head 5 out of range"):
        explain(translators["bart"], TEXTS[0], head=5)
