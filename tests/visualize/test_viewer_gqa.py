"""The calculation panel of a grouped-query attention model, in Chromium: the heads of a group
read one key/value head, whose K and V the panel shows (the same numbers for each of them) and
names, from the trace's internals.kv_heads."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import LETTERS, train_reverse

from heedful.checkpoint.model_dir import GenerationConfig, save_model_dir
from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig
from heedful.data.tokenizers import CharTokenizer
from heedful.inference.translator import Translator
from heedful.visualize.trace import build_trace

from .test_html import assert_no_console_errors, chromium, open_page, part
from .test_viewer_calc import check_head_rows, click_cell, panel_rows, traces

__all__ = ["chromium", "traces"]  # fixtures


@pytest.fixture(scope="module")
def gqa_trace(tmp_path_factory) -> dict:
    tokenizer = CharTokenizer.train([LETTERS])
    layers = dict(encoder=TextEncoderConfig(layers=1), decoder=DecoderConfig(layers=2))
    config = ModelConfig(d_model=32, num_heads=4, num_kv_heads=2, d_ff=64, dropout=0.0, **layers)
    model = train_reverse(config, tokenizer, steps=100)
    generation = GenerationConfig(num_beams=1, max_len_ratio=1.5, max_len_offset=4)
    path = tmp_path_factory.mktemp("gqa") / "model"
    save_model_dir(path, model, config, tokenizer, tokenizer, generation)
    return build_trace(Translator.load(path), "abcdefg", num_beams=1).to_dict()


def open_head(driver, head, t, s):
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(*part("matrix-head"))).select_by_value(str(head))
    click_cell(driver, "matrix", t, s)
    return panel_rows(driver), driver.find_element(*part("calc-explain")).text


def test_the_heads_of_a_group_show_their_shared_k_and_v(chromium, tmp_path, gqa_trace):
    trace = gqa_trace
    assert trace["internals"]["kv_heads"] == [0, 0, 1, 1]
    driver = open_page(chromium, tmp_path, trace, "calc-gqa")
    t, s, layer = 2, 1, 1  # the matrix opens on the last layer
    hyp, shared = trace["hypotheses"][0], trace["internals"]["cross"]
    shown = {}
    for head, g in ((0, 0), (1, 0), (2, 1), (3, 1)):
        rows, explained = open_head(driver, head, t, s)
        q = hyp["internals"]["cross"]["q"][layer][head][t]
        k, v = shared["k"][layer][g], shared["v"][layer][g]  # (S, d_k) of key/value head g
        check_head_rows(rows, q, k, v, hyp["cross_attention"][t][layer][head])
        heads = "1, 2" if g == 0 else "3, 4"
        assert f"K and V are key/value head {g + 1} of 2, shared by heads {heads}." in explained
        shown[head] = np.array([r["k"] for r in rows])
    np.testing.assert_array_equal(shown[0], shown[1])  # one K for the group
    np.testing.assert_array_equal(shown[2], shown[3])
    assert not np.array_equal(shown[0], shown[2])
    assert_no_console_errors(driver)


def test_a_model_without_groups_says_nothing_of_them(chromium, tmp_path, traces):
    trace = traces["transformer"]
    assert "kv_heads" not in trace["internals"]
    driver = open_page(chromium, tmp_path, trace, "calc-plain")
    _, explained = open_head(driver, 1, 2, 1)
    assert "softmax" in explained and "key/value head" not in explained
