"""The self-contained HTML viewer: Python checks of the page, then real headless Chromium.

The browser tests need the Debian packages `chromium` and `chromium-driver` (/usr/bin/chromium,
/usr/bin/chromedriver) and the `selenium` test extra; without them they fail, never skip.
Screenshots of every view are written to tests/artifacts/.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from heedful.visualize.html import render_html

WORDS = ["man", "rides", "a", "bike", "the", "dog", "runs", "in", "park", "green", "house", "sees"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL_HINT = (
    "install the browser with `apt-get install -y chromium chromium-driver` and the driver "
    "bindings with `pip install -e '.[test]'` (selenium)"
)


# ---- synthetic traces (docs/trace-schema.md), independent of heedful.visualize.trace ----------


def _distributions(rng, shape, n, causal=False):
    """Random attention rows of length n (Dirichlet(0.3): peaked, like trained attention)."""
    weights = rng.gamma(0.3, size=(*shape, n)) + 1e-12
    if causal:  # row i may only attend to positions 0..i
        weights = weights * np.tril(np.ones((n, n)))
    weights = weights / weights.sum(-1, keepdims=True)
    return np.round(weights, 5).tolist()


def _top_k(rng, tokens, k):
    steps = []
    for token in tokens:
        probs = np.sort(rng.dirichlet(np.full(k + 1, 0.5)))[::-1][:k]
        others = [w for w in WORDS if "▁" + w != token][: k - 1]
        names = [token] + ["▁" + w for w in others]
        steps.append([{"token": t, "prob": round(float(p), 5)} for t, p in zip(names, probs)])
    return steps


def synthetic_trace(
    arch="transformer",
    attention="multi-head",
    src_len=7,
    tgt_len=6,
    layers=(2, 2),
    heads=4,
    num_hyps=1,
    top_k=4,
    hidden=16,
    source_tokens=None,
    seed=0,
):
    """A trace with random but valid attention: every row non-negative and summing to 1."""
    rng = np.random.default_rng(seed)
    src = source_tokens or ["▁" + w for w in rng.choice(WORDS, src_len)]
    is_rnn = arch == "rnn"
    enc_layers, dec_layers = (1, 1) if is_rnn else layers
    heads = 1 if is_rnn else heads
    hypotheses = []
    for k in range(num_hyps):
        tokens = ["▁" + w for w in rng.choice(WORDS, tgt_len - 1)] + ["</s>"]
        T, S = len(tokens), len(src)
        hyp = {
            "text": " ".join(t.lstrip("▁") for t in tokens[:-1]),
            "tokens": tokens,
            "score": round(-1.0 - k - float(rng.uniform()), 5),
            "finished": k != num_hyps - 1 or num_hyps == 1,
            "cross_attention": None,
            "decoder_self_attention": None,
            "top_k": _top_k(rng, tokens, top_k),
            "rnn": None,
        }
        if not is_rnn:
            hyp["cross_attention"] = _distributions(rng, (T, dec_layers, heads), S)
            hyp["decoder_self_attention"] = _distributions(rng, (dec_layers, heads, T), T, True)
        else:
            states = np.round(np.tanh(rng.normal(size=(T, hidden))), 5).tolist()
            hyp["rnn"] = {"decoder_states": states, "contexts": None, "scores": None}
            if attention != "none":
                scores = rng.normal(scale=2.0, size=(T, S))
                weights = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
                hyp["cross_attention"] = np.round(weights[:, None, None, :], 5).tolist()
                hyp["rnn"]["scores"] = np.round(scores, 5).tolist()
                contexts = np.round(np.tanh(rng.normal(size=(T, hidden))), 5).tolist()
                hyp["rnn"]["contexts"] = contexts
        hypotheses.append(hyp)
    return {
        "format": "heedful-trace",
        "version": 1,
        "model": {
            "arch": arch,
            "attention": attention,
            "encoder_layers": enc_layers,
            "decoder_layers": dec_layers,
            "heads": heads,
        },
        "source": " ".join(t.lstrip("▁") for t in src),
        "source_tokens": src,
        "search": {"num_beams": num_hyps, "length_penalty": 1.0},
        "encoder_self_attention": None
        if is_rnn
        else _distributions(rng, (enc_layers, heads, len(src)), len(src)),
        "hypotheses": hypotheses,
    }


def embedded_json(page: str) -> dict:
    match = re.search(
        r'<script type="application/json" data-part="trace-data">(.*?)</script>', page, re.S
    )
    assert match, "no embedded trace"

    def no_constants(name):
        raise AssertionError(f"{name} is not JSON")

    return json.loads(match.group(1), parse_constant=no_constants)


# ---- the page, checked from Python ------------------------------------------------------------


def test_synthetic_traces_follow_the_schema():
    for trace in (synthetic_trace(num_hyps=2), synthetic_trace(arch="rnn", attention="bahdanau")):
        for hyp in trace["hypotheses"]:
            rows = np.asarray(hyp["cross_attention"])
            assert rows.shape[0] == len(hyp["tokens"]) and rows.shape[-1] == 7
            np.testing.assert_allclose(rows.sum(-1), 1.0, atol=1e-4)
            assert (rows >= 0).all()
    dec = np.asarray(synthetic_trace()["hypotheses"][0]["decoder_self_attention"])
    assert (np.triu(dec, k=1) == 0).all()  # causal: the future is exactly 0


def test_page_is_one_offline_file():
    page = render_html(synthetic_trace(num_hyps=3))
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count("<html") == 1
    for external in ("http://", "https://", "//cdn", "<link", "@import", "url("):
        assert external not in page, external
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:[a-z]+:)?//""", page, re.I)
    assert not re.search(r"<script[^>]*\bsrc=", page, re.I)
    # the CSS and JS are inlined, not referenced
    assert 'data-part="matrix-canvas"' in page
    assert "window.heedfulViewer" in page
    assert "<style>" in page


