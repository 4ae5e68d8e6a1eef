"""The calculation panel from the start (issue 28, item 2), in headless Chromium: x (layer 1:
embedding·√d_model + PE), the three linear layers W_Q, W_K, W_V as boxes with their shapes, per
key the elementwise q ⊙ k_j whose sum is the dot product, and the head's output beside the
model's own. Every number is checked against float64 from model.safetensors' weights, read by
their names in the file (no module of heedful's recomputes them here)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from heedful.checkpoint.model_dir import GenerationConfig, save_model_dir
from heedful.checkpoint.names import current_names
from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig
from heedful.data.tokenizers import BOS_ID, CharTokenizer
from heedful.inference.translator import Translator
from heedful.models.build import build_model
from heedful.visualize.trace import build_trace

from .test_html import assert_no_console_errors, chromium, open_page
from .test_viewer_calc import MODELS, panel_rows, shown_vector, softmax

__all__ = ["chromium"]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "model_dirs"
TOL = 1e-4  # the trace rounds to 5 decimals; a product of 16 of them is this close
PREFIX = {"enc": "encoder.layers.{}.self_attn", "dec": "decoder.layers.{}.self_attn"}
PREFIX["cross"] = "decoder.layers.{}.cross_attn"
NORM = {"enc": "encoder.layers.{}.attn_block.norm", "dec": "decoder.layers.{}.self_block.norm"}


def model_trace(path: Path) -> tuple[dict, dict, Translator]:
    translator = Translator.load(path)
    trace = build_trace(translator, "abcdefg", num_beams=1, internals=True).to_dict()
    return trace, file_weights(path), translator


def file_weights(path: Path) -> dict:
    """model.safetensors' tensors under today's names (an earlier file's are mapped)."""
    weights = load_file(path / "model.safetensors")
    return {new: weights[old] for old, new in current_names(weights).items()}


@pytest.fixture(scope="module")
def models() -> dict:
    return {
        "post": model_trace(MODELS / "transformer"),
        "pre": model_trace(FIXTURES / "transformer-pre-learned-tied"),
    }


def open_calc(driver, kind, layer, head, i):
    script = "window.heedfulViewer.openCalc(...arguments)"
    driver.execute_script(script, kind, layer, head, i)


def linear(weights, name, x, cols):
    """x · W[cols]ᵀ + b[cols] in float64, W and b as the file holds them (b absent: none)."""
    w = weights[name + ".weight"].astype(np.float64)[cols]
    bias = weights.get(name + ".bias")
    return x @ w.T + (0 if bias is None else bias.astype(np.float64)[cols])


def layer_norm(x, weights, name):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    gamma, beta = (weights[f"{name}.{p}"].astype(np.float64) for p in ("weight", "bias"))
    return (x - mean) / np.sqrt(var + 1e-5) * gamma + beta


def first_layer_input(weights, kind, ids, config):
    """embedding·√d_model + PE of layer 1, from the file's rows (tied: the generator's)."""
    side = "encoder.embed" if kind == "enc" else "decoder.embed"
    table = weights.get(f"{side}.tokens.weight", weights.get("decoder.generator.weight"))
    x = table.astype(np.float64)[ids] * math.sqrt(config.d_model)
    if config.positional == "learned":
        return x + weights[f"{side}.positions.embedding.weight"].astype(np.float64)[: len(ids)]
    return x + sinusoids(len(ids), config.d_model)


def sinusoids(length, d):
    """Vaswani et al. 2017, §3.5: PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos."""
    angle = np.arange(length)[:, None] / 10000.0 ** (np.arange(0, d, 2) / d)
    pe = np.zeros((length, d))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)
    return pe


