"""The web page at / and the API docs at /docs, in headless Chromium that can reach
127.0.0.1 and nothing else (screenshot in tests/artifacts/server-page.png); and, in this
process, what the page offers to type."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from heedful.server.page import EXAMPLES, examples, index_page
from heedful.tasks.dates import DATE_FORMAT_EXAMPLES

from .helpers import LIMITS, Server, assert_clean_exit, flags

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    running = Server(model_dir, tmp_path_factory.mktemp("logs") / "page.log", *flags(LIMITS))
    yield running
    assert_clean_exit(running, running.stop())
    assert "Traceback" not in running.output(), running.output()


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    """Headless Chromium with the network off: names resolve to nothing but 127.0.0.1, and
    anything else would go through a proxy on a closed port."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless", "--no-sandbox", "--disable-gpu",
                     "--disable-background-networking", "--disable-component-update",
                     "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                     "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                     "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=127.0.0.1",
                     "--window-size=1360,1000", "--force-device-scale-factor=1",
                     f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):  # fmt: skip
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(120)
    driver.set_script_timeout(60)
    yield driver
    driver.quit()


def no_errors(driver) -> None:
    """Nothing failed to load or threw since the last call (a blocked CDN would be SEVERE)."""
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe


def translate_in_page(driver, url: str, text: str, beams: int = 1) -> None:
    """Open the page, type `text`, choose `beams`, translate; return once the viewer is drawn."""
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver.set_window_size(1360, 1000)
    driver.get(url + "/")
    driver.find_element("id", "source-input").send_keys(text)
    Select(driver.find_element("id", "num-beams")).select_by_value(str(beams))
    driver.find_element("id", "translate-button").click()
    WebDriverWait(driver, 60).until(
        lambda d: d.execute_script(
            """const f = document.getElementById("viewer-frame");
            return !f.hidden && !!(f.contentWindow && f.contentWindow.heedfulViewer);"""
        )
    )


def part(name: str) -> str:
    """JavaScript for one of the viewer's parts (it names them by data-part, not by id)."""
    return f'doc.querySelector("[data-part={name}]")'


def in_viewer(driver, script: str):
    """`script`, run in the viewer's frame (`doc`, `win` and `viewer` are given)."""
    return driver.execute_script(
        """const win = document.getElementById("viewer-frame").contentWindow;
        const doc = win.document, viewer = win.heedfulViewer;\n"""
        + script
    )


# ---- the page ----------------------------------------------------------------------------------


def test_the_page_shows_the_translation_once_with_its_attention(server, chromium, translator):
    driver, text = chromium, "the dog runs"
    translate_in_page(driver, server.url, text)
    expected = translator.translate([text], num_beams=1)[0].text
    assert in_viewer(driver, f"return {part('output-text')}.textContent") == expected
    assert in_viewer(driver, f"return {part('source-text')}.textContent") == text
    shown = driver.execute_script("return document.body.innerText") + in_viewer(
        driver, "return doc.body.innerText"
    )
    assert shown.count(expected) == 1, shown
    colours = in_viewer(
        driver,
        """const c = doc.querySelector("[data-part=matrix-canvas]");
        const data = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
        const seen = new Set();
        for (let i = 0; i < data.length; i += 4 * 5) seen.add(data[i] + "," + data[i + 1]);
        return seen.size;""",
    )
    assert colours >= 10, colours  # a drawn heatmap, not a blank canvas
    assert json.loads(driver.execute_script("return JSON.stringify(heedfulPage.last.attention)"))
    no_errors(driver)


def test_a_ctranslate2_server_lists_the_outputs_without_attention(model_dir, tmp_path, chromium):
    """CTranslate2 gives no attention: the page does not ask for it (a 400 before) and lists
    the beam's outputs instead of the viewer."""
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from heedful.inference.runtime import load_translator

    running = Server(model_dir, tmp_path / "ct2.log", *flags(LIMITS), "--engine", "ctranslate2")
    try:
        driver, text = chromium, "a cat sat"
        driver.get(running.url + "/")
        driver.find_element("id", "source-input").send_keys(text)
        Select(driver.find_element("id", "num-beams")).select_by_value("3")
        driver.find_element("id", "translate-button").click()
        WebDriverWait(driver, 60).until(
            lambda d: not d.find_element("id", "outputs").get_property("hidden")
        )
        items = [e.text for e in driver.find_elements("css selector", "#outputs li")]
        ct2 = load_translator(model_dir, engine="ctranslate2")  # what that server runs
        [best] = ct2.translate([text], num_beams=3, n_best=3)
        assert items == [best.text] + [a.text for a in best.alternatives]
        assert driver.find_element("id", "error").get_property("hidden")
        assert driver.find_element("id", "viewer-frame").get_property("hidden")
        no_errors(driver)
    finally:
        assert_clean_exit(running, running.stop())