def test_trace_is_embedded_compactly_and_parses_back():
    trace = synthetic_trace(num_hyps=2)
    page = render_html(trace)
    assert embedded_json(page) == trace
    match = re.search(r'data-part="trace-data">(.*?)</script>', page, re.S)
    assert "\n" not in match.group(1) and ", " not in match.group(1)  # no indentation


def test_script_end_tag_in_a_token_is_escaped():
    evil = ["</script><script>alert(1)</script>", "<!--", "a&b", "\u2028", "</SCRIPT >"]
    trace = synthetic_trace(source_tokens=evil + ["▁ok"])
    trace["source"] = "</script> <!-- a&b"
    page = render_html(trace)
    # exactly our two scripts: the data and the viewer, whatever the tokens say
    assert len(re.findall(r"</script", page, re.I)) == 2
    assert "<!--" not in page
    assert embedded_json(page)["source_tokens"] == evil + ["▁ok"]
    assert "<title>&lt;/script&gt; &lt;!-- a&amp;b → " in page


def test_assets_cannot_end_their_own_elements():
    page = render_html(synthetic_trace())
    viewer_js = page.split("<script>\n", 1)[1]
    assert "</script" not in viewer_js.rsplit("</script>", 1)[0].lower()
    assert page.lower().count("</style") == 2  # the page's body rule and the viewer's CSS


def test_size_of_a_20_token_sentence_with_3_plus_3_layers_4_heads_is_under_2_mb():
    trace = synthetic_trace(src_len=20, tgt_len=20, layers=(3, 3), heads=4, num_hyps=5)
    size = len(render_html(trace).encode("utf-8"))
    assert size < 2_000_000, f"{size / 1e6:.2f} MB"


