"""A Hugging Face model directory through every surface: the command line (translate,
evaluate, attention, explain), the HTTP server and the viewer in headless Chromium."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from server.helpers import client  # the server's tests' TestClient, once the model has loaded
from visualize.test_html import assert_no_console_errors, open_page, part
from visualize.test_html import chromium as chromium  # the fixture: a headless Chromium

from heedful.cli import main
from heedful.visualize.trace import Trace, build_trace

from .builders import TEXTS
from .conftest import ARCHS


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], prog_name="heedful")
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("arch", ARCHS)
def test_the_commands_take_a_hugging_face_directory(hf_dirs, translators, tmp_path, arch):
    model = hf_dirs[arch]
    source = tmp_path / "src.txt"
    source.write_text("\n".join(TEXTS[:3]) + "\n", encoding="utf-8")
    expected = [t.text for t in translators[arch].translate(TEXTS[:3], num_beams=2)]
    out = run("translate", model, "--input", source, "--beam", 2)
    assert out.split("\n")[:-1] == expected  # not splitlines: byte-level BPE writes \x1c
    run("attention", model, TEXTS[0], "--json", tmp_path / "t.json", "--html", tmp_path / "v.html")
    trace = Trace.load(tmp_path / "t.json")
    assert trace.source_tokens == translators[arch].src_tokenizer.tokens(TEXTS[0])
    text = run("explain", model, TEXTS[0], "--kind", "cross", "--layer", 1, "--head", 2)
    assert "## 5. Softmax" in text and arch in text
    reference = tmp_path / "ref.txt"
    reference.write_text("\n".join(expected) + "\n", encoding="utf-8")
    scores = run("evaluate", model, "--src", source, "--ref", reference, "--beam", 2)
    assert "BLEU" in scores


@pytest.mark.parametrize("arch", ["marian", "m2m_100"])
def test_the_server_translates_and_returns_the_trace(hf_dirs, translators, arch):
    translator = translators[arch]
    src, tgt = translator.languages
    with client(hf_dirs[arch]) as app:
        body = {"q": TEXTS[0], "source": src, "target": tgt, "return_attention": True}
        answer = app.post("/translate", json=body)
        assert answer.status_code == 200, answer.text
        data = answer.json()
        [expected] = translator.translate([TEXTS[0]])
        assert data["translatedText"] == expected.text
        trace = Trace.from_dict(data["attention"])
        cross = np.asarray(trace.hypotheses[0].cross_attention)  # (T, L, H, S)
        assert cross.shape[1:] == (2, 4, len(trace.source_tokens))
        np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-4)
        assert app.get("/languages").json()[0]["code"] == src


def test_the_viewer_opens_a_marian_trace_in_chromium(translators, tmp_path, chromium):  # noqa: F811
    trace = build_trace(translators["marian"], TEXTS[0], num_beams=3, n_best=3)
    driver = open_page(chromium, tmp_path, trace.to_dict(), "marian")
    assert driver.find_element(*part("panel-matrix")).is_displayed()
    assert driver.find_element(*part("source-text")).text == TEXTS[0]
    assert driver.find_element(*part("output-text")).text == trace.hypotheses[0].text
    beams = driver.find_elements("css selector", '[data-part="beam-list"] li')
    assert len(beams) == 3  # the n-best of our beam search, shown with their scores
    driver.find_element(*part("tab-heads")).click()
    assert driver.find_element(*part("head-view")).is_displayed()
    assert_no_console_errors(driver)
