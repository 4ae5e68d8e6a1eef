"""Attention traces: the numbers are the model's, rows are distributions, JSON round-trips."""

import json
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

from heedful.checkpoint.model_dir import GenerationConfig
from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig
from heedful.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID, CharTokenizer
from heedful.inference.translator import Translator
from heedful.layers.scores import SCORES
from heedful.models.build import build_model
from heedful.search.beam import beam_search
from heedful.search.decoding import greedy_search
from heedful.visualize.trace import Trace, build_trace, estimated_json_bytes
from heedful.visualize.trace_check import check_trace

TOKENIZER = CharTokenizer("abcdefghij -")
SENTENCE = "abc defg"
MODELS = {
    "transformer": ModelConfig(
        d_model=16,
        num_heads=2,
        d_ff=32,
        dropout=0.0,
        encoder=TextEncoderConfig(layers=2),
        decoder=DecoderConfig(layers=3),
    ),
    "rnn-bahdanau": ModelConfig(arch="rnn", d_model=8, hidden_size=16, dropout=0.0),
    "rnn-luong-general": ModelConfig(
        arch="rnn",
        d_model=8,
        hidden_size=16,
        dropout=0.0,
        decoder=DecoderConfig(attention="luong-general"),
    ),
    "rnn-lstm-feeding": ModelConfig(
        arch="rnn",
        rnn_cell="lstm",
        d_model=8,
        hidden_size=16,
        dropout=0.0,
        decoder=DecoderConfig(attention="luong-dot", input_feeding=True),
    ),
    "rnn-none": ModelConfig(
        arch="rnn", d_model=8, hidden_size=16, dropout=0.0, decoder=DecoderConfig(attention="none")
    ),
    "rnn-copy": ModelConfig(
        arch="rnn", d_model=8, hidden_size=16, dropout=0.0, decoder=DecoderConfig(copy=True)
    ),
}
WITH_ATTENTION = [name for name in MODELS if name != "rnn-none"]


def translator(name: str) -> Translator:
    torch.manual_seed(0)
    model = build_model(MODELS[name], len(TOKENIZER), len(TOKENIZER))
    generator = model.decoder.generator
    with torch.no_grad():  # outputs of letters, some ending in </s> and some cut at the limit
        generator.bias[[PAD_ID, BOS_ID, UNK_ID]] -= 10.0
    generation = GenerationConfig(num_beams=1, max_len_ratio=0, max_len_offset=6)
    return Translator(model, TOKENIZER, TOKENIZER, generation)


def src_ids() -> torch.Tensor:
    return torch.tensor([TOKENIZER.encode(SENTENCE)])  # (1, S)


@torch.no_grad()
def stepwise_cross(model, hyp) -> np.ndarray | None:
    """(T, L, H, S): the cross-attention of each step as the search computed it, one
    decode_step at a time over the hypothesis's own output (None without attention)."""
    memory = model.encode(src_ids())
    state, last, rows = model.init_state(memory), torch.tensor([BOS_ID]), []
    for token in hyp.produced(EOS_ID):
        _, state, weights = model.decode_step(memory, state, last, need_weights=True)
        if weights is None:
            return None
        rows.append(weights.cross[0].numpy())  # (L, H, S)
        last = torch.tensor([token])
    return np.stack(rows)


def assert_distributions(rows, what: str) -> None:
    rows = np.asarray(rows)
    assert (rows >= 0).all(), what
    np.testing.assert_allclose(rows.sum(-1), 1.0, atol=1e-4, err_msg=what)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("beams", [1, 3])
