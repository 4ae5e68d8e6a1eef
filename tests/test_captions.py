"""Image captioning end to end (issue 12): the demo's short version, a trained model's
captions through Python and the CLI, its model directory, and `heedful train` on image files
with resume."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from earlier import flat_model
from image_models import scene_files

import heedful
from heedful.checkpoint.model_dir import CheckpointError, load_model_dir
from heedful.cli import main
from heedful.demo.run import run_demo
from heedful.inference.translator import Translator
from heedful.tasks.scenes import SceneSet


def run_caption_demo(model_name, out, **options):
    return run_demo(model_name, out, task="captions", **options)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("captions-demo")
    return run_caption_demo(
        "cnn-rnn-bahdanau", out, train_size=120, test_size=8, max_steps=3, progress=False,
        echo=lambda line: None,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pictures(tmp_path_factory):
    """Three held-out-like scenes as PNG files (lossless: the same pixels come back)."""
    from PIL import Image

    scenes, folder = SceneSet(3, seed=9), tmp_path_factory.mktemp("pictures")
    paths = []
    for i in range(3):
        paths.append(folder / f"scene{i}.png")
        Image.fromarray(scenes.pixels(i)).save(paths[-1])
    return scenes, paths


def test_the_short_demo_runs_end_to_end(demo):
    assert demo.steps == 3 and demo.stopped_by == "max_steps"
    assert 0.0 <= demo.exact_match <= 1.0 and set(demo.bleu) >= {"bleu1", "bleu4"}
    assert demo.heatmap.is_file() and demo.heatmap.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (demo.model_dir / "config.json").is_file()
    assert len(demo.examples) == 8


def test_the_demo_command_knows_the_captions_models():
    result = CliRunner().invoke(main, ["demo", "--task", "captions", "--model", "transformer"])
    assert result.exit_code == 1 and "unknown captions model 'transformer'" in result.output
    assert "Traceback" not in result.output


def test_captions_through_python_have_attention_over_the_grid(demo, pictures):
    scenes, paths = pictures
    captioner = heedful.load(demo.model_dir)
    assert isinstance(captioner, Translator) and captioner.source.grid == (6, 6)
    from_files = captioner.translate(paths, need_weights=True)
    from_arrays = captioner.translate([scenes.pixels(i) for i in range(3)])
    assert [c.text for c in from_files] == [c.text for c in from_arrays]
    first = from_files[0]
    assert first.grid == (6, 6)
    assert first.attention.shape == (len(first.tokens), 1, 1, 36)  # (T, L, H, S)
    torch.testing.assert_close(first.weights().sum(-1), torch.ones(len(first.tokens)))
    assert first.attention_grid().shape == (len(first.tokens), 6, 6)
    with pytest.raises(TypeError, match="a list of images, not one image"):
        captioner.translate(paths[0])


def test_captions_through_the_cli(demo, pictures):
    _, paths = pictures
    expected = [c.text for c in heedful.load(demo.model_dir).translate(paths)]
    for command in ("caption", "translate"):
        result = CliRunner().invoke(main, [command, str(demo.model_dir), *map(str, paths)])
        assert result.exit_code == 0, result.output
        assert result.output.splitlines() == expected
    two = CliRunner().invoke(main, ["caption", str(demo.model_dir), str(paths[0]),
                                    "--num-beams", "2", "--n-best", "2"])  # fmt: skip
    assert two.exit_code == 0 and two.output.count("\t") == 1


def test_prefixes_reach_captions_through_python_and_the_cli(demo, tmp_path, pictures):
    """The one Translator forces a caption's beginning as it forces a translation's; `heedful
    translate MODEL image ... --prefix FILE` reads one beginning per image."""
    from heedful.inference.translator import load_ensemble

    _, paths = pictures
    translator = heedful.load(demo.model_dir)
    forced = translator.translate(paths[:2], prefixes=["a small", None])
    assert forced[0].text.startswith("a small")
    assert forced[1].text == translator.translate(paths[1:2])[0].text  # None: no prefix
    (tmp_path / "prefixes.txt").write_text("a small\n\n")
    command = ["translate", str(demo.model_dir), *map(str, paths[:2])]
    result = CliRunner().invoke(main, [*command, "--prefix", str(tmp_path / "prefixes.txt")])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [t.text for t in forced]
    result = CliRunner().invoke(main, [*command, "--prefix", "tsv"])
    assert result.exit_code == 2 and "one beginning per image" in result.output
    with pytest.raises(ValueError, match="model 1 of the ensemble reads pictures"):
        load_ensemble([demo.model_dir, demo.model_dir])


def test_text_and_image_models_refuse_the_other_input(demo, tmp_path, pictures):
    _, paths = pictures
    translator = heedful.load(demo.model_dir, quantize="int8")  # a quantized image model
    with pytest.raises(ValueError, match="image captioning model"):
        translator.translate(["a sentence"])
    result = CliRunner().invoke(main, ["translate", str(demo.model_dir)], input="text\n")
    assert result.exit_code == 2 and "give one or more images" in result.output
    (tmp_path / "model").mkdir()  # a text model's arguments must all be directories
    result = CliRunner().invoke(main, ["translate", str(tmp_path / "model"), str(paths[0])])
    assert result.exit_code == 2 and "is a file" in result.output


def test_image_models_do_not_export_to_text_runtimes(demo, tmp_path):
    from heedful.inference.export import export_ctranslate2

    with pytest.raises(CheckpointError, match="image model"):
        export_ctranslate2(demo.model_dir, tmp_path / "ct2")
    assert not (tmp_path / "ct2").exists()


def test_the_model_directory_round_trips(demo, tmp_path, pictures):
    from heedful.checkpoint.model_dir import save_model_dir

    loaded = load_model_dir(demo.model_dir)
    assert loaded.source.kind == "image" and loaded.source.transform.size == 48
    assert (demo.model_dir / "transform.json").is_file()  # the image slot, not tokenizer.src
    assert not (demo.model_dir / "tokenizer.src").exists()
    assert "src_vocab_size" not in json.loads((demo.model_dir / "config.json").read_text())
    again = save_model_dir(
        tmp_path / "again", loaded.model, loaded.model_config, loaded.source,
        loaded.tgt_tokenizer, loaded.generation,
    )  # fmt: skip
    reloaded = load_model_dir(again)
    for (name, a), b in zip(
        loaded.model.state_dict().items(), reloaded.model.state_dict().values()
    ):
        assert torch.equal(a, b), name
    _, paths = pictures
    before = legacy(demo.model_dir, tmp_path / "legacy")  # as an earlier heedful wrote it
    texts = [[c.text for c in Translator.load(d).translate(paths)] for d in (again, before)]
    now = [c.text for c in Translator.load(demo.model_dir).translate(paths)]
    assert texts[0] == texts[1] == now


def legacy(model_dir, out):
    """A copy of an image model's directory as heedful wrote it before transform.json: the
    transform in tokenizer.src, as JSON of "kind": "image"; src_vocab_size the specials'; the
    model's keys flat, as before the config's sections."""
    import shutil

    shutil.copytree(model_dir, out)
    transform = json.loads((out / "transform.json").read_text())
    (out / "tokenizer.src").write_text(json.dumps({"kind": "image", "transform": transform}))
    (out / "transform.json").unlink()
    _edit_json(
        out / "config.json", lambda j: j.update(src_vocab_size=4, model=flat_model(j["model"]))
    )
    return out


def _edit_json(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


# Hostile image-model directories: what transform.json (the ImageTransform), tokenizer.src of a
# directory an earlier heedful wrote (the transform as JSON of "kind": "image") and config.json's
# image keys may hold. Each must end in a CheckpointError naming the file.
HOSTILE = {
    "row0-empty-source": (lambda d: (d / "transform.json").write_text(""), "transform.json"),
    "row0-truncated-source": (
        lambda d: (d / "transform.json").write_text('{"size": 48, "me'),
        "transform.json",
    ),
    "row0-wrong-type-transform": (
        lambda d: (d / "transform.json").write_text("[48]"),
        "expected an object",
    ),
    "row0-non-finite-mean": (
        lambda d: (d / "transform.json").write_text('{"size": 48, "mean": [NaN, 0, 0]}'),
        "transform.json",
    ),
    "row0-huge-size": (
        lambda d: _edit_json(d / "transform.json", lambda j: j.update(size=10**9)),
        "size must be a whole number",
    ),
    "row0-wrong-encoding": (
        lambda d: (d / "transform.json").write_bytes(b'{"size": 48, "x": "\xff\xfe"}'),
        "transform.json",
    ),
    "row0-missing": (lambda d: (d / "transform.json").unlink(), "missing transform.json"),
    "unknown-transform-field": (
        lambda d: _edit_json(d / "transform.json", lambda j: j.update(gamma=2)),
        "unknown field 'gamma'",
    ),
    "size-unlike-the-config": (
        lambda d: _edit_json(d / "transform.json", lambda j: j.update(size=64)),
        "model.encoder.image_size is 48",
    ),
    "text-tokenizer-in-the-image-slot": (
        lambda d: (d / "transform.json").write_text('{"kind": "char", "vocab": []}'),
        "unknown field 'kind'",
    ),
}
LEGACY = {  # the same faults in tokenizer.src, where an earlier heedful kept the transform
    "row0-empty-source": (lambda d: (d / "tokenizer.src").write_text(""), "tokenizer.src"),
    "row0-truncated-source": (
        lambda d: (d / "tokenizer.src").write_text('{"kind": "image", "transf'),
        "tokenizer.src",
    ),
    "row0-wrong-type-transform": (
        lambda d: _edit_json(d / "tokenizer.src", lambda j: j.update(transform=[48])),
        "expected an object",
    ),
    "row0-non-finite-mean": (
        lambda d: (d / "tokenizer.src").write_text(
            '{"kind": "image", "transform": {"size": 48, "mean": [NaN, 0, 0]}}'
        ),
        "tokenizer.src",
    ),
    "row0-huge-size": (
        lambda d: _edit_json(d / "tokenizer.src", lambda j: j["transform"].update(size=10**9)),
        "size must be a whole number",
    ),
    "row0-wrong-encoding": (
        lambda d: (d / "tokenizer.src").write_bytes(b'{"kind": "image", "x": "\xff\xfe"}'),
        "tokenizer.src",
    ),
    "unknown-transform-field": (
        lambda d: _edit_json(d / "tokenizer.src", lambda j: j["transform"].update(gamma=2)),
        "unknown field 'gamma'",
    ),
    "extra-source-field": (
        lambda d: _edit_json(d / "tokenizer.src", lambda j: j.update(extra=1)),
        "fields kind and transform",
    ),
    "size-unlike-the-config": (
        lambda d: _edit_json(d / "tokenizer.src", lambda j: j["transform"].update(size=64)),
        "model.encoder.image_size is 48",
    ),
    "text-tokenizer-in-an-image-model": (
        lambda d: (d / "tokenizer.src").write_text('{"kind": "char", "vocab": []}'),
        "a text model",
    ),
}


def _model_key(flat: str, nested: str, value):
    """Set a key of config.json's model: nested, or flat in an earlier heedful's layout."""

    def change(j):
        model = j["model"]
        if isinstance(model.get("encoder"), dict):
            part, leaf = nested.split(".")
            model[part][leaf] = value
        else:
            model[flat] = value

    return lambda d: _edit_json(d / "config.json", change)


CONFIG = {  # either layout's config.json: its message by layout, the key as that one spells it
    "unknown-encoder": (
        _model_key("encoder", "encoder.kind", "pixels"),
        {"now": "model.encoder.kind: 'pixels'", "legacy": "model.encoder: 'pixels'"},
    ),
    "too-many-cnn-blocks": (
        _model_key("cnn_blocks", "encoder.blocks", 9),
        {"now": "model.encoder.blocks: 9 blocks", "legacy": "model.cnn_blocks: 9 blocks"},
    ),
    "nan-penalty": (
        _model_key("attention_penalty", "decoder.attention_penalty", float("nan")),
        {"now": "model.decoder.attention_penalty", "legacy": "model.attention_penalty"},
    ),
}
CASES = [("now", name) for name in {**HOSTILE, **CONFIG}]
CASES += [("legacy", name) for name in {**LEGACY, **CONFIG}]


@pytest.mark.parametrize("layout, case", CASES)
def test_hostile_image_model_directories(layout, case, demo, tmp_path, pictures):
    import shutil

    damage, message = {**(HOSTILE if layout == "now" else LEGACY), **CONFIG}[case]
    message = message[layout] if isinstance(message, dict) else message
    model_dir = tmp_path / "model"
    if layout == "now":
        shutil.copytree(demo.model_dir, model_dir)
    else:
        legacy(demo.model_dir, model_dir)
    damage(model_dir)
    with pytest.raises(CheckpointError, match=re.escape(message)):
        Translator.load(model_dir)
    result = CliRunner().invoke(main, ["caption", str(model_dir), str(pictures[1][0])])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert message.split()[0] in result.output


def test_heedful_train_on_image_files_resumes_where_it_stopped(tmp_path):
    """Four steps, then two more on resume, give the weights six uninterrupted steps give."""
    from heedful.config import load_config
    from heedful.training.experiment import train_from_config

    scene_files(tmp_path, 12, seed=1)
    scene_files(tmp_path, 4, seed=2)
    (tmp_path / "config.yaml").write_text(
        f"""data:
  images: {tmp_path / "images"}
  captions: {tmp_path / "captions-1.txt"}
  valid_captions: {tmp_path / "captions-2.txt"}
  tokenizer: char