def test_accepts_an_object_with_to_dict():
    trace = synthetic_trace()

    class TraceLike:
        def to_dict(self):
            return trace

    assert render_html(TraceLike()) == render_html(trace)
    with pytest.raises(TypeError, match="to_dict"):
        render_html(["not", "a", "trace"])


def test_non_finite_numbers_become_null():
    trace = synthetic_trace(arch="rnn", attention="luong-dot")
    trace["hypotheses"][0]["rnn"]["scores"][0][0] = -math.inf
    data = embedded_json(render_html(trace))
    assert data["hypotheses"][0]["rnn"]["scores"][0][0] is None


# ---- the page in real headless Chromium -------------------------------------------------------


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    """A headless Chromium that cannot reach the network, or the reason there is none.

    The reason is returned, not raised, so that every browser test FAILS with it (see `open_page`)
    instead of erroring in setup or being skipped.
    """
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing:
        yield f"{', '.join(missing)} not found: {INSTALL_HINT}"
        return
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError as error:
        yield f"selenium is not importable ({error}): {INSTALL_HINT}"
        return
    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--proxy-server=127.0.0.1:9",  # a closed port: any fetch fails
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--window-size=1360,1000",
        "--force-device-scale-factor=1",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    except Exception as error:  # noqa: BLE001 - any start-up failure is the reason to report
        yield f"Chromium did not start ({error}): {INSTALL_HINT}"
        return
    driver.set_page_load_timeout(120)
    driver.set_script_timeout(60)
    yield driver
    driver.quit()


def part(name: str) -> tuple[str, str]:
    """A locator of a viewer's part: its elements are named by data-part, not by id."""
    return "css selector", f'[data-part="{name}"]'


def open_page(chromium, tmp_path, trace, name="trace"):
    """Write the page for `trace`, load it from file:// and wait until the viewer has drawn."""
    if isinstance(chromium, str):
        pytest.fail(chromium)
    from selenium.webdriver.support.ui import WebDriverWait

    path = tmp_path / f"{name}.html"
    path.write_text(render_html(trace), encoding="utf-8")
    chromium.get_log("browser")  # drop messages of earlier pages
    chromium.set_window_size(1360, 1000)
    chromium.get(path.as_uri())
    WebDriverWait(chromium, 60).until(lambda d: d.execute_script("return !!window.heedfulViewer"))
    return chromium


def open_viewers(chromium, tmp_path, traces: list, tab: str) -> list:
    """A page with one viewer per trace (as a notebook shows several), each on `tab`: the
    viewers' root elements."""
    if isinstance(chromium, str):
        pytest.fail(chromium)
    from heedful.visualize.html import render_fragment

    body = "".join(render_fragment(trace) for trace in traces)
    path = tmp_path / f"viewers-{tab}.html"
    path.write_text(f'<!DOCTYPE html><meta charset="utf-8"><body>{body}</body>', encoding="utf-8")
    chromium.get(path.as_uri())
    roots = chromium.find_elements("css selector", ".heedful-viewer")
    for root in roots:
        root.find_element("css selector", f'[data-part="tab-{tab}"]').click()
    return roots


def assert_no_console_errors(driver):
    severe = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, severe


def click_tab(driver, name):
    driver.find_element(*part(f"tab-{name}")).click()
    assert driver.find_element(*part(f"panel-{name}")).is_displayed()


