"""Image traces (visualize/trace.py's build_trace, trace_image.py's picture) and `heedful attention
MODEL image.png`: the caption's attention over the grid, the picture, the ViT's rollout; the
prefixes, samples and named refusals an image trace shares with text ones; the PNG's one panel
per word; the viewer in headless Chromium (the current word's regions, and a hovered word's)."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from click.testing import CliRunner
from image_models import image_model_dir, picture, png_file

from heedful.cli import main
from heedful.cli.see_image import caption_overlay
from heedful.inference.engine import Unsupported
from heedful.inference.translator import Translator
from heedful.visualize.overlay import overlay_figure
from heedful.visualize.rollout import attention_rollout
from heedful.visualize.trace import Trace, build_trace

from .test_html import assert_no_console_errors, chromium, open_page, part, screenshot

__all__ = ["chromium"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("image-models")
    return {kind: image_model_dir(root / kind, kind) for kind in ("vit", "cnn")}


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    """A 24 × 32 PNG: wider than high, so the centre crop cuts columns off."""
    return png_file(tmp_path_factory.mktemp("photo") / "photo.png", picture(seed=3))


@pytest.mark.parametrize("kind", ["vit", "cnn"])
def test_an_image_trace_holds_the_captions_own_attention(models, photo, kind, tmp_path):
    captioner = Translator.load(models[kind])
    trace = build_trace(captioner, photo)
    [caption] = captioner.translate([photo], need_weights=True)
    hyp = trace.hypotheses[0]
    assert hyp.tokens == caption.tokens and hyp.text == caption.text
    assert trace.source == "photo.png" and trace.image["grid"] == [4, 4]
    regions = [f"r{i}c{j}" for i in range(1, 5) for j in range(1, 5)]  # row-major
    assert trace.source_tokens == regions == caption.source_tokens and regions[5] == "r2c2"
    np.testing.assert_allclose(hyp.cross_attention, caption.attention.double(), atol=6e-6)
    loaded = Trace.load(trace.save(tmp_path / "trace.json"))  # the checks accept what we write
    assert loaded.to_dict() == trace.to_dict()
    header, payload = trace.image["data_uri"].split(",", 1)
    assert header == "data:image/png;base64"
    from PIL import Image

    seen = np.asarray(Image.open(io.BytesIO(base64.b64decode(payload))))
    np.testing.assert_array_equal(seen, picture(seed=3)[:, 4:28])  # the centre 24 × 24 square


def test_a_vit_trace_has_its_self_attention_and_rollout(models, photo):
    trace = build_trace(Translator.load(models["vit"]), photo)
    encoder = np.asarray(trace.encoder_self_attention)
    assert encoder.shape == (2, 2, 16, 16) and trace.model["encoder_layers"] == 2
    expected = attention_rollout(encoder)  # from the rounded weights: within the rounding
    np.testing.assert_allclose(trace.image["rollout"], expected, atol=1e-4)
    assert trace.image["rollout"] != np.eye(16).tolist()  # the layers do mix the patches


def test_a_cnn_trace_has_no_self_attention_to_roll_out(models, photo):
    trace = build_trace(Translator.load(models["cnn"]), photo)
    assert trace.encoder_self_attention is None and trace.image["rollout"] is None
    assert trace.model["arch"] == "rnn" and trace.model["encoder"] == "cnn"


def test_an_image_trace_forces_prefixes_samples_and_refuses_internals_by_name(models, photo):
    """Prefixes and sampling reach pictures by construction (the one Translator, the one
    build_trace); the per-head internals, read off a token encoder, are refused by name."""
    translator = Translator.load(models["vit"])
    forced = build_trace(translator, photo, prefix="two")
    [caption] = translator.translate([photo], prefixes=["two"])
    assert forced.hypotheses[0].text == caption.text and caption.text.startswith("two")
    assert forced.search["prefix"] == "two" and forced.search["forced"] == 3
    drawn = build_trace(translator, photo, n_best=2, sampling={"seed": 3, "temperature": 2.0})
    samples = translator.translate([photo], n_best=2, sample=True, seed=3, temperature=2.0)
    texts = [samples[0].text] + [a.text for a in samples[0].alternatives]
    assert [h.text for h in drawn.hypotheses] == texts
    assert drawn.search["sample"] == {"seed": 3, "temperature": 2.0}
    assert all(len(h.sampled) == len(h.tokens) for h in drawn.hypotheses)
    assert build_trace(translator, photo).internals is None  # not recorded unless asked
    with pytest.raises(Unsupported, match=r"^internals=True needs a text model"):
        build_trace(translator, photo, internals=True)


def test_text_traces_stay_as_they_were():
    """A trace without a picture writes no image key: older readers' files are unchanged."""
    from .test_html import synthetic_trace

    data = synthetic_trace()
    assert "image" not in Trace.from_dict(data).to_dict()


