"""The viewer's "RNN, step by step" view in headless Chromium: the encoder states h̄_s appear
one per step under their tokens, then each decoder step shows h_t, the weights over the h̄_s
and c_t, all equal to the trace's numbers (the committed golden RNN model)."""

from __future__ import annotations

import numpy as np
import pytest

from .test_html import assert_no_console_errors, chromium, open_page, open_viewers, part, screenshot
from .test_viewer_calc import shown_vector, traces
from .test_viewer_views import choose

__all__ = ["chromium", "traces"]  # fixtures: the browser, traces of the golden models

SHOWN = """
const cols = arguments[0].querySelectorAll('[data-part="anim-source"] .anim-col');
return Array.from(cols, (col) => ({
    shown: col.dataset.shown === "true",
    visible: col.querySelector("canvas").style.visibility !== "hidden",
    vector: col.dataset.shown ? JSON.parse(col.querySelector("canvas").dataset.vector) : null,
    weight: col.dataset.weight === undefined ? null : col.dataset.weight,
    opacity: col.style.opacity === "" ? null : Number(col.style.opacity),
}));
"""


def shown_columns(driver, root=None) -> list[dict]:
    root = root or driver.find_element("css selector", ".heedful-viewer")
    return driver.execute_script(SHOWN, root)


def anim_state(driver) -> dict:
    return driver.execute_script(
        "const a = window.heedfulViewer.state.anim;"
        "return {pos: a.pos, shown: a.shown, step: a.step, weights: a.weights, speed: a.speed,"
        " interval: a.interval, timerMs: a.timerMs, playing: a.timer !== null};"
    )


def click(driver, name):
    driver.find_element(*part(name)).click()


def test_encoder_states_appear_one_per_step_then_the_decoder_weighs_them(
    chromium, tmp_path, traces
):
    trace = traces["rnn"]
    hyp = trace["hypotheses"][0]
    states = np.asarray(trace["internals"]["encoder_states"], np.float64)  # (S, N)
    S, T = len(trace["source_tokens"]), len(hyp["tokens"])
    driver = open_page(chromium, tmp_path, trace, "rnn-steps")
    click(driver, "tab-anim")
    assert driver.find_element(*part("anim-body")).is_displayed()
    assert not driver.find_element(*part("anim-note")).is_displayed()
    assert [c["shown"] or c["visible"] for c in shown_columns(driver)] == [False] * S
    assert not driver.find_element(*part("anim-prev")).is_enabled()

    for k in range(1, S + 1):  # encoder step k: exactly h̄_1 … h̄_k, each its own numbers
        click(driver, "anim-next")
        columns = shown_columns(driver)
        assert [c["shown"] for c in columns] == [s < k for s in range(S)]
        assert [c["visible"] for c in columns] == [s < k for s in range(S)]
        for s in range(k):
            np.testing.assert_array_equal(columns[s]["vector"], states[s])
        assert all(c["weight"] is None for c in columns)  # no weights before the decoder runs
        assert driver.find_element(*part("anim-status")).text.startswith(f"Encoder step {k} of")
        assert not driver.find_element(*part("anim-decoder")).is_displayed()
    screenshot(driver, "rnn-steps-encoder")

    for t in range(T):  # decoder step t: h_t, a_t over every h̄_s, c_t
        click(driver, "anim-next")
        assert anim_state(driver)["step"] == t
        columns = shown_columns(driver)
        assert all(c["shown"] for c in columns)
        weights = np.array([float(c["weight"]) for c in columns])
        expected = np.asarray(hyp["cross_attention"][t][0][0], np.float64)
        np.testing.assert_allclose(weights, expected, rtol=0, atol=1e-9)
        np.testing.assert_allclose(anim_state(driver)["weights"], expected, rtol=0, atol=1e-9)
        opacities = [c["opacity"] for c in columns]  # emphasis follows the weights
        assert opacities[int(expected.argmax())] == 1.0
        assert np.all(np.diff(np.asarray(opacities)[np.argsort(expected)]) >= 0)
        h_t = shown_vector(driver, "anim-h")
        np.testing.assert_array_equal(h_t, hyp["rnn"]["decoder_states"][t])
        c_t = shown_vector(driver, "anim-c")
        np.testing.assert_array_equal(c_t, hyp["rnn"]["contexts"][t])
        np.testing.assert_allclose(expected @ states, c_t, atol=1e-4)  # c_t = Σ_s a_t(s) h̄_s
        current = driver.find_element("css selector", "[data-part=anim-output] .tok.current")
        assert current.text == hyp["tokens"][t].replace(" ", "\u2423")
    assert not driver.find_element(*part("anim-next")).is_enabled()
    screenshot(driver, "rnn-steps-decoder")

    for _ in range(T):  # ◀ goes back through the decoder steps to the whole encoder
        click(driver, "anim-prev")
    assert anim_state(driver)["step"] is None
    assert [c["shown"] for c in shown_columns(driver)] == [True] * S
    click(driver, "anim-prev")
    assert [c["shown"] for c in shown_columns(driver)] == [True] * (S - 1) + [False]
    assert_no_console_errors(driver)