def test_every_row_is_a_distribution_and_shapes_follow_the_schema(name, beams):
    trace = build_trace(translator(name), SENTENCE, num_beams=beams, n_best=min(beams, 2))
    config = MODELS[name]
    transformer = config.arch == "transformer"
    decoder = config.decoder
    layers, heads = (decoder.layers, config.num_heads) if transformer else (1, 1)
    scored = not transformer and decoder.attention != "none"
    assert trace.model == {
        "arch": config.arch,
        "attention": "multi-head" if transformer else decoder.attention,
        "encoder_layers": config.encoder.layers if transformer else 1,
        "decoder_layers": layers,
        "heads": heads,
        **({"copy": True} if decoder.copy else {}),  # the pointer-generator's only
        # an RNN score's formula and form, for the viewer's calculation (scores.py)
        **({"score": SCORES[decoder.attention].describe(config.hidden_size)} if scored else {}),
    }
    assert trace.source == SENTENCE and trace.source_tokens == list(SENTENCE)
    assert len(trace.hypotheses) == min(beams, 2)
    s = len(SENTENCE)
    if transformer:
        enc = np.asarray(trace.encoder_self_attention)
        assert enc.shape == (config.encoder.layers, heads, s, s)
        assert_distributions(enc, "encoder self-attention")
    else:
        assert trace.encoder_self_attention is None
    for hyp in trace.hypotheses:
        t = len(hyp.tokens)
        assert hyp.finished == (hyp.tokens[-1] == "</s>")
        assert len(hyp.top_k) == t and all(len(row) == 5 for row in hyp.top_k)
        for row in hyp.top_k:  # best first, probabilities of distinct tokens
            probs = [c["prob"] for c in row]
            assert probs == sorted(probs, reverse=True) and sum(probs) <= 1 + 1e-4
            assert len({c["token"] for c in row}) == 5
        if name == "rnn-none":
            assert hyp.cross_attention is None
            continue
        cross = np.asarray(hyp.cross_attention)
        assert cross.shape == (t, layers, heads, s)
        assert_distributions(cross, "cross attention")
        if transformer:
            dec = np.asarray(hyp.decoder_self_attention)
            assert dec.shape == (layers, heads, t, t)
            assert_distributions(dec, "decoder self-attention")
            assert (dec[..., np.triu(np.ones((t, t), dtype=bool), k=1)] == 0).all()  # causal
        else:
            assert hyp.decoder_self_attention is None


@pytest.mark.parametrize("name", MODELS)
def test_greedy_trace_is_what_greedy_search_did(name):
    """Teacher forcing on the produced output (Translator.replay) gives back the numbers of a
    step-by-step decode: the search's own."""
    t = translator(name)
    trace = build_trace(t, SENTENCE)
    [hyp] = greedy_search(t.model, src_ids(), BOS_ID, EOS_ID, 0, 6)
    [traced] = trace.hypotheses
    assert traced.tokens[: len(hyp.tokens)] == [TOKENIZER.id_to_token(i) for i in hyp.tokens]
    assert traced.finished == hyp.finished and traced.text == TOKENIZER.decode(hyp.tokens)
    assert traced.score == pytest.approx(hyp.score, abs=1e-4)
    # Greedy picks each step's top candidate, and their log-probabilities add up to the score.
    assert [row[0]["token"] for row in traced.top_k] == traced.tokens
    assert sum(np.log([row[0]["prob"] for row in traced.top_k])) == pytest.approx(
        hyp.score, abs=1e-3
    )
    expected = stepwise_cross(t.model, hyp)
    if expected is None:
        assert traced.cross_attention is None
    else:
        np.testing.assert_allclose(traced.cross_attention, expected, atol=1e-4)


@pytest.mark.parametrize("name", ["transformer", "rnn-bahdanau"])
def test_beam_trace_gives_each_hypothesis_its_own_attention(name):
    t = translator(name)
    trace = build_trace(t, SENTENCE, num_beams=3, n_best=3, length_penalty=0.0)
    assert trace.search == {"num_beams": 3, "length_penalty": 0.0}
    [hyps] = beam_search(t.model, src_ids(), BOS_ID, EOS_ID, 3, 3, 0.0, 0, 6)
    assert len(trace.hypotheses) == len(hyps) == 3
    assert len({tuple(h.tokens) for h in trace.hypotheses}) == 3  # different outputs
    for traced, hyp in zip(trace.hypotheses, hyps):
        assert traced.text == TOKENIZER.decode(hyp.tokens)
        assert traced.score == pytest.approx(hyp.score, abs=1e-4)
        np.testing.assert_allclose(traced.cross_attention, stepwise_cross(t.model, hyp), atol=1e-4)


@pytest.mark.parametrize("name", ["rnn-bahdanau", "rnn-luong-general", "rnn-lstm-feeding"])
def test_rnn_internals_make_the_attention(name):
    """a_t = softmax(score(h_t, h̄_s)) and c_t = Σ_s a_t(s) h̄_s, with the model's h̄_s."""
    t = translator(name)
    [hyp] = build_trace(t, SENTENCE).hypotheses
    with torch.no_grad():
        states = t.model.encode(src_ids()).states[0].double()  # (S, N)
    cross = torch.tensor(hyp.cross_attention, dtype=torch.float64)[:, 0, 0]  # (T, S)
    scores = torch.tensor(hyp.rnn["scores"], dtype=torch.float64)  # (T, S)
    contexts = torch.tensor(hyp.rnn["contexts"], dtype=torch.float64)  # (T, N)
    decoder_states = torch.tensor(hyp.rnn["decoder_states"])  # (T, N)
    assert decoder_states.shape == (len(hyp.tokens), 16) and contexts.shape == (len(hyp.tokens), 16)
    torch.testing.assert_close(scores.softmax(-1), cross, atol=1e-4, rtol=0)
    torch.testing.assert_close(cross @ states, contexts, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["rnn-bahdanau", "rnn-lstm-feeding", "rnn-none"])
