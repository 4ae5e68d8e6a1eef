"""The bottleneck of an RNN without attention, drawn (issue 28, item 6), in headless Chromium:
the encoder unrolled h̄_{s−1} → h̄_s, its final state handed over as the decoder's only context
s_0 = tanh(W_s h_final + b_s), the decoder unrolled s_0 → h_1 → … with the tokens it reads and
writes, and every state's first 8 units as numbers beside its strip. The states are checked
against a float64 GRU run here from model.safetensors' weights (PyTorch's GRU equations)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from heedful.data.tokenizers import BOS_ID
from heedful.inference.translator import Translator
from heedful.visualize.trace import build_trace

from .test_html import assert_no_console_errors, chromium, open_page, part
from .test_viewer_calc import traces

__all__ = ["chromium", "traces"]
MODEL = Path(__file__).resolve().parents[1] / "fixtures" / "model_dirs" / "rnn-gru-no-attention"
TOL = 1e-4

FIGURE = """
const box = document.querySelector('[data-part="anim-bottleneck"]');
const row = (part) => {
    const r = box.querySelector(`[data-part="${part}"]`);
    return r && {
        states: Array.from(r.querySelectorAll(".bn-state"), (c) => ({
            name: c.dataset.name,
            vector: JSON.parse(c.querySelector("canvas").dataset.vector),
            units: JSON.parse(c.querySelector(".bn-units").dataset.units),
            printed: Array.from(c.querySelectorAll(".bn-units li"), (li) => li.textContent),
            tokens: Array.from(c.querySelectorAll(".bn-token"), (t) => t.textContent),
            current: c.classList.contains("current"),
        })),
        arrows: Array.from(r.querySelectorAll(".bn-arrow"), (a) => [a.dataset.from, a.dataset.to]),
    };
};
return {shown: !box.hidden && box.offsetHeight > 0, encoder: row("bn-encoder"),
    handover: row("bn-handover"), decoder: row("bn-decoder")};
"""


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def gru(weights, prefix, suffix, inputs, h):
    """PyTorch's GRU layer `prefix…suffix` over `inputs` (n, E) from h (H,), float64: the
    states (n, H). Its weights stack the reset, update and new gates' rows, in that order."""
    w_ih, w_hh, b_ih, b_hh = (
        weights[f"{prefix}{name}{suffix}"].astype(np.float64)
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    )
    out = []
    for x in inputs:
        gi, gh = np.split(w_ih @ x + b_ih, 3), np.split(w_hh @ h + b_hh, 3)
        r, z = sigmoid(gi[0] + gh[0]), sigmoid(gi[1] + gh[1])
        n = np.tanh(gi[2] + r * gh[2])
        h = (1 - z) * n + z * h
        out.append(h)
    return np.array(out)


def bottleneck(weights, src_ids, tgt_in):
    """h̄_s, h_final, s_0 and the decoder's h_t of a 1-layer bidirectional GRU, float64."""
    emb = weights["encoder.embedding.weight"].astype(np.float64)[src_ids]
    zeros = np.zeros(weights["encoder.rnn.weight_hh_l0"].shape[1])
    forward = gru(weights, "encoder.rnn.", "_l0", emb, zeros)
    backward = gru(weights, "encoder.rnn.", "_l0_reverse", emb[::-1], zeros)[::-1]
    states = np.concatenate([forward, backward], axis=1)  # (S, N): [forward; backward]
    final = np.concatenate([forward[-1], backward[0]])
    w, b = (weights[f"decoder.bridge.{p}"].astype(np.float64) for p in ("weight", "bias"))
    start = np.tanh(w @ final + b)  # s_0 = tanh(W_s h_final + b_s)
    dec_emb = weights["decoder.embedding.weight"].astype(np.float64)[tgt_in]
    decoder = gru(weights, "decoder.rnn.", "_l0", dec_emb, start)
    return states, final, start, decoder


@pytest.fixture(scope="module")
def none_trace():
    translator = Translator.load(MODEL)
    trace = build_trace(translator, "abcdefg", num_beams=1).to_dict()
    vocab = translator.tgt_tokenizer
    to_id = {vocab.id_to_token(j): j for j in range(len(vocab))}
    tgt_in = [BOS_ID] + [to_id[t] for t in trace["hypotheses"][0]["tokens"][:-1]]
    src_ids = translator.src_tokenizer.encode(trace["source"])
    return trace, bottleneck(load_file(MODEL / "model.safetensors"), src_ids, tgt_in)


def check_units(state):
    assert state["units"] == state["vector"][:8]
    assert state["printed"] == [f"{x:.2f}" for x in state["vector"][:8]]


def test_the_no_attention_rnn_draws_its_bottleneck(chromium, tmp_path, none_trace):
    trace, (states, final, start, decoder) = none_trace
    hyp = trace["hypotheses"][0]
    S, T = len(trace["source_tokens"]), len(hyp["tokens"])
    driver = open_page(chromium, tmp_path, trace, "bottleneck")
    driver.find_element(*part("tab-anim")).click()
    shown = driver.execute_script(FIGURE)
    assert shown["shown"]

    encoder = shown["encoder"]  # h̄_1 → h̄_2 → … → h̄_S under their tokens
    names = [f"h̄_{s + 1}" for s in range(S)]
    assert [c["name"] for c in encoder["states"]] == names
    assert encoder["arrows"] == [list(pair) for pair in zip(names, names[1:])]
    for cell, expected, token in zip(encoder["states"], states, trace["source_tokens"]):
        np.testing.assert_allclose(cell["vector"], expected, atol=TOL)
        assert cell["tokens"] == ["", token]
        check_units(cell)

    handover = shown["handover"]  # the final state, the only context, into s_0
    assert [c["name"] for c in handover["states"]] == ["h_final", "s_0"]
    assert handover["arrows"] == [["h_final", "s_0"]]
    np.testing.assert_allclose(handover["states"][0]["vector"], final, atol=TOL)
    np.testing.assert_allclose(handover["states"][1]["vector"], start, atol=TOL)

    steps = shown["decoder"]  # s_0 → h_1 → … → h_T, reading y_{t−1}, writing y_t
    names = ["s_0"] + [f"h_{t + 1}" for t in range(T)]
    assert [c["name"] for c in steps["states"]] == names
    assert steps["arrows"] == [list(pair) for pair in zip(names, names[1:])]
    np.testing.assert_allclose(steps["states"][0]["vector"], start, atol=TOL)
    reads = ["<s>", *hyp["tokens"][:-1]]
    for t, cell in enumerate(steps["states"][1:]):
        np.testing.assert_allclose(cell["vector"], decoder[t], atol=TOL)
        assert cell["tokens"] == [hyp["tokens"][t], reads[t]]
        check_units(cell)
    assert not any(c["current"] for c in steps["states"])

    for _ in range(S + 2):  # the encoder, then decoder steps 1 and 2
        driver.find_element(*part("anim-next")).click()
    current = [
        c["name"] for c in driver.execute_script(FIGURE)["decoder"]["states"] if c["current"]
    ]
    assert current == ["h_2"]
    assert_no_console_errors(driver)


def test_a_model_with_attention_has_no_bottleneck_figure(chromium, tmp_path, traces):
    driver = open_page(chromium, tmp_path, traces["rnn"], "bottleneck-bahdanau")
    driver.find_element(*part("tab-anim")).click()
    assert not driver.execute_script(FIGURE)["shown"]
    assert_no_console_errors(driver)
