"""The head view's weight boxes (issue 28, item 7, bertviz's best idea): with a token hovered,
every token across from it gets one box per shown head, as dark as that head's weight between
the two. In headless Chromium."""

from __future__ import annotations

import numpy as np
import pytest

from .test_html import assert_no_console_errors, chromium, open_page, part, synthetic_trace
from .test_viewer_views import hover_matrix_row

__all__ = ["chromium"]  # the browser fixture

BOXES = """
return Array.from(document.querySelectorAll('[data-part=head-view] .weight-boxes rect'),
    (r) => [+r.dataset.head, +r.dataset.index, +r.dataset.weight, +r.getAttribute("fill-opacity"),
            r.parentNode.dataset.side]);
"""


def hover(driver, side: str, index: int) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    label = driver.find_element(
        "css selector", f'[data-part=head-view] text[data-side="{side}"][data-index="{index}"]'
    )
    ActionChains(driver).move_to_element(label).perform()


@pytest.mark.parametrize("side", ["right", "left"])  # a query hovered, then a key
def test_a_hovered_token_shows_each_heads_weight_as_a_box(chromium, tmp_path, side):
    trace = synthetic_trace(src_len=6, tgt_len=5, layers=(2, 2), heads=4)
    driver = open_page(chromium, tmp_path, trace, f"head-boxes-{side}")
    driver.find_element(*part("tab-heads")).click()
    assert driver.execute_script(BOXES) == []  # nothing hovered, no boxes
    driver.find_element("css selector", '.head-toggle[data-head="2"]').click()  # heads 0, 1, 3
    index = 2
    hover(driver, side, index)
    boxes = driver.execute_script(BOXES)
    # the cross-attention of the last layer: (T, heads, S) for this hypothesis
    weights = np.asarray(trace["hypotheses"][0]["cross_attention"])[:, -1]
    across = weights[index] if side == "right" else weights[:, :, index].T  # (heads, others)
    expected = {(h, k): across[h, k] for h in (0, 1, 3) for k in range(across.shape[1])}
    assert {(h, k) for h, k, *_ in boxes} == set(expected)
    for head, k, weight, opacity, shown_side in boxes:
        assert shown_side == ("left" if side == "right" else "right")
        np.testing.assert_allclose(weight, expected[head, k], rtol=1e-12)
        assert abs(opacity - weight) <= 5e-4
    assert_no_console_errors(driver)


def test_a_row_hovered_in_the_matrix_says_it_filters_the_head_view(chromium, tmp_path):
    """Issue 28, item 7: the hovered matrix row keeps filtering the head view after the mouse
    left the matrix; a notice says so and gives back every line."""
    trace = synthetic_trace(src_len=9, tgt_len=8, heads=4)
    hyp = trace["hypotheses"][0]
    driver = open_page(chromium, tmp_path, trace, "head-filter")
    row = 3
    hover_matrix_row(driver, row)
    driver.execute_script("window.heedfulViewer.showTab('heads')")
    notice = driver.find_element(*part("hv-filter"))
    assert notice.is_displayed()
    assert f"output token {row + 1} ({hyp['tokens'][row]})" in notice.text
    weights = np.asarray(hyp["cross_attention"])[:, -1]  # (T, heads, S), the last layer
    count = lambda: int(  # noqa: E731
        driver.find_element(*part("head-view")).get_attribute("data-line-count")
    )
    assert count() == int((weights[row] >= 0.02).sum())
    driver.find_element(*part("hv-unfilter")).click()
    assert not notice.is_displayed()
    assert count() == int((weights >= 0.02).sum())  # every row's lines again
    assert_no_console_errors(driver)
