"""Heads switched off over HTTP (issue 28, item 4, its second half): /translate's mask_heads
masks exactly as inference/heads.py's `masked` does in Python (the same output, score and
weights), the trace lists the heads that were off, heads the model lacks are named 400s, and a
masked request never changes another served beside it in the same batch.

The model: the server tests' Transformer (1 + 1 layers, 2 heads), whose </s> is suppressed, so
every output runs to its limit and a masked head moves letters, not lengths."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest
import requests

from heedful.inference.heads import Head, masked, parse_heads
from heedful.visualize.trace import Trace, build_trace

from .helpers import GOOD, LIMITS, InProcessServer, client, error, ok

SPECS = ["cross:1:2", "cross:1", "encoder:1:1,decoder:1"]
TEXTS = ["hello there", "abc def", "the cat sat on"]
WEIGHTS = ("cross_attention", "decoder_self_attention")


@pytest.fixture(scope="module")
def app(model_dir):
    with client(model_dir) as test_client:
        yield test_client


def post(app, **fields):
    return ok(app.post("/translate", json={**GOOD, **fields}))


def as_array(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


@pytest.mark.parametrize("spec", SPECS)
def test_masking_over_http_is_masking_in_python(app, translator, spec):
    heads = tuple(parse_heads(spec))
    for text in TEXTS:
        answer = post(app, q=text, mask_heads=spec, return_attention=True)
        trace = build_trace(translator, text, mask_heads=heads).to_dict()
        assert answer["translatedText"] == trace["hypotheses"][0]["text"]
        shown, expected = answer["attention"]["hypotheses"][0], trace["hypotheses"][0]
        assert shown["tokens"] == expected["tokens"]
        assert shown["score"] == pytest.approx(expected["score"], abs=2e-5)
        for kind in WEIGHTS:
            np.testing.assert_allclose(as_array(shown[kind]), as_array(expected[kind]), atol=2e-5)
        with masked(translator.model, heads):  # the plain answer too, without a trace
            [plain] = translator.translate([text])
        assert post(app, q=text, mask_heads=spec)["translatedText"] == plain.text


@pytest.mark.parametrize("spec", SPECS)
def test_a_masked_head_changes_the_output_and_the_weights(app, spec):
    """Against every head on: the output moves for some text, and the weights after the first
    masked attention move (the heads' own weights are still computed and drawn)."""
    moved_text, moved_weights = False, False
    for text in TEXTS:
        on = post(app, q=text, return_attention=True)
        off = post(app, q=text, mask_heads=spec, return_attention=True)
        moved_text |= on["translatedText"] != off["translatedText"]
        a, b = on["attention"]["hypotheses"][0], off["attention"]["hypotheses"][0]
        if a["tokens"] == b["tokens"]:
            moved_weights |= any(
                np.abs(as_array(a[k]) - as_array(b[k])).max() > 1e-3 for k in WEIGHTS
            )
        else:
            moved_weights = True
    assert moved_text and moved_weights


def test_the_trace_lists_the_heads_that_were_off(app):
    answer = post(app, q="abc", mask_heads=["cross:1:2", "encoder:1"], return_attention=True)
    assert answer["attention"]["masked_heads"] == [
        {"kind": "cross", "layer": 1, "head": 2},
        {"kind": "encoder", "layer": 1, "head": None},
    ]
    assert "masked_heads" not in post(app, q="abc", return_attention=True)["attention"]
    read = Trace.from_dict(answer["attention"])  # checked as a trace file is (trace_check.py)
    assert read.to_dict()["masked_heads"] == answer["attention"]["masked_heads"]


def test_a_list_and_a_text_of_heads_are_the_same_request(app):
    listed = post(app, q="abc def", mask_heads=["cross:1:1", "decoder:1:2"])
    assert post(app, q="abc def", mask_heads="cross:1:1,decoder:1:2") == listed


def test_a_ctranslate2_server_says_it_cannot_switch_heads_off(model_dir):
    with client(model_dir, engine="ctranslate2") as ct2:
        answer = ct2.post("/translate", json={**GOOD, "mask_heads": "cross:1"})
        error(answer, 400, "the ctranslate2 engine cannot switch heads off (mask_heads)")


def test_masked_and_unmasked_requests_served_together_keep_to_their_own(model_dir, translator):
    """Requests sent at once, half with heads off, meet in the batcher's batches (a long
    max_wait makes sure); each answer is what its own request asks for, never the other's."""
    spec = "cross:1"
    with masked(translator.model, parse_heads(spec)):
        off = [t.text for t in translator.translate(TEXTS)]
    on = [t.text for t in translator.translate(TEXTS)]
    assert off != on
    server = InProcessServer(model_dir, replace(LIMITS, max_wait_ms=300))
    batches: list[list[bool]] = []
    state = server.app.state.heedful
    work, lock = state.batcher.work, threading.Lock()

    def recorded(jobs):
        with lock:
            batches.append([bool(job.searches[0].masked) for job in jobs])
        return work(jobs)

    state.batcher.work = recorded
    sends = [(i % len(TEXTS), i % 2 == 0) for i in range(12)]

    def send(case):
        i, mask = case
        body = {**GOOD, "q": TEXTS[i], **({"mask_heads": spec} if mask else {})}
        answer = requests.post(server.url + "/translate", json=body, timeout=60)
        return answer.json()["translatedText"]

    try:
        with ThreadPoolExecutor(len(sends)) as pool:
            answers = list(pool.map(send, sends))
    finally:
        server.stop()
    assert answers == [off[i] if mask else on[i] for i, mask in sends]
    assert any(True in batch and False in batch for batch in batches), batches  # they met


def test_the_heads_of_a_model_are_checked_for_each_request(app):
    error(app.post("/translate", json={**GOOD, "mask_heads": "cross:1:3"}), 400, "heads 1 to 2")
    assert Head("cross", 0, 1).record() == {"kind": "cross", "layer": 1, "head": 2}