def test_rnn_internals_hold_the_embedding_rows_each_rnn_read(name):
    """decoder_inputs[t] is the decoder's embedding row of hyp.decoder_input(BOS, EOS)[t];
    encoder_inputs the encoder's rows of the source; decoder_reads says whether h̃_{t-1} too."""
    t = translator(name)
    trace = build_trace(t, SENTENCE, num_beams=3, n_best=3, length_penalty=0.0)
    [hyps] = beam_search(t.model, src_ids(), BOS_ID, EOS_ID, 3, 3, 0.0, 0, 6)
    decoder_rows = t.model.decoder.embedding.weight.detach().double()  # (V, E)
    for traced, hyp in zip(trace.hypotheses, hyps):
        expected = decoder_rows[hyp.decoder_input(BOS_ID, EOS_ID)]  # (T, E)
        recorded = torch.tensor(traced.internals["decoder_inputs"], dtype=torch.float64)
        assert recorded.shape == (len(traced.tokens), 8)
        torch.testing.assert_close(recorded, expected, atol=1e-5, rtol=0)
    source_rows = t.model.encoder.embedding.weight.detach().double()[src_ids()[0]]  # (S, E)
    encoder = torch.tensor(trace.internals["encoder_inputs"], dtype=torch.float64)
    torch.testing.assert_close(encoder, source_rows, atol=1e-5, rtol=0)
    feeding = "embedding, attentional" if name == "rnn-lstm-feeding" else "embedding"
    assert trace.internals["decoder_reads"] == feeding
    check_trace(trace.to_dict())  # the new keys are internals leaves trace_check accepts


def test_rnn_forward_returns_its_internals_and_rnn_none_its_states():
    t = translator("rnn-bahdanau")
    tgt_in = torch.tensor([[BOS_ID, 5, 6, 7]])
    with torch.no_grad():
        maps = t.model(src_ids(), tgt_in, need_weights=True).attention
        memory = t.model.encode(src_ids())
    assert maps.scores.shape == maps.cross.shape == (1, 1, 1, 4, len(SENTENCE))
    torch.testing.assert_close(maps.scores.softmax(-1), maps.cross)
    torch.testing.assert_close(maps.cross[:, 0, 0] @ memory.states, maps.contexts)
    assert maps.decoder_states.shape == (1, 4, 16)

    [hyp] = build_trace(translator("rnn-none"), SENTENCE).hypotheses
    assert hyp.cross_attention is None and hyp.decoder_self_attention is None
    assert hyp.rnn["contexts"] is None and hyp.rnn["scores"] is None
    assert np.asarray(hyp.rnn["decoder_states"]).shape == (len(hyp.tokens), 16)


def test_transformer_trace_has_no_rnn_part_and_numbers_are_rounded():
    trace = build_trace(translator("transformer"), SENTENCE, top_k=3)
    hyp = trace.hypotheses[0]
    assert hyp.rnn is None and len(hyp.top_k[0]) == 3
    flat = np.asarray(hyp.cross_attention).ravel()
    np.testing.assert_array_equal(flat, flat.round(5))


def test_json_round_trip(tmp_path):
    trace = build_trace(translator("transformer"), SENTENCE, num_beams=2, n_best=2)
    path = trace.save(tmp_path / "traces" / "t.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == "heedful-trace" and data["version"] == 1
    assert list(data) == [
        "format",
        "version",
        "model",
        "source",
        "source_tokens",
        "search",
        "encoder_self_attention",
        "hypotheses",
        "internals",
    ]
    assert Trace.load(path) == trace
    assert Trace.from_dict(trace.to_dict()) == trace
    rnn = build_trace(translator("rnn-none"), SENTENCE)
    assert Trace.load(rnn.save(tmp_path / "rnn.json")) == rnn


def test_schema_mismatch_is_a_clear_error(tmp_path):
    good = build_trace(translator("rnn-bahdanau"), SENTENCE).to_dict()
    cases = {
        "format is 'other', expected 'heedful-trace'": {**good, "format": "other"},
        "unsupported trace version 2": {**good, "version": 2},
        "trace lacks source_tokens": {k: v for k, v in good.items() if k != "source_tokens"},
        "trace has unknown keys extra": {**good, "extra": 1},
        r"hypotheses\[0\] lacks top_k": {
            **good,
            "hypotheses": [{k: v for k, v in good["hypotheses"][0].items() if k != "top_k"}],
        },
    }
    for message, data in cases.items():
        with pytest.raises(ValueError, match=message):
            Trace.from_dict(data)
    with pytest.raises(ValueError, match="not a heedful trace"):
        Trace.from_dict([1, 2])
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "heedful-trace", ', encoding="utf-8")
    with pytest.raises(ValueError, match="broken.json"):
        Trace.load(broken)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**good, "version": 0}), encoding="utf-8")
    with pytest.raises(ValueError, match="old.json: unsupported trace version 0"):
        Trace.load(old)