def screenshot(driver, name, full_page=True):
    """Save the page as an artifact; the viewport is stretched to the document's height unless
    `full_page` is false (a tooltip shows where the mouse is only in the current viewport)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    if not full_page:
        driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
        return
    height = 1000
    for _ in range(3):  # parts sized in vh grow with the viewport: measure again
        metrics = {"width": 1360, "height": height, "deviceScaleFactor": 1, "mobile": False}
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        needed = driver.execute_script("return document.documentElement.scrollHeight")
        if needed <= height:
            break
        height = min(needed, 6000)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def canvas_colours(driver, canvas_id):
    """The number of distinct colours among sampled pixels of a canvas, and its size."""
    return driver.execute_script(
        """
        const canvas = document.querySelector('[data-part="' + arguments[0] + '"]');
        const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
        const colours = new Set();
        for (let i = 0; i < data.length; i += 4 * 7) {
            colours.add(data[i] + "," + data[i + 1] + "," + data[i + 2]);
        }
        return [colours.size, canvas.width, canvas.height];
        """,
        canvas_id,
    )


def test_alignment_matrix_draws_and_shows_weights_on_hover(chromium, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import Select

    trace = synthetic_trace(src_len=9, tgt_len=8, num_hyps=3)
    driver = open_page(chromium, tmp_path, trace)
    assert driver.find_element(*part("panel-matrix")).is_displayed()
    colours, width, height = canvas_colours(driver, "matrix-canvas")
    assert width > 200 and height > 200 and colours >= 10, (colours, width, height)
    screenshot(driver, "transformer-matrix")

    # head 2 of the last layer: the tooltip of cell (output 3, source 5) names both and the weight
    Select(driver.find_element(*part("matrix-head"))).select_by_value("1")
    grid = driver.execute_script(
        "const c = document.querySelector('[data-part=matrix-canvas]'), g = c._grid;"
        "return [g.left, g.top, g.cell, c.clientWidth, c.clientHeight];"
    )
    left, top, cell, w, h = grid
    t, s = 2, 4
    canvas = driver.find_element(*part("matrix-canvas"))
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    x = left + s * cell + cell / 2 - w / 2
    y = top + t * cell + cell / 2 - h / 2
    ActionChains(driver).move_to_element_with_offset(canvas, int(x), int(y)).perform()
    tip = driver.find_element(*part("tooltip"))
    assert tip.is_displayed()
    weight = trace["hypotheses"][0]["cross_attention"][t][1][1][s]
    assert trace["source_tokens"][s] in tip.text and trace["hypotheses"][0]["tokens"][t] in tip.text
    assert f"{weight:.4f}" in tip.text
    screenshot(driver, "transformer-matrix-tooltip", full_page=False)
    assert_no_console_errors(driver)


def test_head_view_toggles_heads(chromium, tmp_path):
    driver = open_page(chromium, tmp_path, synthetic_trace(src_len=9, tgt_len=8, heads=4))
    click_tab(driver, "heads")
    view = driver.find_element(*part("head-view"))
    toggles = driver.find_elements("css selector", ".head-toggle")
    assert len(toggles) == 4 and all(t.is_selected() for t in toggles)
    lines_before = int(view.get_attribute("data-line-count"))
    paths_before = len(driver.find_elements("css selector", "[data-part=head-view] path.attn-line"))
    assert lines_before > 0 and paths_before > 0
    screenshot(driver, "transformer-heads")

    from selenium.webdriver.common.action_chains import ActionChains

    # hovering an output token keeps only its lines: at most one per head and source token
    token = driver.find_element("css selector", '[data-part=head-view] text[data-side="right"]')
    ActionChains(driver).move_to_element(token).perform()
    assert 0 < int(view.get_attribute("data-line-count")) <= 4 * 9
    ActionChains(driver).move_to_element(driver.find_element(*part("hv-all"))).perform()
    assert int(view.get_attribute("data-line-count")) == lines_before

    toggles[0].click()
    lines_after = int(view.get_attribute("data-line-count"))
    paths_after = len(driver.find_elements("css selector", "[data-part=head-view] path.attn-line"))
    assert lines_after < lines_before and paths_after < paths_before
    assert not driver.find_elements("css selector", '[data-part=head-view] g[data-head="0"]')
    driver.find_element(*part("hv-none")).click()
    assert int(view.get_attribute("data-line-count")) == 0
    driver.find_element(*part("hv-all")).click()
    assert int(view.get_attribute("data-line-count")) == lines_before
    assert_no_console_errors(driver)


def test_self_attention_views(chromium, tmp_path):
    driver = open_page(chromium, tmp_path, synthetic_trace(src_len=9, tgt_len=8))
    for name in ("enc", "dec"):
        click_tab(driver, name)
        colours, _, _ = canvas_colours(driver, f"{name}-canvas")
        assert colours >= 10, name
        assert not driver.find_element(*part(f"{name}-note")).is_displayed()
        screenshot(driver, f"transformer-{name}")
    assert_no_console_errors(driver)


def test_replay_slider_and_play_button(chromium, tmp_path):
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    trace = synthetic_trace(src_len=9, tgt_len=8)
    driver = open_page(chromium, tmp_path, trace)
    click_tab(driver, "replay")
    current = driver.find_element(*part("current-step"))
    assert current.text.startswith("Step 1 of 8")
    driver.find_element(*part("step-slider")).send_keys(Keys.ARROW_RIGHT, Keys.ARROW_RIGHT)
    assert current.text.startswith("Step 3 of 8")
    tokens = trace["hypotheses"][0]["tokens"]
    assert (
        driver.find_element("css selector", "[data-part=replay-output] .tok.current").text
        == tokens[2]
    )
    assert len(driver.find_elements("css selector", "[data-part=replay-source] .source-bar")) == 9
    assert len(driver.find_elements("css selector", "[data-part=replay-topk] .tok")) == 4
    assert (
        driver.find_element("css selector", "[data-part=replay-topk] .tok.chosen").text == tokens[2]
    )
    assert not driver.find_element(*part("rnn-panel")).is_displayed()
    screenshot(driver, "transformer-replay")

    driver.find_element(*part("play-button")).click()
    WebDriverWait(driver, 10).until(lambda d: current.text.startswith("Step 4 of 8"))
    driver.find_element(*part("play-button")).click()  # pause
    assert driver.find_element(*part("play-button")).get_attribute("aria-pressed") == "false"
    assert_no_console_errors(driver)


def test_selecting_a_beam_hypothesis_switches_every_view(chromium, tmp_path):
    trace = synthetic_trace(src_len=9, tgt_len=8, num_hyps=4)
    driver = open_page(chromium, tmp_path, trace)
    items = driver.find_elements("css selector", "[data-part=beam-list] .hypothesis")
    assert len(items) == 4
    assert trace["hypotheses"][2]["text"] in items[2].text
    pixels = "return document.querySelector('[data-part=matrix-canvas]').toDataURL()"
    before = driver.execute_script(pixels)
    items[2].click()
    assert driver.find_element(*part("output-text")).text == trace["hypotheses"][2]["text"]
    items = driver.find_elements("css selector", "[data-part=beam-list] .hypothesis")  # redrawn
    assert [i.get_attribute("aria-pressed") for i in items] == ["false", "false", "true", "false"]
    assert driver.execute_script(pixels) != before
    screenshot(driver, "transformer-beams")
    click_tab(driver, "replay")
    shown = [e.text for e in driver.find_elements("css selector", "[data-part=replay-output] .tok")]
    assert shown == trace["hypotheses"][2]["tokens"]
    assert_no_console_errors(driver)


def test_rnn_trace_shows_states_scores_and_no_self_attention(chromium, tmp_path):
    trace = synthetic_trace(arch="rnn", attention="bahdanau", src_len=9, tgt_len=8, hidden=32)
    driver = open_page(chromium, tmp_path, trace, "rnn")
    colours, _, _ = canvas_colours(driver, "matrix-canvas")
    assert colours >= 10
    screenshot(driver, "rnn-matrix")
    click_tab(driver, "replay")
    for strip in ("h-strip", "c-strip"):
        assert driver.find_element(*part(strip)).is_displayed()
        colours, width, _ = canvas_colours(driver, strip)
        assert width >= 32 and colours >= 8, (strip, colours, width)
    rows = driver.find_elements("css selector", "[data-part=rnn-scores] tr")
    assert len(rows) == 1 + 9  # header + one per source token
    screenshot(driver, "rnn-replay")
    for name in ("enc", "dec"):
        click_tab(driver, name)
        note = driver.find_element(*part(f"{name}-note"))
        assert note.is_displayed() and "RNN" in note.text
        assert not driver.find_element(*part(f"{name}-canvas")).is_displayed()
    screenshot(driver, "rnn-dec")
    assert_no_console_errors(driver)


def test_rnn_without_attention_still_replays(chromium, tmp_path):
    trace = synthetic_trace(arch="rnn", attention="none", src_len=6, tgt_len=5)
    driver = open_page(chromium, tmp_path, trace, "rnn-none")
    assert driver.find_element(*part("panel-replay")).is_displayed()  # nothing else to show
    assert driver.find_element(*part("h-strip")).is_displayed()
    assert driver.find_element(*part("c-strip-note")).is_displayed()
    assert driver.find_element(*part("replay-attention-note")).is_displayed()
    click_tab(driver, "matrix")
    assert driver.find_element(*part("matrix-note")).is_displayed()
    assert_no_console_errors(driver)


def test_hostile_tokens_are_shown_as_text(chromium, tmp_path):
    evil = ["</script><script>window.pwned=1</script>", "<img src=x onerror=window.pwned=1>"]
    trace = synthetic_trace(source_tokens=evil + ["▁ok"], tgt_len=4)
    driver = open_page(chromium, tmp_path, trace, "hostile")
    assert driver.execute_script("return document.scripts.length") == 2
    assert driver.execute_script("return window.heedfulViewer.trace.source_tokens") == evil + [
        "▁ok"
    ]
    click_tab(driver, "replay")
    chips = driver.find_elements("css selector", "[data-part=replay-source] .tok")
    assert [c.text for c in chips] == [e.replace(" ", "␣") for e in evil] + ["▁ok"]
    assert driver.execute_script("return window.pwned === undefined")
    assert_no_console_errors(driver)


def test_100_by_100_tokens_6_layers_8_heads_stays_responsive(chromium, tmp_path):
    trace = synthetic_trace(src_len=100, tgt_len=100, layers=(6, 6), heads=8, seed=1)
    driver = open_page(chromium, tmp_path, trace, "large")
    timings = driver.execute_script(
        """
        const viewer = window.heedfulViewer, ms = {};
        const time = (name, action) => {
            const t0 = performance.now();
            action();
            ms[name] = performance.now() - t0;
        };
        const change = (id, value) => {
            const e = document.querySelector('[data-part="' + id + '"]');
            e.value = value;
            e.dispatchEvent(new Event("change"));
        };
        time("matrix: another layer, head average", () => change("matrix-layer", "2"));
        time("matrix: one head", () => change("matrix-head", "5"));
        time("head view: 8 heads", () => viewer.showTab("heads"));
        viewer.showTab("replay");
        const slider = document.querySelector("[data-part=step-slider]");
        time("replay: slider move", () => {
            slider.value = "57";
            slider.dispatchEvent(new Event("input"));
        });
        time("replay: another layer, head average", () => change("replay-layer", "0"));
        time("encoder self-attention", () => viewer.showTab("enc"));
        time("model view: 144 thumbnails", () => viewer.showTab("model"));
        ms.step = document.querySelector("[data-part=current-step]").textContent;
        return ms;
        """
    )
    step = timings.pop("step")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "large-timings-ms.json").write_text(json.dumps(timings, indent=1))
    assert step.startswith("Step 58 of 100"), step
    slow = {name: ms for name, ms in timings.items() if ms >= 1000}
    assert not slow, timings
    click_tab(driver, "matrix")
    colours, width, _ = canvas_colours(driver, "matrix-canvas")
    assert colours >= 10 and width > 600
    screenshot(driver, "large-matrix")
    assert_no_console_errors(driver)
