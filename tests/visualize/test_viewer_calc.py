"""The viewer's calculation panel, several viewers on one page, and render_step, in Chromium.

Traces come from the two tiny committed golden models (tests/golden/models), so the Q, K, V and
RNN states are a real model's; every number the page shows is checked against a float64
recomputation here from the trace alone.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from heedful.inference.translator import Translator
from heedful.visualize.html import render_fragment, render_step
from heedful.visualize.trace import build_trace

from .test_html import assert_no_console_errors, chromium, open_page, part, synthetic_trace

__all__ = ["chromium"]  # the browser fixture, shared with test_html.py
MODELS = Path(__file__).resolve().parents[1] / "golden" / "models"


@pytest.fixture(scope="module")
def traces() -> dict:
    out = {}
    for name in ("transformer", "rnn"):
        translator = Translator.load(MODELS / name)
        out[name] = build_trace(translator, "abcdefg", num_beams=2, n_best=2).to_dict()
    return out


def panel_rows(driver) -> list[dict]:
    """The calculation table, one dict per key: column -> number or vector (numbers travel as
    text: JSON has no -Infinity)."""
    rows = driver.execute_script(
        """
        const rows = document.querySelectorAll('[data-part="calc-body"] tr[data-key]');
        return Array.from(rows, (row) => {
            const out = {masked: row.classList.contains("masked")};
            for (const cell of row.cells) {
                if (cell.dataset.value !== undefined) out[cell.dataset.col] = cell.dataset.value;
                if (cell.dataset.vector) out[cell.dataset.col] = JSON.parse(cell.dataset.vector);
            }
            return out;
        });
        """
    )
    return [{k: float(v) if isinstance(v, str) else v for k, v in row.items()} for row in rows]


def shown_vector(driver, name):
    element = driver.find_element(*part(name))
    return np.array(
        driver.execute_script("return JSON.parse(arguments[0].dataset.vector)", element)
    )


def click_cell(driver, name, row, col):
    """Click cell (row, col) of a heatmap canvas where it is drawn."""
    from selenium.webdriver.common.action_chains import ActionChains

    canvas = driver.find_element(*part(f"{name}-canvas"))
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    left, top, cell, w, h = driver.execute_script(
        "const c = arguments[0], g = c._grid;"
        "return [g.left, g.top, g.cell, c.clientWidth, c.clientHeight];",
        canvas,
    )
    x = left + col * cell + cell / 2 - w / 2
    y = top + row * cell + cell / 2 - h / 2
    ActionChains(driver).move_to_element_with_offset(canvas, int(x), int(y)).click().perform()


def softmax(scores):
    e = np.exp(scores - scores[np.isfinite(scores)].max())
    return e / e.sum()


def check_head_rows(rows, q, k, v, trace_weights, causal_row=None):
    """Every number of the panel's table against float64 from the trace's q, k_j, v_j."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    products = k @ q
    scaled = products / math.sqrt(q.size)
    masked = np.zeros(len(k), bool) if causal_row is None else np.arange(len(k)) > causal_row
    weights = softmax(np.where(masked, -np.inf, scaled))
    assert len(rows) == len(k)
    for j, row in enumerate(rows):
        assert row["masked"] == masked[j]
        np.testing.assert_allclose(row["k"], k[j], rtol=0, atol=0)
        np.testing.assert_allclose(
            [row["dot"], row["scaled"]], [products[j], scaled[j]], rtol=1e-12
        )
        assert row["score"] == (-math.inf if masked[j] else row["scaled"])
        np.testing.assert_allclose(row["weight"], weights[j], rtol=1e-9, atol=1e-15)
        np.testing.assert_allclose(row["weighted"], weights[j] * v[j], rtol=1e-9, atol=1e-15)
    # the recomputation from rounded q, k gives the model's weights to the trace's rounding
    np.testing.assert_allclose(weights, trace_weights, atol=2e-4)
    return weights @ v


def test_clicking_an_alignment_cell_shows_its_whole_calculation(chromium, tmp_path, traces):
    trace = traces["transformer"]
    driver = open_page(chromium, tmp_path, trace, "calc-cross")
    t, s, layer, head = 3, 2, 1, 1  # the matrix opens on the last layer; pick head 2
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(*part("matrix-head"))).select_by_value(str(head))
    click_cell(driver, "matrix", t, s)
    assert driver.find_element(*part("calc")).is_displayed()
    hyp = trace["hypotheses"][0]
    q = hyp["internals"]["cross"]["q"][layer][head][t]
    k = trace["internals"]["cross"]["k"][layer][head]
    v = trace["internals"]["cross"]["v"][layer][head]
    output = check_head_rows(panel_rows(driver), q, k, v, hyp["cross_attention"][t][layer][head])
    np.testing.assert_allclose(shown_vector(driver, "calc-output"), output, rtol=1e-9, atol=1e-12)
    assert_no_console_errors(driver)


