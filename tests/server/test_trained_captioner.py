"""A trained captioner, not an untrained one, through Python, the CLI and HTTP (issue 12).

The plumbing tests use untrained models (tests/image_models.py): they caption nonsense, the
same nonsense everywhere. Here a small CNN+Transformer learns the generated scenes for a
hundred steps, so it says something close to what a user would read, and the three ways to
ask for its captions must agree on every picture, word for word, with the same attention."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from click.testing import CliRunner

from heedful.cli import main
from heedful.demo.run import run_demo
from heedful.inference.translator import Translator
from heedful.server import ServerLimits
from heedful.tasks.scenes import SceneSet

from .helpers import client, ok

LIMITS = ServerLimits(max_body_bytes=200_000, max_num_beams=4)


def _demo(out, steps: int):
    return run_demo(
        "cnn-transformer", out, train_size=600, test_size=40, max_steps=steps, progress=False,
        echo=lambda line: None, task="captions",
    )  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return _demo(tmp_path_factory.mktemp("trained"), steps=100)


@pytest.fixture(scope="module")
def pictures(tmp_path_factory):
    """Scenes of a seed the demo never drew from, as lossless PNG files."""
    from PIL import Image

    scenes, folder = SceneSet(4, seed=23), tmp_path_factory.mktemp("pictures")
    paths = [folder / f"scene{i}.png" for i in range(len(scenes))]
    for i, path in enumerate(paths):
        Image.fromarray(scenes.pixels(i)).save(path)
    return scenes, paths


def test_training_made_the_captions_better(trained, tmp_path):
    """Relative progress on the demo's held-out scenes: the same recipe after 1 step."""
    untrained = _demo(tmp_path / "one-step", steps=1)
    assert trained.steps == 100
    assert trained.bleu["bleu4"] > untrained.bleu["bleu4"]
    assert trained.bleu["bleu1"] > untrained.bleu["bleu1"]
    assert trained.exact_match >= untrained.exact_match


def test_python_cli_and_http_give_the_same_captions(trained, pictures):
    scenes, paths = pictures
    captioner = Translator.load(trained.model_dir)
    expected = captioner.translate(paths, need_weights=True)
    from_pixels = captioner.translate([scenes.pixels(i) for i in range(len(scenes))])
    assert [c.text for c in from_pixels] == [c.text for c in expected]

    result = CliRunner().invoke(main, ["caption", str(trained.model_dir), *map(str, paths)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [c.text for c in expected]

    with client(trained.model_dir, LIMITS) as http:
        for path, caption in zip(paths, expected, strict=True):
            files = {"file": (path.name, path.read_bytes(), "image/png")}
            answer = ok(http.post("/caption", files=files, data={"attention": "true"}))
            assert answer["caption"] == caption.text and answer["tokens"] == caption.tokens
            grids = np.asarray(answer["attention"], dtype=np.float64)  # (T, gh, gw), 5 decimals
            reference = caption.attention_grid().astype(np.float64)
            assert grids.shape == reference.shape == (len(caption.tokens), *captioner.source.grid)
            np.testing.assert_allclose(grids, reference, atol=1e-5)
            as_json = {"image": base64.b64encode(path.read_bytes()).decode("ascii")}
            assert ok(http.post("/caption", json=as_json))["caption"] == caption.text