def test_the_overlay_has_one_panel_per_word(models, photo):
    captioner = Translator.load(models["vit"])
    pixels, attention, words, caption = caption_overlay(captioner, photo)
    assert words == caption.tokens and attention.shape == (len(words), 4, 4)
    assert pixels.shape == (264, 264, 3)  # the 24-pixel square enlarged 11 times
    np.testing.assert_allclose(attention.sum((1, 2)), 1.0, atol=1e-5)
    heads = caption.attention[:, -1].double()  # (T, H, S)
    np.testing.assert_allclose(
        caption_overlay(captioner, photo, layer=1, head=2)[1].reshape(len(words), 16),
        heads[:, 1], atol=1e-6,
    )  # fmt: skip
    figure = overlay_figure(pixels, attention, words)
    shown = [ax for ax in figure.axes if ax.get_visible() and ax.get_images()]  # not the bar
    assert [ax.get_title() for ax in shown] == [w.replace(" ", "␣") for w in words]


def test_the_png_command(models, photo, tmp_path, png_size):
    out, page = tmp_path / "overlay.png", tmp_path / "viewer.html"
    result = CliRunner().invoke(
        main, ["attention", str(models["cnn"]), str(photo), "--png", str(out), "--html", str(page)]
    )
    assert result.exit_code == 0, result.output
    [caption] = Translator.load(models["cnn"]).translate([photo])
    assert f"photo.png -> {caption.text}" in result.output
    assert f"({len(caption.tokens)} panels)" in result.output
    width, height = png_size(out)
    assert width > height > 0
    assert "data:image/png;base64," in page.read_text("utf-8")


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--kind", "encoder"], "--kind cross"),
        (["--grid"], "--grid and --words are for text models"),
        (["--layer", "3"], "layer 3 out of range"),
    ],
)
def test_the_png_command_refuses_what_images_lack(models, photo, tmp_path, extra, fragment):
    command = ["attention", str(models["vit"]), str(photo), "--png", str(tmp_path / "o.png")]
    result = CliRunner().invoke(main, command + extra)
    assert result.exit_code != 0 and fragment in result.output, result.output


def test_the_png_command_names_a_missing_picture(models, tmp_path):
    command = ["attention", str(models["vit"]), str(tmp_path / "nope.png"), "--png", "o.png"]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 2 and "is not an image file" in result.output


def hover(driver, element, away) -> None:
    """Put the pointer on `element`, deterministically: scrolled to the middle of the viewport
    first (so the centre the driver measures is where it stays), reached in one jump from
    `away` (ActionChains' default glides 250 ms from wherever the pointer was, and every word
    chip on its way fires its mouseenter), and waited for until the viewer marks it hovered.
    The element must not move when hovered: the words once sat under the explanation, which
    hovering shortens from two lines to one, so the chips rose by their own height from under
    the pointer and the hover flickered off (the flaky failure of this test in full runs)."""
    from selenium.webdriver import ActionChains
    from selenium.webdriver.support.ui import WebDriverWait

    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    before = element.rect
    ActionChains(driver, duration=0).move_to_element(away).move_to_element(element).perform()
    WebDriverWait(driver, 10).until(lambda d: "hovered" in element.get_attribute("class"))
    assert element.rect == before  # still under the pointer


CELLS = """
const cells = Array.from(arguments[0].children);
return cells.map((c) => ({w: +c.dataset.weight, alpha: +getComputedStyle(c).backgroundColor
    .replace(/.*,\\s*([\\d.]+)\\)$/, "$1"), rgb: getComputedStyle(c).backgroundColor
    .match(/\\d+/g).slice(0, 3).map(Number), top: c.classList.contains("top"),
    lit: c.classList.contains("lit"), chosen: c.classList.contains("chosen")}));
"""