def test_decoder_self_attention_cell_greys_the_masked_future(chromium, tmp_path, traces):
    trace = traces["transformer"]
    driver = open_page(chromium, tmp_path, trace, "calc-dec")
    driver.find_element(*part("tab-dec")).click()
    i, layer = 2, 1  # head: the average is shown, the calculation is of head 1
    click_cell(driver, "dec", i, 0)
    rows = panel_rows(driver)
    hyp = trace["hypotheses"][0]
    own = hyp["internals"]["decoder"]
    q, k, v = own["q"][layer][0][i], own["k"][layer][0], own["v"][layer][0]
    check_head_rows(rows, q, k, v, hyp["decoder_self_attention"][layer][0][i], causal_row=i)
    assert [r["masked"] for r in rows] == [j > i for j in range(len(rows))]
    assert all(r["weight"] == 0 and r["score"] == -math.inf for r in rows if r["masked"])
    assert_no_console_errors(driver)


def test_rnn_step_shows_the_seven_steps_with_the_models_score(chromium, tmp_path, traces):
    trace = traces["rnn"]
    assert trace["model"]["attention"] == "bahdanau"
    driver = open_page(chromium, tmp_path, trace, "calc-rnn")
    driver.find_element(*part("tab-replay")).click()
    t = 2
    driver.execute_script("window.heedfulViewer.setStep(arguments[0])", t)
    driver.find_element(*part("replay-calc")).click()
    steps = driver.find_elements("css selector", '[data-part="calc-body"] ol.calc-steps > li')
    assert len(steps) == 7
    hyp, shared = trace["hypotheses"][0], trace["internals"]
    states = np.array(shared["encoder_states"])  # (S, N)
    query = np.array(hyp["internals"]["score_queries"][t])  # W_q h_t
    scores = np.tanh(query + np.array(shared["score_keys"])) @ np.array(shared["score_v"])
    weights = softmax(scores)
    rows = panel_rows(driver)
    np.testing.assert_allclose([r["score"] for r in rows], scores, rtol=1e-9)
    np.testing.assert_allclose([r["weight"] for r in rows], weights, rtol=1e-9)
    np.testing.assert_allclose(scores, hyp["rnn"]["scores"][t], atol=2e-4)  # the model's own
    np.testing.assert_allclose(weights, np.array(hyp["cross_attention"][t])[0, 0], atol=2e-4)
    context = weights @ states
    np.testing.assert_allclose(shown_vector(driver, "calc-output"), context, rtol=1e-9)
    np.testing.assert_allclose(context, hyp["rnn"]["contexts"][t], atol=2e-4)
    np.testing.assert_allclose(
        shown_vector(driver, "calc-query"), hyp["rnn"]["decoder_states"][t], atol=0
    )
    assert_no_console_errors(driver)


def open_rnn_step(chromium, tmp_path, trace, t):
    driver = open_page(chromium, tmp_path, trace, f"calc-rnn-inputs-{t}")
    driver.find_element(*part("tab-replay")).click()
    driver.execute_script("window.heedfulViewer.setStep(arguments[0])", t)
    driver.find_element(*part("replay-calc")).click()
    return driver


def test_rnn_step_shows_the_embedding_the_decoder_read(chromium, tmp_path, traces):
    """Step h_t shows embedding(y_{t-1}), the model's own embedding row of that token (float64
    from its weights); a trace without the rows says they were not recorded."""
    trace = traces["rnn"]
    translator = Translator.load(MODELS / "rnn")
    rows = translator.model.decoder.embedding.weight.detach().double().numpy()  # (V, E)
    vocab = translator.tgt_tokenizer
    ids = {vocab.id_to_token(i): i for i in range(len(vocab))}
    hyp = trace["hypotheses"][0]
    for t in (0, 2):
        driver = open_rnn_step(chromium, tmp_path, trace, t)
        token = "<s>" if t == 0 else hyp["tokens"][t - 1]
        shown = driver.find_element(*part("calc-inputs"))
        assert driver.execute_script("return arguments[0].querySelector('.tok').title", shown) == (
            token
        )
        row = rows[ids[token]]
        np.testing.assert_allclose(shown_vector(driver, "calc-embedding"), row, atol=1e-4)
        assert_no_console_errors(driver)
    old = {**trace, "hypotheses": [dict(h) for h in trace["hypotheses"]]}
    for h in old["hypotheses"]:
        h["internals"] = {k: v for k, v in h["internals"].items() if k != "decoder_inputs"}
    old["internals"] = {
        k: v for k, v in trace["internals"].items() if k not in ("encoder_inputs", "decoder_reads")
    }
    driver = open_rnn_step(chromium, tmp_path, old, 1)
    assert "not recorded" in driver.find_element(*part("calc-inputs")).text
    assert len(driver.find_elements("css selector", '[data-part="calc-body"] ol > li')) == 7
    assert_no_console_errors(driver)


