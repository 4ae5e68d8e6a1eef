"""Hostile trace files: each is refused by Trace.load with an error naming the file and the
field, never drawn half-way by a viewer that trusts it (heedful.visualize.trace_check).

The valid bases are the committed golden traces (tests/golden/expected); each case damages one
thing. docs/hostile-inputs.md counts these CASES.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from heedful.visualize import trace_check
from heedful.visualize.trace import Trace

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "expected"
BASES = {
    "transformer": json.loads((GOLDEN / "trace-transformer-beam.json").read_text("utf-8")),
    "rnn": json.loads((GOLDEN / "trace-rnn-beam.json").read_text("utf-8")),
}


def text(raw: str):
    return lambda base: raw.encode("utf-8")


def raw(data: bytes):
    return lambda base: data


def edit(change, base_name: str = "transformer"):
    """A file of the base trace after `change(data)` (which edits the plain data in place)."""

    def make(bases):
        data = copy.deepcopy(bases[base_name])
        change(data)
        return json.dumps(data).encode("utf-8")

    return make


def h0(data) -> dict:
    return data["hypotheses"][0]


def set_in(path: list, value):
    def change(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return change


def case(id_, make, fragments):
    return pytest.param(make, fragments, id=id_)


MASKED = {"kind": "cross", "layer": 1, "head": 1}

CASES = [
    case("empty-file", raw(b""), ["not valid JSON"]),
    case("not-json", text("this is not a trace"), ["not valid JSON"]),
    case("truncated", lambda b: json.dumps(b["transformer"]).encode()[:5000], ["not valid JSON"]),
    case("latin-1", raw('{"source": "caf\xe9"}'.encode("latin-1")), ["not UTF-8", "byte 15"]),
    case("utf-16", raw('{"format": 1}'.encode("utf-16")), ["not UTF-8"]),
    case("nested-too-deep", text("[" * 100_000), ["nested too deeply"]),
    case("nan-literal", edit(lambda d: h0(d)["cross_attention"][0][0][0].__setitem__(
        0, float("nan"))), ["NaN", "not a number JSON allows"]),
    case("top-level-list", text("[1, 2]"), ["not a heedful trace"]),
    case("wrong-format", edit(set_in(["format"], "bertviz")), ["not a heedful trace"]),
    case("future-version", edit(set_in(["version"], 2)), ["unsupported trace version 2"]),
    case("missing-key", edit(lambda d: d.pop("source_tokens")), ["trace lacks source_tokens"]),
    case("unknown-key", edit(set_in(["extra"], 1)), ["unknown keys extra"]),
    case("no-hypotheses", edit(set_in(["hypotheses"], [])), ["no hypotheses"]),
    case("model-not-object", edit(set_in(["model"], "transformer")), ["model: expected an object"]),
    case("arch-unknown", edit(set_in(["model", "arch"], "lstm")), ["model.arch", "lstm"]),
    case("heads-zero", edit(set_in(["model", "heads"], 0)), ["model.heads", "from 1"]),
    case("heads-text", edit(set_in(["model", "heads"], "2")), ["model.heads", "whole number"]),
    case("layers-bool", edit(set_in(["model", "decoder_layers"], True)), ["model.decoder_layers"]),
    case("source-not-text", edit(set_in(["source"], 5)), ["source: expected text"]),
    case("source-tokens-not-list", edit(set_in(["source_tokens"], "abc")), ["source_tokens"]),
    case("source-token-number", edit(lambda d: d["source_tokens"].__setitem__(0, 7)),
         ["source_tokens[0]: expected text"]),
    case("beams-zero", edit(set_in(["search", "num_beams"], 0)), ["search.num_beams"]),
    case("length-penalty-text", edit(set_in(["search", "length_penalty"], "1")),
         ["search.length_penalty"]),
    case("encoder-layers-short", edit(lambda d: d["encoder_self_attention"].pop()),
         ["encoder_self_attention", "expected 2 lists (L_enc)"]),
    case("encoder-row-short", edit(lambda d: d["encoder_self_attention"][0][0][0].pop()),
         ["encoder_self_attention[0][0][0]", "numbers (S)"]),
    case("cross-steps-short", edit(lambda d: h0(d)["cross_attention"].pop()),
         ["hypotheses[0].cross_attention", "lists (T)"]),
    case("cross-weight-over-one", edit(lambda d: h0(d)["cross_attention"][0][0][0].__setitem__(
        0, 1.5)), ["hypotheses[0].cross_attention[0][0][0][0]", "from 0 to 1"]),
    case("cross-weight-negative", edit(lambda d: h0(d)["cross_attention"][0][0][0].__setitem__(
        0, -0.2)), ["cross_attention[0][0][0][0]", "from 0 to 1"]),
    case("cross-weight-text", edit(lambda d: h0(d)["cross_attention"][0][0][0].__setitem__(
        0, "0.2")), ["cross_attention[0][0][0][0]", "expected a number"]),
    case("decoder-self-wrong-shape", edit(lambda d: h0(d)["decoder_self_attention"][0][0].pop()),
         ["hypotheses[0].decoder_self_attention[0][0]", "lists (T)"]),
    case("tokens-one-more", edit(lambda d: h0(d)["tokens"].append("x")),
         ["hypotheses[0].cross_attention", "expected"]),
    case("text-not-text", edit(set_in(["hypotheses", 0, "text"], None)),
         ["hypotheses[0].text: expected text"]),
    case("score-positive", edit(set_in(["hypotheses", 0, "score"], 3.0)),
         ["hypotheses[0].score", "from -inf to 0"]),
    case("finished-text", edit(set_in(["hypotheses", 0, "finished"], "yes")),
         ["hypotheses[0].finished: expected true or false"]),
    case("top-k-short", edit(lambda d: h0(d)["top_k"].pop()), ["hypotheses[0].top_k"]),
    case("top-k-prob-over-one", edit(lambda d: h0(d)["top_k"][0][0].__setitem__("prob", 2)),
         ["hypotheses[0].top_k[0][0].prob"]),
    case("top-k-extra-key", edit(lambda d: h0(d)["top_k"][0][0].__setitem__("id", 3)),
         ["hypotheses[0].top_k[0][0]", "exactly the keys"]),
    case("hypothesis-unknown-key", edit(set_in(["hypotheses", 0, "weights"], [])),
         ["hypotheses[0] has unknown keys weights"]),
    case("rnn-extra-key", edit(lambda d: h0(d)["rnn"].__setitem__("cell", []), "rnn"),
         ["hypotheses[0].rnn", "exactly the keys"]),
    case("rnn-ragged-states", edit(lambda d: h0(d)["rnn"]["decoder_states"][1].pop(), "rnn"),
         ["hypotheses[0].rnn.decoder_states[1]", "numbers (N)"]),
    case("rnn-scores-wrong-source", edit(lambda d: h0(d)["rnn"]["scores"][0].pop(), "rnn"),
         ["hypotheses[0].rnn.scores[0]", "numbers (S)"]),
    case("rnn-state-infinite", edit(lambda d: h0(d)["rnn"]["decoder_states"][0].__setitem__(
        0, 1e400), "rnn"), ["Infinity", "not a number JSON allows"]),
    case("internals-list", edit(set_in(["internals"], [1, 2])), ["internals: expected an object"]),
    case("internals-bool-leaf", edit(set_in(["internals"], {"encoder": {"q": [True]}})),
         ["internals.encoder.q[0]: expected a number"]),
    # issue 28, item 4: the heads switched off (the base: 2 + 2 layers, 2 heads)
    case("masked-heads-object", edit(set_in(["masked_heads"], {"cross": 1})),
         ["masked_heads: expected a list of heads"]),
    case("masked-heads-text", edit(set_in(["masked_heads"], "cross:1")),
         ["masked_heads: expected a list of heads"]),
    case("masked-head-number", edit(set_in(["masked_heads"], [3])),
         ["masked_heads[0]: expected an object"]),
    case("masked-head-keys", edit(set_in(["masked_heads"], [{"kind": "cross", "layer": 1}])),
         ["masked_heads[0]: must have exactly the keys kind, layer and head"]),
    case("masked-head-kind", edit(set_in(["masked_heads"], [MASKED | {"kind": "self"}])),
         ["masked_heads[0].kind: must be one of cross, encoder, decoder"]),
    case("masked-head-layer-zero", edit(set_in(["masked_heads"], [MASKED | {"layer": 0}])),
         ["masked_heads[0].layer: must be from 1 to 2, got 0"]),
    case("masked-head-layer-over", edit(set_in(["masked_heads"], [MASKED | {"layer": 3}])),
         ["masked_heads[0].layer: must be from 1 to 2, got 3"]),
    case("masked-head-over", edit(set_in(["masked_heads"], [MASKED | {"head": 3}])),
         ["masked_heads[0].head: must be from 1 to 2, got 3"]),
    case("masked-head-text", edit(set_in(["masked_heads"], [MASKED | {"head": "1"}])),
         ["masked_heads[0].head: expected a whole number"]),
    case("masked-head-infinite", edit(set_in(["masked_heads"], [MASKED | {"layer": 1e400}])),
         ["Infinity", "not a number JSON allows"]),
    case("masked-heads-huge", edit(set_in(["masked_heads"], [MASKED] * 40_000)),
         ["masked_heads: 40,000 heads, more than the model can have"]),
    case("masked-head-rnn", edit(set_in(["masked_heads"], [MASKED | {"head": 2}]), "rnn"),
         ["masked_heads[0].head: must be from 1 to 1, got 2"]),
]  # fmt: skip


@pytest.mark.parametrize("make, fragments", CASES)
def test_a_hostile_trace_file_is_refused_by_name(tmp_path, make, fragments):
    path = tmp_path / "trace.json"
    path.write_bytes(make(BASES))
    with pytest.raises(ValueError) as caught:
        Trace.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    for fragment in fragments:
        assert fragment in message


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "trace.json"
    path.write_bytes(json.dumps(BASES["transformer"]).encode())
    monkeypatch.setattr(trace_check, "MAX_TRACE_BYTES", 1000)
    with pytest.raises(ValueError, match="larger than the 1,000 bytes a trace may have"):
        Trace.load(path)


@pytest.mark.parametrize("name", BASES)
def test_the_valid_bases_load_and_save_back_the_same(tmp_path, name):
    """The checks refuse nothing a trace of ours holds, a -inf score included."""
    data = copy.deepcopy(BASES[name])
    data["hypotheses"][-1]["score"] = float("-inf")
    trace = Trace.from_dict(data)
    path = trace.save(tmp_path / "trace.json")
    assert "Infinity" not in path.read_text("utf-8")  # written as null, which JSON allows
    assert Trace.load(path).hypotheses[-1].score is None
    assert Trace.load(path).to_dict()["hypotheses"][0] == BASES[name]["hypotheses"][0]