model: {{arch: rnn, encoder: cnn, image_size: 48, cnn_channels: 4, cnn_blocks: 3, d_model: 8,
         hidden_size: 16, attention_penalty: 0.5}}
train: {{batch_tokens: 288, eval_every: 2, log_every: 1, max_steps: 6, warmup_steps: 2}}
generation: {{num_beams: 1, max_len_ratio: 0.0, max_len_offset: 20}}
"""
    )
    quiet = dict(progress=False, echo=lambda line: None)
    config = load_config(tmp_path / "config.yaml", ["train.max_steps=4"])
    assert train_from_config(config, tmp_path / "run", **quiet).steps == 4
    config = load_config(tmp_path / "config.yaml")
    resumed = train_from_config(config, tmp_path / "run", **quiet)
    straight = train_from_config(config, tmp_path / "straight", **quiet)
    assert resumed.steps == straight.steps == 6
    a = load_model_dir(tmp_path / "run" / "latest").model.state_dict()
    b = load_model_dir(tmp_path / "straight" / "latest").model.state_dict()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-6, msg=name)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    validation = [m for m in metrics if "bleu" in m]
    assert validation and {"loss", "bleu", "bleu1", "exact_match"} <= set(validation[-1])
    captions = heedful.load(tmp_path / "run" / "latest").translate(
        [np.zeros((30, 20, 3), np.uint8)]  # another size: resized as files are
    )
    assert isinstance(captions[0].text, str)


def test_heedful_train_names_what_an_image_run_lacks(tmp_path):
    from heedful.cli.errors import is_users_mistake
    from heedful.config import ConfigError, load_config
    from heedful.models.vision import VisionError
    from heedful.training.experiment import train_from_config

    config = load_config(None, ["model.encoder=cnn", "model.image_size=48"])
    with pytest.raises(ConfigError, match="give data.source.images"):
        train_from_config(config, tmp_path / "run", progress=False, echo=lambda line: None)
    assert not (tmp_path / "run").exists()
    scene_files(tmp_path, 2, seed=1)
    captions = tmp_path / "captions-1.txt"
    data = [f"data.images={tmp_path / 'images'}", f"data.captions={captions}",
            f"data.valid_captions={captions}", "data.tokenizer=char"]  # fmt: skip
    config = load_config(None, [*data, "model.encoder=torchvision:resnet18", "model.image_size=64"])
    try:
        import torchvision.models  # noqa: F401
    except (ImportError, RuntimeError, OSError):  # as here: PyPI's CUDA build beside a CPU torch
        if os.environ.get("HEEDFUL_REQUIRE_TORCHVISION") == "1":  # CI's vision stage
            pytest.fail("HEEDFUL_REQUIRE_TORCHVISION=1 but torchvision does not import")
        with pytest.raises(VisionError, match="needs torchvision") as error:
            train_from_config(config, tmp_path / "tv", progress=False, echo=lambda line: None)
        assert is_users_mistake(error.value)  # one line from the CLI, no traceback


def test_the_demo_s_batches_mix_the_kinds_of_caption():
    """A caption's length tells its kind, so batches sorted by length hold one kind each (and a
    model learns the relation from the batch, not the image); the demo's batches are random
    draws of scenes, with their own captions in them."""
    from heedful.data.batching import epoch_plan
    from heedful.data.image_pairs import ImagePairs
    from heedful.demo.captions import MixedPairs

    scenes = SceneSet(640, seed=5)
    ids = [[4 + len(c)] * len(c.split()) for c in scenes.captions]  # a word per token
    pairs = ImagePairs(lambda j: torch.zeros(3, 8, 8), range(640), ids, regions=36)
    mixed = MixedPairs(pairs)

    def lengths_per_batch(p):
        plan = epoch_plan(p, 36 * 64, seed=1, epoch=0)
        return [len({len(ids[i]) for i in plan.batch(k)}) for k in range(len(plan))]

    assert max(lengths_per_batch(pairs)) <= 2  # sorted: one or two lengths a batch
    assert min(lengths_per_batch(mixed)) >= 3  # shuffled: one shape, counts and relations
    rows = np.array([3, 100, 639])
    assert mixed.ids(rows) == pairs.ids(rows)
    batch = mixed.batch(rows)
    assert torch.equal(batch.tgt_out, pairs.batch(rows).tgt_out)


def test_the_default_model_s_directory_round_trips(tmp_path, pictures):
    """The demo's default: a CNN with coordinate channels and an encoder layer over its cells;
    its directory keeps both (config.json's model.encoder coords and layers, the layer's
    weights)."""
    from heedful.demo.captions import CAPTION_MODELS, DEFAULT_MODEL

    config = CAPTION_MODELS[DEFAULT_MODEL]
    result = run_caption_demo(
        DEFAULT_MODEL, tmp_path, train_size=60, test_size=4, max_steps=2, progress=False,
        echo=lambda line: None,
    )  # fmt: skip
    stored = json.loads((result.model_dir / "config.json").read_text())["model"]["encoder"]
    assert stored["coords"] == config.encoder.coords and stored["layers"] == config.encoder.layers
    loaded = load_model_dir(result.model_dir)
    assert loaded.model_config == config
    layers = {k.split(".")[2] for k in loaded.model.state_dict() if k.startswith("encoder.layers.")}
    assert len(layers) == config.encoder.layers + 1  # the layers and the stack's final LayerNorm
    _, paths = pictures
    first, second = (Translator.load(result.model_dir).translate(paths) for _ in range(2))
    assert [c.text for c in first] == [c.text for c in second]


def test_the_captions_demo_warns_when_its_budget_ends_training_early(tmp_path):
    """As the text demos do (issue 28, item 5): a busy machine's time budget stops training
    before its target, and the report says so and what to do."""
    lines = []
    result = run_caption_demo(
        "cnn-rnn-bahdanau", tmp_path, train_size=60, test_size=4, max_time=1e-3,
        progress=False, echo=lines.append,
    )  # fmt: skip
    assert result.stopped_by == "max_time"
    [warning] = [line for line in lines if line.startswith("warning:")]
    assert "stopped by --max-time (0.001 s) before its target" in warning
    assert "rerun with a larger --max-time, or on an idle machine" in warning
