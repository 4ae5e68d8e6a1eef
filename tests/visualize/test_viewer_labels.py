"""Decoder positions labelled by what they read (issue 28, item 1), in headless Chromium.

Decoder position t reads y_{t-1} (<s> at the first) and predicts y_t. Labelled by the token it
produces, a key read "6" in the viewer where `heedful explain` said "2", and the causal
diagonal looked like "a token attends to itself". Keys now carry what they read, queries
"reads→predicts", in the head view and the calculation panel alike (the PNG heatmap:
tests/visualize/test_heatmap.py).
"""

from __future__ import annotations

from .test_html import assert_no_console_errors, chromium, open_page, part
from .test_viewer_calc import click_cell, traces

__all__ = ["chromium", "traces"]  # fixtures: the browser, traces of the golden models

HEAD_VIEW_LABELS = """
const texts = (side) => Array.from(
    document.querySelectorAll('[data-part="head-view"] text[data-side="' + side + '"] title'),
    (t) => t.textContent);
return {keys: texts("left"), queries: texts("right")};
"""
CALC_KEYS = """
return Array.from(document.querySelectorAll('[data-part="calc-body"] tr[data-key] .tok'),
    (t) => t.textContent);
"""


def test_decoder_keys_are_labelled_by_the_token_each_position_reads(chromium, tmp_path, traces):
    from selenium.webdriver.support.ui import Select

    trace = traces["transformer"]
    tokens = trace["hypotheses"][0]["tokens"]
    reads = ["<s>", *tokens[:-1]]
    driver = open_page(chromium, tmp_path, trace, "labels")
    driver.find_element(*part("tab-heads")).click()
    Select(driver.find_element(*part("hv-kind"))).select_by_value("dec")
    shown = driver.execute_script(HEAD_VIEW_LABELS)
    assert shown["keys"] == reads
    assert shown["queries"] == [f"{r}\u2192{t}" for r, t in zip(reads, tokens)]

    driver.find_element(*part("tab-dec")).click()
    click_cell(driver, "dec", 3, 0)
    keys = driver.execute_script(CALC_KEYS)
    assert keys[: len(reads)] == reads, keys
    assert_no_console_errors(driver)
