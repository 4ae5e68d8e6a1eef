"""The viewer's "Transformer block" view in headless Chromium: one encoder layer of the
committed golden Transformer drawn as boxes whose numbers equal a float64 recomputation from the
model's own weights, and its positional encoding (table, curves, PE·PEᵀ)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from heedful.inference.translator import Translator

from .test_html import assert_no_console_errors, chromium, open_page, open_viewers, part, screenshot
from .test_viewer_calc import MODELS, traces
from .test_viewer_views import choose

__all__ = ["chromium", "traces"]  # fixtures: the browser, traces of the golden models
TOL = 1e-4

TABLES = """
const tables = arguments[0].querySelectorAll('[data-part="block-numbers"] table.block-table');
const out = {};
for (const t of tables) {
    out[t.dataset.name] = Array.from(t.querySelectorAll("tr"), (tr) =>
        Array.from(tr.querySelectorAll("td"), (td) => Number(td.dataset.value))
    ).filter((r) => r.length);
}
return out;
"""


@pytest.fixture(scope="module")
def transformer():
    return Translator.load(MODELS / "transformer").model.double()


def shown_tables(driver) -> dict:
    root = driver.find_element("css selector", ".heedful-viewer")
    return {k: np.array(v) for k, v in driver.execute_script(TABLES, root).items()}


def open_box(driver, box) -> dict:
    driver.find_element("css selector", f'[data-part="block-diagram"] [data-box="{box}"]').click()
    return shown_tables(driver)


def layer_norm(x, norm):  # float64, from the model's γ and β
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    gamma, beta = norm.weight.detach().numpy(), norm.bias.detach().numpy()
    return (x - mean) / np.sqrt(var + norm.eps) * gamma + beta


def test_each_box_shows_the_models_numbers(chromium, tmp_path, traces, transformer):
    trace, model = traces["transformer"], transformer
    ids = Translator.load(MODELS / "transformer").src_tokenizer.encode(trace["source"])
    S = len(trace["source_tokens"])
    driver = open_page(chromium, tmp_path, trace, "block")
    driver.find_element(*part("tab-block")).click()
    assert driver.find_element(*part("block-body")).is_displayed()
    boxes = driver.find_elements("css selector", '[data-part="block-diagram"] .block-box')
    assert [b.get_attribute("data-box") for b in boxes][:3] == ["embed", "z", "attn_out"]

    shown = open_box(driver, "embed")  # x = embedding · √d_model + PE
    embed = model.encoder.embed
    emb = embed.tokens.weight.detach().numpy()[ids] * embed.scale
    pe = embed.positions.table.double().numpy()[:S]
    np.testing.assert_allclose(shown["tokens-scaled"], emb, atol=TOL)
    np.testing.assert_allclose(shown["positional"], pe, atol=TOL)
    np.testing.assert_allclose(shown["x"], emb + pe, atol=TOL)
    screenshot(driver, "block-embed")

    previous = None
    for i, layer in enumerate(model.encoder.layers):
        choose(driver, "block-layer", i)
        x = open_box(driver, "embed" if i == 0 else "x")["x"]
        if previous is not None:  # a layer reads the previous layer's output
            np.testing.assert_allclose(x, previous, atol=TOL)
        previous = check_layer(driver, layer, model.config.num_heads, x)
    assert_no_console_errors(driver)


def check_layer(driver, layer, heads, x):
    """Each box of one post-norm layer against float64 from its input x; returns its output."""
    z = np.concatenate([open_box(driver, "z")[f"z-{h}"] for h in range(heads)], axis=1)
    with torch.no_grad():  # each head's z from x, in float64
        xt = torch.tensor(x)[None]
        out, _ = layer.self_attn(xt, xt, xt, torch.ones(1, 1, x.shape[0], dtype=torch.bool))
    w_o = layer.self_attn.w_o
    np.testing.assert_allclose(out[0].numpy(), z @ w_o.weight.detach().numpy().T
                               + w_o.bias.detach().numpy(), atol=TOL)  # fmt: skip
    attn_out = open_box(driver, "attn_out")["attn_out"]
    np.testing.assert_allclose(attn_out, out[0].numpy(), atol=TOL)  # W_O(concat z) + b
    norm1 = open_box(driver, "attn_norm")
    np.testing.assert_allclose(norm1["attn_norm_in"], x + attn_out, atol=TOL)  # post-norm
    h = layer_norm(x + attn_out, layer.attn_block.norm)
    np.testing.assert_allclose(norm1["attn_norm_out"], h, atol=TOL)
    ff = open_box(driver, "ff_out")["ff_out"]
    with torch.no_grad():
        np.testing.assert_allclose(ff, layer.feed_forward(torch.tensor(h)).numpy(), atol=TOL)
    norm2 = open_box(driver, "ff_norm")
    np.testing.assert_allclose(
        norm2["ff_norm_out"], layer_norm(h + ff, layer.ff_block.norm), atol=TOL
    )
    norm = layer.ff_block.norm  # before its affine part, LayerNorm's output has mean 0, std 1
    gamma, beta = norm.weight.detach().numpy(), norm.bias.detach().numpy()
    plain = (norm2["ff_norm_out"] - beta) / gamma
    np.testing.assert_allclose(plain.mean(-1), 0, atol=1e-3)
    np.testing.assert_allclose(plain.std(-1), 1, atol=1e-3)
    return norm2["ff_norm_out"]


def test_the_positional_encoding_its_curves_and_dot_products(
    chromium, tmp_path, traces, transformer
):
    trace = traces["transformer"]
    driver = open_page(chromium, tmp_path, trace, "block-pe")
    driver.find_element(*part("tab-block")).click()
    read = "return JSON.parse(arguments[0].dataset.matrix)"
    table = np.array(driver.execute_script(read, driver.find_element(*part("pe-table"))))
    model_pe = transformer.encoder.embed.positions.table.double().numpy()[: len(table)]
    assert table.shape == (32, 16)
    np.testing.assert_allclose(table, model_pe, atol=TOL)
    products = np.array(driver.execute_script(read, driver.find_element(*part("pe-products"))))
    recorded = np.asarray(trace["internals"]["block"]["positional"], np.float64)
    np.testing.assert_allclose(products, recorded @ recorded.T, atol=1e-9)
    np.testing.assert_allclose(products, model_pe @ model_pe.T, atol=TOL * 10)
    curves = driver.find_elements("css selector", '[data-part="pe-curves"] polyline')
    dims = [int(c.get_attribute("data-dim")) for c in curves]
    assert dims[:2] == [0, 1] and dims[-1] == 15
    for curve, dim in zip(curves, dims):  # each curve passes through PE[p, dim] at every p
        ys = [float(pt.split(",")[1]) for pt in curve.get_attribute("points").split()]
        np.testing.assert_allclose(ys, 75 - model_pe[:, dim] * 63, atol=0.06)
    screenshot(driver, "block-positional")
    assert_no_console_errors(driver)


@pytest.mark.parametrize("name", ["rnn", "transformer-without-block"])
def test_the_view_says_what_it_needs(chromium, tmp_path, traces, name):
    if name == "rnn":
        trace, says = traces["rnn"], "for Transformer models"
    else:
        trace = traces["transformer"]
        trace = {
            **trace,
            "internals": {k: v for k, v in trace["internals"].items() if k != "block"},
        }
        says = "internals.block"
    driver = open_page(chromium, tmp_path, trace, f"block-{name}")
    assert "unavailable" in driver.find_element(*part("tab-block")).get_attribute("class")
    driver.find_element(*part("tab-block")).click()
    note = driver.find_element(*part("block-note"))
    assert note.is_displayed() and says in note.text
    assert_no_console_errors(driver)


def test_two_viewers_draw_their_own_block(chromium, tmp_path, traces):
    roots = open_viewers(chromium, tmp_path, [traces["transformer"]] * 2, "block")
    roots[1].find_element("css selector", '[data-box="ff_out"]').click()
    pressed = [
        r.find_element("css selector", '.block-box[aria-pressed="true"]').get_attribute("data-box")
        for r in roots
    ]
    assert pressed == ["embed", "ff_out"]
    assert_no_console_errors(chromium)


AXES = 'return JSON.parse(arguments[0].dataset.axes || "null")'


def test_the_positional_figures_have_axes(chromium, tmp_path, traces):
    """Issue 28, item 6: the PE table, its curves and PE·PEᵀ say what their axes are, with
    the indices along them (they were bare colours and lines)."""
    driver = open_page(chromium, tmp_path, traces["transformer"], "block-axes")
    driver.find_element(*part("tab-block")).click()
    for name, (x, y), (rows, cols) in (
        ("pe-table", ("dimension d", "position pos"), (32, 16)),
        ("pe-products", ("position j", "position i"), (32, 32)),
    ):
        canvas = driver.find_element(*part(name))
        axes = driver.execute_script(AXES, canvas)
        assert axes is not None, f"{name} has no axes"
        assert (axes["x"], axes["y"]) == (x, y)
        for got, n in ((axes["xticks"], cols), (axes["yticks"], rows)):
            assert got[0] == 0 and got[-1] >= n - (got[1] - got[0]) and got[-1] < n, got
    curves = driver.find_element(*part("pe-curves"))
    texts = lambda axis: [  # noqa: E731
        t.text for t in curves.find_elements("css selector", f'text[data-axis="{axis}"]')
    ]
    assert texts("y") == ["−1", "0", "1"]
    assert texts("x")[0] == "0" and len(texts("x")) >= 4
    assert "against position pos →" in curves.get_attribute("textContent")
    assert_no_console_errors(driver)
