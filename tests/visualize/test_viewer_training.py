"""The attention filter from random to meaningful (issue 28, item 3), in headless Chromium: the
page `heedful attention RUN_DIR --html` writes of a run's snapshots moves through the training
steps with its slider, drawing each step's matrix, the last of them the trained model's own
trace of the input; the view a reader has open stays open from step to step."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from heedful.cli import main
from heedful.inference.translator import Translator
from heedful.visualize.snapshots import read_snapshots
from heedful.visualize.trace import build_trace

from .test_html import assert_no_console_errors, chromium

__all__ = ["chromium"]  # the fixture

IN_FRAME = """const win = document.getElementById("viewer-frame").contentWindow;
const doc = win.document, viewer = win.heedfulViewer;\n"""
MATRIX = (
    IN_FRAME
    + """const c = doc.querySelector('[data-part="matrix-canvas"]');
return {image: c.toDataURL(), weights: viewer.trace.hypotheses[0].cross_attention,
        tokens: viewer.trace.hypotheses[0].tokens, tab: viewer.state.tab,
        calc: viewer.state.calc, layer: doc.querySelector('[data-part="matrix-layer"]').value,
        step: document.getElementById("step").textContent,
        scores: document.getElementById("scores").textContent};"""
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from test_experiment import corpus, write_config

    tmp = tmp_path_factory.mktemp("training-viewer")
    config = write_config(tmp, corpus(tmp), steps=12)
    args = ["train", str(config), "--run-dir", str(tmp / "run"), "--no-progress"]
    result = CliRunner().invoke(main, [*args, "--set", "train.snapshot_sentences=2"])
    assert result.exit_code == 0, result.output
    return tmp / "run"


def open_page(driver, run, tmp_path):
    from selenium.webdriver.support.ui import WebDriverWait

    if isinstance(driver, str):
        pytest.fail(driver)
    page = tmp_path / "training.html"
    result = CliRunner().invoke(main, ["attention", str(run), "--html", str(page)])
    assert result.exit_code == 0 and "inputs traced at steps 0, 4, 8, 12" in result.output
    driver.get_log("browser")
    driver.set_window_size(1360, 1000)
    driver.get(page.as_uri())
    WebDriverWait(driver, 60).until(lambda d: d.execute_script(IN_FRAME + "return !!viewer"))
    return driver


def slide(driver, key) -> dict:
    """Press `key` on the slider, as a reader does, and wait for the next step's viewer."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.execute_script('document.getElementById("viewer-frame").contentWindow.old = 1;')
    driver.find_element("id", "step-slider").send_keys(key)
    fresh = IN_FRAME + "return !win.old && !!viewer && !!doc.querySelector('canvas');"
    WebDriverWait(driver, 60).until(lambda d: d.execute_script(fresh))
    return driver.execute_script(MATRIX)


def mean_of_heads(weights, layer: int) -> np.ndarray:
    """What the matrix view shows at first: that layer's heads averaged, (T, S)."""
    return np.asarray(weights, dtype=np.float64)[:, layer].mean(axis=1)


def test_the_slider_goes_from_random_to_the_trained_models_trace(chromium, run, tmp_path):
    from selenium.webdriver.common.keys import Keys

    driver = open_page(chromium, run, tmp_path)
    data = read_snapshots(run)
    shown = [driver.execute_script(MATRIX)]
    assert "before training" in shown[0]["scores"] and shown[0]["step"].startswith("step 0 ")
    for _ in data["snapshots"][1:]:
        shown.append(slide(driver, Keys.ARROW_RIGHT))
    steps = [s["step"].split(" (")[0] for s in shown]
    assert steps == [f"step {s['step']}" for s in data["snapshots"]]
    assert all(s["scores"].startswith("validation: BLEU") for s in shown[1:])
    layer = int(shown[0]["layer"])
    matrices = [mean_of_heads(s["weights"], layer) for s in shown]
    differ = [
        i
        for i in range(1, len(shown))
        if shown[i]["image"] != shown[i - 1]["image"]
        and (
            matrices[i].shape != matrices[i - 1].shape
            or np.abs(matrices[i] - matrices[i - 1]).max() > 1e-3
        )
    ]
    assert len(differ) + 1 >= 3, differ  # at least three steps, each drawn unlike the last
    source = data["inputs"][0]
    final = build_trace(Translator.load(run / "latest"), source).to_dict()["hypotheses"][0]
    assert shown[-1]["tokens"] == final["tokens"]
    np.testing.assert_allclose(
        np.asarray(shown[-1]["weights"], dtype=np.float64),
        np.asarray(final["cross_attention"], dtype=np.float64),
        rtol=0,
        atol=2e-5,
    )
    assert_no_console_errors(driver)


def test_the_view_open_stays_open_from_step_to_step(chromium, run, tmp_path):
    from selenium.webdriver.common.keys import Keys

    driver = open_page(chromium, run, tmp_path)
    driver.execute_script(IN_FRAME + "viewer.openInViews('cross', 0, 1);")
    driver.execute_script(IN_FRAME + "viewer.showTab('heads'); viewer.openCalc('cross', 0, 1, 2);")
    after = slide(driver, Keys.ARROW_RIGHT)
    assert after["tab"] == "heads" and after["layer"] == "0"
    assert after["calc"] == {"kind": "cross", "layer": 0, "head": 1, "position": 2}
    title = IN_FRAME + "return doc.querySelector('[data-part=calc-title]').textContent;"
    assert "layer 1, head 2" in driver.execute_script(title)
    second = driver.find_element("id", "input")
    second.send_keys(Keys.ARROW_DOWN)  # the other input: the same view of its trace
    driver.execute_script('document.getElementById("input").dispatchEvent(new Event("change"));')
    assert driver.execute_script("return heedfulSnapshots.shown.input") == 1
    assert_no_console_errors(driver)