def test_the_page_lists_the_beams_hypotheses_and_shows_each(server, chromium, translator):
    driver, text = chromium, "a cat sat"
    translate_in_page(driver, server.url, text, beams=3)
    best = translator.translate([text], num_beams=3, n_best=3)[0]
    expected = [best.text, *(a.text for a in best.alternatives)]
    listed = in_viewer(
        driver,
        """return Array.from(doc.querySelectorAll("[data-part=beam-list] .hypothesis .text"),
                             (e) => e.firstChild.textContent);""",
    )
    assert listed == expected
    assert in_viewer(driver, 'return !doc.querySelector("[data-part=beams]").hidden')
    in_viewer(driver, 'doc.querySelectorAll("[data-part=beam-list] .hypothesis")[2].click();')
    assert in_viewer(driver, "return viewer.state.hyp") == 2
    assert in_viewer(driver, f"return {part('output-text')}.textContent") == (expected[2])
    no_errors(driver)


FITS = """const frame = document.getElementById("viewer-frame");
const root = frame.contentDocument.documentElement;
return {frame: frame.getBoundingClientRect().toJSON(), window: document.documentElement.clientWidth,
        content: root.getBoundingClientRect().height, inner: root.scrollHeight - root.clientHeight,
        outer: document.documentElement.scrollHeight - window.innerHeight};"""


def assert_fits(driver) -> None:
    """The viewer spans the window and is as tall as its content: no scrollbar of its own."""
    from selenium.webdriver.support.ui import WebDriverWait

    def fits(d):
        size = d.execute_script(FITS)
        return abs(size["frame"]["height"] - size["content"]) <= 1 and size["inner"] <= 0

    WebDriverWait(driver, 10).until(fits, message=str(driver.execute_script(FITS)))
    size = driver.execute_script(FITS)
    assert size["frame"]["width"] == size["window"] and size["frame"]["left"] == 0, size
    assert size["outer"] > 0, size  # the page's own scrollbar is the one that scrolls it


def test_the_viewer_is_full_width_and_as_tall_as_its_content(server, chromium):
    driver = chromium
    translate_in_page(driver, server.url, "one two three four five six seven", beams=2)
    assert_fits(driver)
    tall = driver.execute_script(FITS)["frame"]["height"]
    in_viewer(driver, 'viewer.showTab("heads");')  # another height: the frame follows it
    assert_fits(driver)
    assert driver.execute_script(FITS)["frame"]["height"] != tall
    driver.set_window_size(900, 1000)  # narrower: the content reflows, the frame follows
    assert_fits(driver)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    in_viewer(driver, 'viewer.showTab("matrix");')
    driver.set_window_size(1360, 1000)
    assert_fits(driver)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1360, min(height, 4000))
    driver.save_screenshot(str(ARTIFACTS / "server-page.png"))
    no_errors(driver)


def test_an_example_fills_the_text_box(server, chromium):
    driver = chromium
    driver.get(server.url + "/")
    buttons = driver.find_elements("css selector", "#examples button")
    assert [b.text for b in buttons] == list(EXAMPLES["en"])  # the model reads "en"
    buttons[1].click()
    assert driver.find_element("id", "source-input").get_property("value") == EXAMPLES["en"][1]
    no_errors(driver)


def test_examples_come_from_the_models_source_language():
    assert examples("dates") == tuple(DATE_FORMAT_EXAMPLES)  # heedful demo's models
    assert examples("de") == EXAMPLES["de"]
    assert examples("src") == () and examples("xx") == ()  # nothing made up
    page = index_page(("src", "tgt"), LIMITS, 1)
    assert 'id="examples"' not in page
    dates = index_page(("dates", "iso"), LIMITS, 1)
    assert dates.count('<button type="button">') == len(DATE_FORMAT_EXAMPLES)


# ---- the API's docs, offline -------------------------------------------------------------------


def test_the_api_docs_render_with_the_network_off(server, chromium):
    from selenium.webdriver.support.ui import WebDriverWait

    driver = chromium
    driver.get(server.url + "/docs")
    post = "#operations-default-translate_translate_post"  # Swagger UI's block for the route
    found = WebDriverWait(driver, 60).until(
        lambda d: d.find_elements("css selector", post), message="/docs drew no operation"
    )
    assert "/translate" in found[0].text
    no_errors(driver)


def test_redoc_is_off_since_it_would_fetch_from_a_cdn(server):
    """FastAPI's /redoc loads ReDoc from a CDN, and ReDoc its logo: offline, /docs is the page."""
    import requests

    assert requests.get(server.url + "/redoc", timeout=10).status_code == 404
