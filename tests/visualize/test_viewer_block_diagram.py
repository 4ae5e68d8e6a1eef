"""The Transformer block drawn as the paper draws it (issue 28, item 6; Vaswani et al. 2017,
Figures 1 and 2), in headless Chromium: a residual arrow around each sublayer into the box that
adds it back (Add & Norm; pre-norm: Add), multi-head attention holding its Q, K, V linear
layers (each opening its per-head numbers, equal to float64 from model.safetensors) with the
heads' attention and W_O, and the shape of what flows on every arrow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from heedful.inference.translator import Translator
from heedful.visualize.trace import build_trace

from .test_html import assert_no_console_errors, chromium, open_page, part
from .test_viewer_block import shown_tables
from .test_viewer_calc import MODELS
from .test_viewer_calc_linear import file_weights
from .test_viewer_views import choose

__all__ = ["chromium"]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "model_dirs"
DIRS = {"post": MODELS / "transformer", "pre": FIXTURES / "transformer-pre-learned-tied"}
RESIDUALS = {  # what is added back, and the box that adds it
    "post": [["embed", "attn_norm"], ["attn_norm", "ff_norm"]],
    "pre": [["embed", "ff_norm"], ["ff_norm", "out"]],
}
GEOMETRY = """
const d = document.querySelector('[data-part="block-diagram"]'), f = d.getBoundingClientRect();
const rect = (node) => { const r = node.getBoundingClientRect();
    return [r.left - f.left, r.top - f.top, r.right - f.left, r.bottom - f.top]; };
const boxes = {};
for (const b of d.querySelectorAll("[data-box]")) boxes[b.dataset.box] = rect(b);
return {boxes, titles: Object.fromEntries(Array.from(d.querySelectorAll("[data-box]"),
        (b) => [b.dataset.box, b.querySelector("b").textContent])),
    frame: rect(d.querySelector(".block-mha")),
    inside: Array.from(d.querySelectorAll(".block-mha [data-box], .block-mha [data-qkv]"),
        (b) => b.dataset.box || b.dataset.qkv),
    qkv: Array.from(d.querySelectorAll("[data-qkv]"), (b) => [b.dataset.qkv,
        JSON.parse(b.dataset.shape), rect(b), b.textContent]),
    arrows: Array.from(d.querySelectorAll(".block-arrow"), (a) => a.dataset.shape),
    residuals: Array.from(d.querySelectorAll("path.block-residual"), (p) => [p.dataset.from,
        p.dataset.to, JSON.parse(p.dataset.points)])};
"""


@pytest.fixture(scope="module")
def block_traces() -> dict:
    return {
        name: build_trace(Translator.load(path), "abcdefg", num_beams=1).to_dict()
        for name, path in DIRS.items()
    }


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_residuals_go_around_each_sublayer_into_what_adds_them(
    chromium, tmp_path, block_traces, norm
):
    trace = block_traces[norm]
    driver = open_page(chromium, tmp_path, trace, f"block-diagram-{norm}")
    driver.find_element(*part("tab-block")).click()
    for layer in (0, 1):
        choose(driver, "block-layer", layer)
        g = driver.execute_script(GEOMETRY)
        first = "embed" if layer == 0 else "x"
        expected = [[first if a == "embed" else a, b] for a, b in RESIDUALS[norm]]
        assert [r[:2] for r in g["residuals"]] == expected
        right = max([b[2] for b in g["boxes"].values()] + [g["frame"][2]])
        for source, target, points in g["residuals"]:
            (x0, y0), (lane, _), (_, y1), (x1, _) = points
            a, b = g["boxes"][source], g["boxes"][target]
            assert a[0] < x0 < a[2] and a[3] < y0 < a[3] + 12  # leaves just under its box
            assert lane > right  # passes the sublayers on the right
            assert b[1] < y1 < b[3] and abs(x1 - b[2]) <= 3  # ends at the adding box
            assert "Add" in g["titles"][target]
    assert_no_console_errors(driver)


def test_attention_holds_q_k_v_whose_numbers_are_x_times_w(chromium, tmp_path, block_traces):
    trace = block_traces["post"]
    weights = file_weights(DIRS["post"])
    S, D, H = len(trace["source_tokens"]), 16, 2
    driver = open_page(chromium, tmp_path, trace, "block-qkv")
    driver.find_element(*part("tab-block")).click()
    g = driver.execute_script(GEOMETRY)
    assert g["inside"] == ["q", "k", "v", "z", "attn_out"]  # Figure 2: linear, attention, W_O
    frame = g["frame"]
    for name, shape, (left, top, right, bottom), text in g["qkv"]:
        assert frame[0] <= left and right <= frame[2] and frame[1] <= top and bottom <= frame[3]
        assert shape == [S, D // H, H] and f"W_{name.upper()} ({D}, {D // H})" in text
    flow = f"(S, D) = ({S}, {D})"  # every arrow between sublayers carries (S, D)
    assert g["arrows"].count(flow) == 4 and f"({S}, {D // H}) × {H}" in g["arrows"]

    layer = 1
    choose(driver, "block-layer", layer)
    x = np.asarray(trace["internals"]["block"]["layers"][layer]["x"], np.float64)
    prefix = f"encoder.layers.{layer}.self_attn.w_"
    for name in "qkv":
        driver.find_element("css selector", f'[data-qkv="{name}"]').click()
        tables = shown_tables(driver)
        assert sorted(tables) == [f"{name}-{h}" for h in range(H)]
        w = weights[prefix + name + ".weight"].astype(np.float64)
        bias = weights.get(prefix + name + ".bias")
        full = x @ w.T + (0 if bias is None else bias.astype(np.float64))  # (S, D), float64
        for h in range(H):
            cols = slice(h * D // H, (h + 1) * D // H)
            np.testing.assert_allclose(tables[f"{name}-{h}"], full[:, cols], atol=1e-4)
    assert_no_console_errors(driver)