def test_play_pause_and_the_speed_control_set_the_interval(chromium, tmp_path, traces):
    driver = open_page(chromium, tmp_path, traces["rnn"], "rnn-steps-speed")
    click(driver, "tab-anim")
    state = anim_state(driver)
    assert (state["speed"], state["interval"], state["playing"]) == (1, 900, False)
    choose(driver, "anim-speed", 2)
    state = anim_state(driver)
    assert (state["speed"], state["interval"], state["timerMs"]) == (2, 450, None)
    play = driver.find_element(*part("anim-play"))
    play.click()
    state = anim_state(driver)
    assert state["playing"] and state["timerMs"] == 450
    assert play.get_attribute("aria-pressed") == "true" and "Pause" in play.text
    choose(driver, "anim-speed", 0.5)  # while playing: the timer restarts at the new pace
    state = anim_state(driver)
    assert state["playing"] and (state["interval"], state["timerMs"]) == (1800, 1800)
    play.click()
    state = anim_state(driver)
    assert not state["playing"] and state["timerMs"] is None
    assert play.get_attribute("aria-pressed") == "false" and "Play" in play.text
    # a step button pauses a playing animation and moves one step
    choose(driver, "anim-speed", 4)
    play.click()
    pos = anim_state(driver)["pos"]
    click(driver, "anim-next")
    state = anim_state(driver)
    assert not state["playing"] and state["pos"] in (pos + 1, pos + 2)  # a tick may fall between
    assert_no_console_errors(driver)


def test_play_runs_to_the_end_and_stops(chromium, tmp_path, traces):
    from selenium.webdriver.support.ui import WebDriverWait

    trace = traces["rnn"]
    last = len(trace["source_tokens"]) + len(trace["hypotheses"][0]["tokens"])
    driver = open_page(chromium, tmp_path, trace, "rnn-steps-play")
    click(driver, "tab-anim")
    choose(driver, "anim-speed", 4)
    click(driver, "anim-play")
    WebDriverWait(driver, 60).until(lambda d: not anim_state(d)["playing"])
    state = anim_state(driver)
    assert state["pos"] == last and state["step"] == len(trace["hypotheses"][0]["tokens"]) - 1
    assert_no_console_errors(driver)


@pytest.mark.parametrize("name", ["transformer", "rnn-without-internals"])
def test_the_view_says_what_it_needs(chromium, tmp_path, traces, name):
    if name == "transformer":
        trace, says = traces["transformer"], "for RNN models"
    else:
        trace = {**traces["rnn"], "internals": None}
        trace["hypotheses"] = [{**h, "internals": None} for h in trace["hypotheses"]]
        says = "internals=True"
    driver = open_page(chromium, tmp_path, trace, f"rnn-steps-{name}")
    assert "unavailable" in driver.find_element(*part("tab-anim")).get_attribute("class")
    click(driver, "tab-anim")
    note = driver.find_element(*part("anim-note"))
    assert note.is_displayed() and says in note.text
    assert not driver.find_element(*part("anim-body")).is_displayed()
    assert_no_console_errors(driver)


def test_two_viewers_step_on_their_own(chromium, tmp_path, traces):
    roots = open_viewers(chromium, tmp_path, [traces["rnn"]] * 2, "anim")
    for _ in range(3):
        roots[0].find_element("css selector", '[data-part="anim-next"]').click()
    roots[1].find_element("css selector", '[data-part="anim-next"]').click()
    shown = [sum(c["shown"] for c in shown_columns(chromium, root)) for root in roots]
    assert shown == [3, 1]
    assert_no_console_errors(chromium)


def test_without_attention_the_steps_say_no_context_is_weighed(chromium, tmp_path, traces):
    """Issue 28: the no-attention RNN's decoder steps said "h_t weighs h̄ into c_t" beside the
    note that there is no c_t; they now say where the source reached the decoder."""
    rnn = traces["rnn"]
    trace = {**rnn, "model": {**rnn["model"], "attention": "none"}}
    trace["hypotheses"] = [
        {**h, "cross_attention": None, "rnn": {**h["rnn"], "contexts": None, "scores": None}}
        for h in rnn["hypotheses"]
    ]
    driver = open_page(chromium, tmp_path, trace, "rnn-steps-none")
    click(driver, "tab-anim")
    for _ in range(len(trace["source_tokens"]) + 1):  # the encoder, then decoder step 1
        click(driver, "anim-next")
    status = driver.find_element(*part("anim-status")).text
    assert status.startswith("Decoder step 1 of") and "c_t" not in status and "weighs" not in status
    assert "encoder's final state" in status
    assert "no context c_t" in driver.find_element(*part("anim-decoder-note")).text
    assert_no_console_errors(driver)
