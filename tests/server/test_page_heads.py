"""Heads you can switch off in the served viewer (issue 28, item 4), in headless Chromium: the
page at / lists the model's heads by kind and layer; checking one translates the text again at
once with that head off, the viewer shows the new output and weights and says which heads were
off, and the page sets the output and score beside those with every head on."""

from __future__ import annotations

from heedful.inference.heads import masked, parse_heads
from heedful.visualize.trace import build_trace

from .test_page import chromium, in_viewer, no_errors, part, server, translate_in_page

__all__ = ["chromium", "server"]  # fixtures: the browser, `heedful serve` of the tests' model

SHAPE = """return Array.from(document.querySelectorAll("#heads [data-kind]"),
  (row) => [row.dataset.kind, +row.dataset.layer, row.querySelectorAll("input.head").length]);"""
SHOWN = """const win = document.getElementById("viewer-frame").contentWindow;
return win.heedfulViewer ? JSON.stringify(win.heedfulViewer.trace.masked_heads || null) : "";"""


def switch(driver, selector: str, masked_heads: str) -> None:
    """Click a box of the heads panel and wait for the viewer of the new translation."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.find_element("css selector", selector).click()
    WebDriverWait(driver, 60).until(lambda d: d.execute_script(SHOWN) == masked_heads)
    WebDriverWait(driver, 60).until(
        lambda d: not d.find_element("id", "translate-button").get_property("disabled")
    )


def test_a_head_switched_off_on_the_page_changes_the_translation_live(server, chromium, translator):
    driver, text = chromium, "hello there"
    translate_in_page(driver, server.url, text)
    assert driver.execute_script(SHAPE) == [["encoder", 1, 2], ["decoder", 1, 2], ["cross", 1, 2]]
    on = translator.translate([text])[0]
    assert in_viewer(driver, f"return {part('output-text')}.textContent") == on.text
    assert driver.find_element("id", "heads-effect").get_property("hidden")

    switch(driver, '#heads [data-kind="cross"] input.head[data-head="2"]', "[" + HEAD_2 + "]")
    heads = parse_heads("cross:1:2")
    trace = build_trace(translator, text, mask_heads=tuple(heads)).to_dict()["hypotheses"][0]
    with masked(translator.model, heads):
        [off] = translator.translate([text])
    assert off.text != on.text and trace["text"] == off.text
    assert in_viewer(driver, f"return {part('output-text')}.textContent") == off.text
    shown = in_viewer(driver, "return viewer.trace.hypotheses[0].cross_attention")
    assert shown == trace["cross_attention"]  # the same rounded numbers as Python's trace
    info = in_viewer(driver, f"return {part('model-info')}.textContent")
    assert "heads switched off: cross:1:2" in info
    effect = driver.find_element("id", "heads-effect").text
    assert f'With cross:1:2 off: "{off.text}" (score {trace["score"]:.3f})' in effect
    assert f'with every head on: "{on.text}"' in effect

    switch(
        driver, '#heads [data-kind="cross"] input.layer', '[{"kind":"cross","layer":1,"head":null}]'
    )
    boxes = driver.find_elements("css selector", '#heads [data-kind="cross"] input.head')
    assert all(box.get_property("disabled") for box in boxes)  # the layer's box holds them all
    driver.find_element("css selector", '#heads [data-kind="cross"] input.layer').click()
    driver.find_element("css selector", '#heads [data-kind="cross"] input.head:checked').click()
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 60).until(lambda d: d.execute_script(SHOWN) == "null")
    assert in_viewer(driver, f"return {part('output-text')}.textContent") == on.text
    no_errors(driver)


HEAD_2 = '{"kind":"cross","layer":1,"head":2}'