def test_traces_without_internals_still_load():
    """Traces written before "internals" (an optional key) load, with internals None."""
    good = build_trace(translator("transformer"), SENTENCE).to_dict()
    old = {k: v for k, v in good.items() if k != "internals"}
    old["hypotheses"] = [
        {k: v for k, v in h.items() if k != "internals"} for h in good["hypotheses"]
    ]
    trace = Trace.from_dict(old)
    assert trace.internals is None and trace.hypotheses[0].internals is None
    assert trace.hypotheses[0].top_k == good["hypotheses"][0]["top_k"]


@pytest.mark.parametrize("name", MODELS)
def test_internals_are_the_models_numbers_and_bounded(name):
    """Q·K/√d_k (Transformer) or the RNN's score parts give the trace's own weights back;
    over the limit, or when refused, a trace holds none; the server's estimate still bounds it."""
    from heedful.visualize import internals as internals_module

    tr = translator(name)
    trace = build_trace(tr, SENTENCE, num_beams=2, n_best=2)
    hyp = trace.hypotheses[0]
    if name == "transformer":
        q = np.array(hyp.internals["cross"]["q"])  # (L, H, T, d_k)
        k = np.array(trace.internals["cross"]["k"])  # (L, H, S, d_k)
        scores = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)  # (L, H, T, S)
        np.testing.assert_allclose(weights.transpose(2, 0, 1, 3), hyp.cross_attention, atol=2e-4)
    else:
        states = np.array(trace.internals["encoder_states"])
        assert states.shape == (len(SENTENCE), 16) and len(hyp.internals["attentional"]) == len(
            hyp.tokens
        )
        if hyp.cross_attention is not None:
            contexts = np.array(hyp.cross_attention)[:, 0, 0] @ states
            np.testing.assert_allclose(contexts, hyp.rnn["contexts"], atol=2e-4)
    size = len(json.dumps(trace.to_dict(), separators=(",", ":")))
    longest = max(len(h.tokens) for h in trace.hypotheses)
    assert size <= estimated_json_bytes(tr.config, len(SENTENCE), longest, 2)
    assert build_trace(tr, SENTENCE, internals=False).internals is None
    limit = internals_module.INTERNALS_MAX_NUMBERS
    try:
        internals_module.INTERNALS_MAX_NUMBERS = 10
        import heedful.visualize.trace as trace_module

        trace_module.INTERNALS_MAX_NUMBERS = 10
        assert build_trace(tr, SENTENCE).internals is None
        assert build_trace(tr, SENTENCE, internals=True).internals is not None
    finally:
        internals_module.INTERNALS_MAX_NUMBERS = limit
        trace_module.INTERNALS_MAX_NUMBERS = limit


def test_top_k_lists_only_what_the_search_can_choose():
    """<s> and <pad> are never candidates (no training target is either) unless the search
    chose one; <unk> stays, as the search can pick it."""
    tr = translator("transformer")
    with torch.no_grad():  # make <s>, <pad> and <unk> the most probable tokens everywhere
        tr.model.decoder.generator.bias[[PAD_ID, BOS_ID, UNK_ID]] += 30.0
    trace = build_trace(tr, SENTENCE, top_k=4)
    hyp = trace.hypotheses[0]
    for step, chosen in zip(hyp.top_k, hyp.tokens):
        names = [c["token"] for c in step]
        assert len(names) == 4 and "<unk>" in names
        assert not {"<s>", "<pad>"} & set(names) - {chosen}


def test_empty_sentence_is_an_error():
    for sentence in ("", "   "):
        with pytest.raises(ValueError, match="empty sentence"):
            build_trace(translator("transformer"), sentence)


def test_repr_html_uses_the_viewer(monkeypatch):
    trace = build_trace(translator("rnn-bahdanau"), SENTENCE)
    fake = types.ModuleType("heedful.visualize.html")
    fake.render_fragment = lambda t: f"<p>{t.source}</p>"
    monkeypatch.setitem(sys.modules, "heedful.visualize.html", fake)
    assert trace._repr_html_() == f"<p>{SENTENCE}</p>"


def test_reading_a_trace_imports_neither_matplotlib_nor_torch():
    """The server's page, the CLI's --kind choices and a notebook that loads a trace stay light:
    torch is imported only when a trace is built."""
    code = (
        "import heedful.visualize.trace, heedful.visualize.html, sys; "
        "assert 'matplotlib' not in sys.modules and 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