def test_the_viewer_overlays_the_current_and_the_hovered_words_regions(
    chromium, models, photo, tmp_path
):
    from selenium.webdriver import ActionChains

    trace = build_trace(Translator.load(models["vit"]), photo).to_dict()
    driver = open_page(chromium, tmp_path, trace, "image")
    assert driver.find_element(*part("panel-replay")).is_displayed()  # it opens on the picture
    assert driver.find_element(*part("image-picture")).get_attribute("naturalWidth") == "24"
    cells_part = driver.find_element(*part("image-cells"))
    cross = np.asarray(trace["hypotheses"][0]["cross_attention"])[:, -1].mean(1)  # (T, S)
    for t in (0, len(cross) - 1):
        driver.execute_script("window.heedfulViewer.setStep(arguments[0])", t)
        cells = driver.execute_script(CELLS, cells_part)
        np.testing.assert_allclose([c["w"] for c in cells], cross[t], atol=1e-6)
        shown_alpha = np.asarray([c["alpha"] for c in cells])
        # dimmed as far as each weight falls short of the peak (the browser keeps 8 bits)
        expected = 0.75 * (1 - cross[t] / cross[t].max())
        np.testing.assert_allclose(shown_alpha, expected, atol=1 / 255)
        assert all(c["rgb"] == [0, 0, 0] for c in cells)  # black: no colour laid on the scene
        assert [c["top"] for c in cells].index(True) == int(cross[t].argmax())
    word = 2
    chip = driver.find_elements("css selector", '[data-part="image-words"] .tok')[word]
    hover(driver, chip, away=driver.find_element(*part("image-explain")))
    cells = driver.execute_script(CELLS, cells_part)
    np.testing.assert_allclose([c["w"] for c in cells], cross[word], atol=1e-6)
    lit = np.flatnonzero([c["lit"] for c in cells])
    np.testing.assert_array_equal(lit, np.flatnonzero(cross[word] >= 0.5 * cross[word].max()))
    assert "hovered" in chip.get_attribute("class")
    screenshot(driver, "viewer-image-hover", full_page=False)
    ActionChains(driver, duration=0).move_to_element(
        driver.find_element(*part("image-explain"))
    ).perform()
    cells = driver.execute_script(CELLS, cells_part)  # back to the current step's word
    np.testing.assert_allclose([c["w"] for c in cells], cross[len(cross) - 1], atol=1e-6)
    assert not any(c["lit"] for c in cells)
    assert_no_console_errors(driver)


def test_the_viewer_shows_a_patchs_self_attention_and_rollout(chromium, models, photo, tmp_path):
    from selenium.webdriver.support.ui import Select

    trace = build_trace(Translator.load(models["vit"]), photo).to_dict()
    driver = open_page(chromium, tmp_path, trace, "image-rollout")
    cells_part = driver.find_element(*part("image-cells"))
    patch = 5
    driver.find_elements("css selector", '[data-part="image-cells"] .region')[patch].click()
    Select(driver.find_element(*part("image-mode"))).select_by_value("patch")
    Select(driver.find_element(*part("image-layer"))).select_by_value("0")
    cells = driver.execute_script(CELLS, cells_part)
    self_attention = np.asarray(trace["encoder_self_attention"])[0].mean(0)[patch]  # layer 1
    np.testing.assert_allclose([c["w"] for c in cells], self_attention, atol=1e-6)
    assert [c["chosen"] for c in cells].index(True) == patch
    Select(driver.find_element(*part("image-mode"))).select_by_value("rollout")
    cells = driver.execute_script(CELLS, cells_part)
    np.testing.assert_allclose([c["w"] for c in cells], trace["image"]["rollout"][patch])
    screenshot(driver, "viewer-image-rollout", full_page=False)
    assert_no_console_errors(driver)


def test_the_viewer_loads_no_picture_from_a_url(chromium, models, photo, tmp_path):
    """A trace given straight to render_html (not through Trace.load, which refuses it) with
    a URL for its picture: the viewer leaves the <img> empty rather than fetch anything."""
    trace = build_trace(Translator.load(models["cnn"]), photo).to_dict()
    trace["image"]["data_uri"] = "https://example.invalid/cat.png"
    driver = open_page(chromium, tmp_path, trace, "image-url")
    assert driver.find_element(*part("image-picture")).get_attribute("src") in ("", None)
    assert len(driver.find_elements("css selector", '[data-part="image-cells"] .region')) == 16
    assert_no_console_errors(driver)
