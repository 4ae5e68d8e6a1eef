"""Screenshots of the viewer's views for docs/tour.md, from models `heedful demo` makes.

    python docs/screenshots.py                       # trains the two demo models first (minutes)
    python docs/screenshots.py --transformer DIR --rnn DIR   # or takes model directories
    python docs/screenshots.py --images-only [--captions DIR]  # only the image model's pictures
    python docs/tour_run.py                          # the tour run, then these from its models

The Transformer is the dates demo's, the RNN (Bahdanau attention) the dialogue demo's, the
image model the captions demo's default (a CNN with a self-attention layer over its cells,
under a Transformer decoder; the demo's own training budget), so the pictures show what a
reader of the tour gets; the training slider's pictures are of the dates demo's snapshots
(its --out, which `--training` can name). Each view is opened the way a
reader opens it (a tab, a clicked cell, the step buttons) in headless Chromium, and the viewer's
element is captured to docs/img/viewer-*.png. Needs chromium and chromedriver (README, "Two
commands").
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

IMG = Path(__file__).resolve().parent / "img"
DATES = "21 de marzo de 1948"
DIALOGUE = "Hi, How are you?"


def demo_model(task: str, model: str, out: Path, *options: str) -> Path:
    """A model directory from `heedful demo` (its own training budget and stopping rule)."""
    command = [sys.executable, "-m", "heedful", "demo", "--task", task, "--model", model]
    subprocess.run([*command, "--out", str(out), "--no-progress", *options], check=True)
    return next(out.glob("model-*"))


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless", "--no-sandbox", "--disable-gpu",
                     "--disable-background-networking", "--window-size=1280,2400"):  # fmt: skip
        options.add_argument(argument)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def capture(driver, page: str, name: str, shown: str, script: str = "") -> Path:
    """Open `page` (HTML text), run `script` with `viewer` bound to its viewer, and save the
    part named `shown` (a data-part: the panel of the view)."""
    with tempfile.NamedTemporaryFile("w", suffix=".html", delete=False, encoding="utf-8") as f:
        f.write(page)
    driver.get(Path(f.name).as_uri())
    driver.execute_script("const viewer = window.heedfulViewer;\n" + script)
    driver.execute_script("return new Promise((done) => setTimeout(done, 300));")
    path = IMG / f"viewer-{name}.png"
    element = driver.find_element("css selector", f'[data-part="{shown}"]')
    driver.execute_script("arguments[0].scrollIntoView();", element)
    element.screenshot(str(path))
    Path(f.name).unlink()
    print(f"wrote {path}")
    return path


def part(name: str) -> str:
    return f'viewer.root.querySelector("[data-part={name}]")'


def shots(driver, transformer: Path, rnn: Path) -> None:
    from heedful.inference.translator import Translator
    from heedful.visualize.html import render_html, render_step
    from heedful.visualize.trace import build_trace

    t = build_trace(Translator.load(transformer), DATES, num_beams=3, n_best=2, internals=True)
    layers = t.model["decoder_layers"]
    capture(driver, render_step(t, "cross", layers, 1, 1), "calculation", "calc")
    capture(driver, render_html(t), "pipeline", "panel-pipe", 'viewer.showTab("pipe");')
    capture(driver, render_html(t), "model-view", "panel-model", 'viewer.showTab("model");')
    capture(driver, render_html(t), "block", "panel-block", 'viewer.showTab("block");')
    r = build_trace(Translator.load(rnn), DIALOGUE, num_beams=1, internals=True)
    capture(driver, render_step(r, "cross", 1, 1, 2), "rnn-calculation", "calc")
    steps = len(r.source_tokens) + 2  # every encoder state, then two decoder steps
    script = 'viewer.showTab("anim");\n' + f"{part('anim-next')}.click();\n" * steps
    capture(driver, render_html(r), "rnn-steps", "panel-anim", script)


def image_shots(driver, model: Path, tmp: Path) -> None:
    """The Show, Attend and Tell figure of a held-out scene, by the command the README shows
    (docs/img/captions-overlay.png), and the viewer's picture in its replay: a word's regions,
    and a patch's attention rollout (docs/img/viewer-image*.png)."""
    from PIL import Image

    from heedful.inference.translator import Translator
    from heedful.tasks.scenes import SceneSet
    from heedful.visualize.html import render_html
    from heedful.visualize.trace import build_trace

    scenes = SceneSet(50, seed=1, split=1)  # the demo's held-out stream
    j = next(j for j, s in enumerate(scenes.scenes) if len(s.shapes) == 2)
    scene = tmp / "scene.png"
    Image.fromarray(scenes.pixels(j)).save(scene)
    overlay = IMG / "captions-overlay.png"
    command = [sys.executable, "-m", "heedful", "attention", str(model), str(scene)]
    subprocess.run([*command, "--png", str(overlay)], check=True)
    page = render_html(build_trace(Translator.load(model), scene))
    capture(driver, page, "image", "replay-image", "viewer.setStep(2);")
    choose = f"{part('image-mode')}.value = 'rollout'; {part('image-mode')}.dispatchEvent("
    choose += "new Event('change'));\n"
    click = "viewer.root.querySelectorAll('[data-part=image-cells] .region')[21].click();"
    capture(driver, page, "image-rollout", "replay-image", choose + click)


def training_shots(driver, run_dir: Path, tmp: Path) -> None:
    """The training slider's page of a demo's snapshots (heedful attention RUN_DIR --html) at
    step 0, at the first validation and at the last step: the same sentence's alignment matrix
    from the random weights of step 0, through a model half-way to its target, to the trained
    model's (docs/img/viewer-training-*.png)."""
    from heedful.visualize.snapshots import read_snapshots, render_snapshots

    data = read_snapshots(run_dir)
    page = tmp / "training.html"
    page.write_text(render_snapshots(data, run_dir.name), encoding="utf-8")
    count = len(data["snapshots"])
    driver.set_window_size(1280, 1380)
    driver.get(page.as_uri())
    for name, index in (("first", 0), ("early", 1), ("last", count - 1)):
        driver.execute_script(f"heedfulSnapshots.go({index});")
        driver.execute_script("return new Promise((done) => setTimeout(done, 1500));")
        path = IMG / f"viewer-training-{name}.png"
        driver.find_element("css selector", "body").screenshot(str(path))
        print(f"wrote {path}")
    driver.set_window_size(1280, 2400)


def main() -> None:
    from heedful.demo.captions import DEFAULT_MODEL

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transformer", type=Path, help="a dates Transformer model directory")
    parser.add_argument("--rnn", type=Path, help="a dialogue RNN model directory")
    parser.add_argument("--captions", type=Path, help="a captions (image) model directory")
    parser.add_argument("--images-only", action="store_true", help="only the image pictures")
    parser.add_argument("--training", type=Path, help="a dates demo's --out, with snapshots")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="heedful-shots-") as tmp:
        if not args.images_only:
            transformer = args.transformer or demo_model("dates", "transformer", Path(tmp) / "d")
            rnn = args.rnn or demo_model("dialogue", "rnn-bahdanau", Path(tmp) / "c")
        captions = args.captions or demo_model("captions", DEFAULT_MODEL, Path(tmp) / "i")
        driver = browser()
        try:
            if not args.images_only:
                shots(driver, transformer, rnn)
                training_shots(driver, args.training or transformer.parent, Path(tmp))
            image_shots(driver, captions, Path(tmp))
        finally:
            driver.quit()


if __name__ == "__main__":
    main()
