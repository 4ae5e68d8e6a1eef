"""The model view's legend (issue 28, item 7): its thumbnails share one colour scale, drawn
above them from weight 0 to 1, and each kind says what its rows and columns are (bertviz's
model view leaves both to the reader). In headless Chromium."""

from __future__ import annotations

from .test_html import assert_no_console_errors, chromium, open_page, part
from .test_viewer_views import synthetic_trace

__all__ = ["chromium"]  # the browser fixture

BAR = """
const c = arguments[0], d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
const row = Math.floor(24 * c.height / 36), seen = new Set();  // through the colour bar
for (let x = 0; x < c.width; x++) {
    const at = 4 * (row * c.width + x);
    if (d[at + 3]) seen.add(d[at] + "," + d[at + 1] + "," + d[at + 2]);
}
return seen.size;
"""


def test_the_model_view_has_a_colour_scale_and_names_its_axes(chromium, tmp_path):
    trace = synthetic_trace(src_len=8, tgt_len=7, layers=(2, 2), heads=2)
    driver = open_page(chromium, tmp_path, trace, "model-legend")
    driver.find_element(*part("tab-model")).click()
    legend = driver.find_element(*part("model-legend"))
    assert legend.is_displayed() and legend.get_attribute("data-range") == "0,1"
    assert driver.execute_script(BAR, legend) > 50  # a gradient, not a blank canvas
    axes = {
        section.get_attribute("data-kind"): section.find_element("css selector", ".model-axes").text
        for section in driver.find_elements("css selector", "[data-part=model-grids] .model-kind")
    }
    assert set(axes) == {"enc", "dec", "cross"}
    assert "rows output, columns source" in axes["cross"]
    assert "rows query (source), columns key (source)" in axes["enc"]
    assert "columns key (the token it reads)" in axes["dec"]
    assert_no_console_errors(driver)