CASES = [  # (model, kind, layer, head, query)
    ("post", "enc", 0, 1, 2),
    ("post", "enc", 1, 0, 4),
    ("post", "dec", 0, 1, 3),
    ("post", "cross", 1, 1, 3),
    ("pre", "enc", 0, 0, 1),
    ("pre", "dec", 0, 1, 2),
    ("pre", "cross", 0, 0, 2),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_the_calculation_starts_at_x_and_goes_through_w_q_w_k_w_v(chromium, tmp_path, models, case):
    name, kind, layer, head, i = case
    trace, weights, translator = models[name]
    config = translator.config
    driver = open_page(chromium, tmp_path, trace, f"calc-linear-{name}-{kind}")
    open_calc(driver, kind, layer, head, i)
    d_k = config.d_model // config.num_heads
    cols = slice(head * d_k, (head + 1) * d_k)

    x = shown_vector(driver, "calc-x")  # what W_Q reads
    if layer == 0 and kind != "cross":  # the first layer: the embedding, scaled, plus PE
        src_ids = translator.src_tokenizer.encode(trace["source"])
        vocab = translator.tgt_tokenizer
        to_id = {vocab.id_to_token(j): j for j in range(len(vocab))}
        tgt_ids = [BOS_ID] + [to_id[t] for t in trace["hypotheses"][0]["tokens"][:-1]]
        ids = src_ids if kind == "enc" else tgt_ids  # the decoder reads <s>, y_1, …
        expected = first_layer_input(weights, kind, ids, config)
        if config.norm == "pre":  # pre-norm: attention reads LayerNorm(x)
            expected = layer_norm(expected, weights, NORM[kind].format(layer))
        np.testing.assert_allclose(x, expected[i], atol=TOL)
    prefix = PREFIX[kind].format(layer)
    q = linear(weights, prefix + ".w_q", x, cols)  # x → q, float64 from the file
    np.testing.assert_allclose(shown_vector(driver, "calc-q"), q, atol=TOL)

    rows = panel_rows(driver)
    k = np.array([r["k"] for r in rows])
    v = np.array([r["v"] for r in rows])
    for r, k_j in zip(rows, k):  # q ⊙ k_j, and its sum the dot product of the table
        np.testing.assert_allclose(r["qk"], q * k_j, atol=TOL)
        np.testing.assert_allclose(sum(r["qk"]), r["dot"], rtol=1e-9, atol=1e-12)
    keys = np.array(driver.execute_script(KEY_READS, kind, layer))  # what W_K and W_V read
    np.testing.assert_allclose(k, linear(weights, prefix + ".w_k", keys, cols), atol=TOL)
    np.testing.assert_allclose(v, linear(weights, prefix + ".w_v", keys, cols), atol=TOL)
    check_boxes(driver, config, len(rows))
    check_output(driver, q, k, v, i if kind == "dec" else None)
    assert_no_console_errors(driver)


KEY_READS = """
const t = window.heedfulViewer.trace, own = t.hypotheses[0].internals, block = t.internals.block;
const [kind, layer] = arguments;
if (kind === "cross") return t.internals.cross.memory;
if (kind === "dec") return own.decoder.x[layer];
return block.norm === "pre" ? block.layers[layer].attn_norm_out : block.layers[layer].x;
"""
BOXES = """
return Array.from(document.querySelectorAll('[data-part="calc-linear"] .calc-linear-row'),
    (row) => [row.dataset.weight, Array.from(row.querySelectorAll(".calc-matrix"),
        (box) => JSON.parse(box.dataset.shape))]);
"""


def check_boxes(driver, config, n):
    """The three linear layers, drawn with their shapes: (1, D)·(D, d_k) → (1, d_k) for q,
    (n, D)·(D, d_k) → (n, d_k) for K and V."""
    D, d_k = config.d_model, config.d_model // config.num_heads
    # the article's search analogy captions the layers that make q, k and v, above them
    caption = driver.find_element("css selector", '[data-part="calc-linear"] .calc-analogy')
    assert "search" in caption.text and "k_j" in caption.text and "v_j" in caption.text
    first_row = driver.find_element("css selector", '[data-part="calc-linear"] .calc-linear-row')
    assert caption.location["y"] < first_row.location["y"]
    assert driver.execute_script(BOXES) == [
        ["W_Q", [[1, D], [D, d_k], [1, d_k]]],
        ["W_K", [[n, D], [D, d_k], [n, d_k]]],
        ["W_V", [[n, D], [D, d_k], [n, d_k]]],
    ]


def check_output(driver, q, k, v, causal_row):
    """Σ_j w_j v_j from the float64 q, k, v, and the model's own beside it (its W_O's input,
    recorded by the replay) within float32 rounding, with the difference shown."""
    scores = k @ q / math.sqrt(q.size)
    if causal_row is not None:
        scores[causal_row + 1 :] = -np.inf
    output = softmax(scores) @ v
    shown = shown_vector(driver, "calc-output")
    np.testing.assert_allclose(shown, output, atol=TOL)
    own = shown_vector(driver, "calc-model-vector")
    np.testing.assert_allclose(own, output, atol=TOL)
    difference = driver.find_element("css selector", '[data-part="calc-difference"]')
    diff = float(difference.get_attribute("data-value"))
    assert diff == pytest.approx(np.abs(own - shown).max(), abs=1e-12) and diff < TOL


def test_grouped_query_heads_read_their_groups_k_and_v(chromium, tmp_path):
    """Under grouped-query attention head 3 of 4 reads key/value head 2 of 2: W_K's and W_V's
    columns of that head, the box says so, and q stays the head's own."""
    tokenizer = CharTokenizer.train(["abcdefgh"])
    config = ModelConfig(
        d_model=16,
        num_heads=4,
        num_kv_heads=2,
        d_ff=32,
        encoder=TextEncoderConfig(layers=1),
        decoder=DecoderConfig(layers=1),
    )
    with torch.random.fork_rng():  # untrained: its output is the seed's, whatever ran before
        torch.manual_seed(0)
        model = build_model(config, len(tokenizer), len(tokenizer))
    path = tmp_path / "gqa"
    save_model_dir(path, model, config, tokenizer, tokenizer, GenerationConfig(num_beams=1))
    trace, weights, _ = model_trace(path)
    driver = open_page(chromium, tmp_path, trace, "calc-linear-gqa")
    open_calc(driver, "cross", 0, 2, 0)  # the first output step: every output has one
    x = shown_vector(driver, "calc-x")
    q = linear(weights, "decoder.layers.0.cross_attn.w_q", x, slice(8, 12))  # head 3's own
    np.testing.assert_allclose(shown_vector(driver, "calc-q"), q, atol=TOL)
    memory = np.array(trace["internals"]["cross"]["memory"])
    k = np.array([r["k"] for r in panel_rows(driver)])
    kv_cols = slice(4, 8)  # key/value head 2: W_K has 2 heads of 4 columns
    w_k = "decoder.layers.0.cross_attn.w_k"
    np.testing.assert_allclose(k, linear(weights, w_k, memory, kv_cols), atol=TOL)
    rows = driver.find_elements("css selector", '[data-part="calc-linear"] .calc-linear-row')
    assert "key/value head 2" in rows[1].text and "key/value head 2" in rows[2].text
    assert "key/value head" not in rows[0].text
    assert_no_console_errors(driver)


def test_an_older_trace_starts_at_q_and_says_the_output_was_not_recorded(
    chromium, tmp_path, models
):
    trace = models["post"][0]
    old = {**trace, "hypotheses": [dict(h) for h in trace["hypotheses"]]}
    for h in old["hypotheses"]:  # the keys added by issue 28's item 2 are optional
        own = h["internals"]
        h["internals"] = {
            "decoder": {k: own["decoder"][k] for k in "qkv"},
            "cross": {"q": own["cross"]["q"]},
        }
    driver = open_page(chromium, tmp_path, old, "calc-linear-old")
    open_calc(driver, "cross", 1, 0, 2)
    assert not driver.find_elements("css selector", '[data-part="calc-linear"]')
    assert len(panel_rows(driver)) == len(trace["source_tokens"])
    shown = driver.find_element("css selector", '[data-part="calc-model-output"]')
    assert "not recorded" in shown.text
    assert_no_console_errors(driver)