def test_render_step_opens_on_that_cells_calculation(chromium, tmp_path, traces):
    trace = traces["transformer"]
    page = render_step(trace, "decoder", 2, 1, 3)
    path = tmp_path / "step.html"
    path.write_text(page, encoding="utf-8")
    chromium.get(path.as_uri())
    panel = chromium.find_element(*part("calc"))
    assert panel.is_displayed()
    assert panel.get_attribute("data-kind") == "dec" and panel.get_attribute("data-position") == "2"
    assert chromium.find_element(*part("panel-dec")).is_displayed()
    assert len(panel_rows(chromium)) == len(trace["hypotheses"][0]["tokens"])
    with pytest.raises(ValueError, match="layer 3 out of range"):
        render_step(trace, "decoder", 3, 1, 1)
    with pytest.raises(ValueError, match="unknown attention kind"):
        render_step(trace, "self", 1, 1, 1)


def test_a_trace_without_internals_says_so_in_the_panel(chromium, tmp_path):
    driver = open_page(chromium, tmp_path, synthetic_trace(), "calc-none")
    click_cell(driver, "matrix", 1, 1)
    note = driver.find_element(*part("calc-note"))
    assert note.is_displayed() and "internals=True" in note.text
    assert_no_console_errors(driver)


HOST = """<!DOCTYPE html><html><head><meta charset="utf-8">
<style>h1 { color: rgb(200, 0, 0); } .panel { border: 3px solid rgb(0, 128, 0); }</style>
</head><body><h1 id="host-title">Host page</h1><select id="host-select"><option>x</option>
</select><div class="panel" id="host-panel">host panel</div><p id="host-p">text</p>
@@VIEWERS@@</body></html>"""
HOST_STYLE = """
const out = {};
for (const id of ["host-title", "host-select", "host-panel", "host-p"]) {
    const s = getComputedStyle(document.getElementById(id));
    out[id] = [s.color, s.fontSize, s.fontFamily, s.margin, s.padding, s.border, s.boxSizing];
}
const body = getComputedStyle(document.body);
out.body = [body.background, body.margin, body.maxWidth, body.fontFamily, body.color];
return out;
"""


def test_two_viewers_on_one_page_draw_apart_and_leave_the_page_alone(chromium, tmp_path):
    if isinstance(chromium, str):
        pytest.fail(chromium)
    first = synthetic_trace(src_len=6, tgt_len=5, seed=1)
    second = synthetic_trace(src_len=9, tgt_len=7, heads=2, seed=2)
    alone, both = tmp_path / "host.html", tmp_path / "both.html"
    alone.write_text(HOST.replace("@@VIEWERS@@", ""), encoding="utf-8")
    viewers = render_fragment(first) + render_fragment(second)
    both.write_text(HOST.replace("@@VIEWERS@@", viewers), encoding="utf-8")
    chromium.get(alone.as_uri())
    host_style = chromium.execute_script(HOST_STYLE)
    chromium.get(both.as_uri())
    assert chromium.execute_script(HOST_STYLE) == host_style  # the viewers' CSS stays inside
    roots = chromium.find_elements("css selector", ".heedful-viewer")
    assert len(roots) == 2
    ids = chromium.execute_script("return Array.from(document.querySelectorAll('[id]'), e => e.id)")
    assert len(ids) == len(set(ids)) > 50
    pixels = """const c = arguments[0].querySelector('[data-part="matrix-canvas"]');
        const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
        const colours = new Set();
        for (let i = 0; i < d.length; i += 28) colours.add(d[i] + "," + d[i + 1] + "," + d[i + 2]);
        return [colours.size, c.toDataURL()];"""
    (n1, before1), (n2, before2) = (chromium.execute_script(pixels, r) for r in roots)
    assert n1 >= 10 and n2 >= 10 and before1 != before2  # both drew, each its own trace
    # the first viewer: another head and another tab; the second does not move
    select = roots[0].find_element("css selector", '[data-part="matrix-head"]')
    chromium.execute_script(
        "arguments[0].value = '1'; arguments[0].dispatchEvent(new Event('change'))", select
    )
    roots[0].find_element("css selector", '[data-part="tab-heads"]').click()
    assert roots[0].find_element("css selector", '[data-part="panel-heads"]').is_displayed()
    assert roots[1].find_element("css selector", '[data-part="panel-matrix"]').is_displayed()
    assert not roots[1].find_element("css selector", '[data-part="panel-heads"]').is_displayed()
    assert chromium.execute_script(pixels, roots[1])[1] == before2
    roots[0].find_element("css selector", '[data-part="tab-matrix"]').click()
    assert chromium.execute_script(pixels, roots[0])[1] != before1
    apis = chromium.execute_script("return window.heedfulViewers.map(v => v.trace.source)")
    assert apis == [first["source"], second["source"]]
    assert_no_console_errors(chromium)
