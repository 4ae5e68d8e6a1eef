"""model.freeze_encoder and data.feature_cache (issue 12): a frozen trunk does not move while the
rest learns; training from its cached output is training through it, step for step; the cache
is read back by a second run and a resume, rebuilt where damaged; and the model directory of a
cached run captions pictures as the run validated it on cells."""

from __future__ import annotations

import json

import pytest
import torch
from image_models import scene_files
from safetensors import safe_open
from torch import nn

from heedful.checkpoint.model_dir import load_model_dir
from heedful.config import ConfigError, load_config
from heedful.data.images import ImageTransform
from heedful.models.frozen import (
    Trunk,
    cells_to_map,
    freeze_trunk,
    reading_cells,
    trunk_of,
)
from heedful.models.vision import BackboneEncoder, CNNEncoder, ViTEncoder
from heedful.training.captions_task import CaptionValidation, _model, _read
from heedful.training.experiment import train_from_config

STEPS = 6
MODEL = {  # the CNN with coordinate channels and encoder layers: every part after the trunk
    "rnn": "{arch: rnn, encoder: cnn, image_size: 48, cnn_channels: 4, cnn_blocks: 3, "
    "cnn_coords: true, d_model: 8, hidden_size: 16, dropout: 0.0, freeze_encoder: true}",
    "transformer": "{arch: transformer, encoder: cnn, image_size: 48, cnn_channels: 4, "
    "cnn_blocks: 3, cnn_coords: true, cnn_layers: 1, d_model: 16, num_heads: 2, d_ff: 32, "
    "decoder_layers: 1, dropout: 0.1, freeze_encoder: true}",
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scenes")
    train, valid = (
        str(scene_files(folder, n, seed, per_image=1)[1]) for n, seed in [(12, 1), (4, 2)]
    )
    return folder, train, valid


def _config(data, arch: str = "rnn", *overrides: str):
    folder, captions, valid = data
    (folder / f"{arch}.yaml").write_text(
        f"""data: {{images: {folder / "images"}, captions: {captions}, valid_captions: {valid},
        tokenizer: char}}
model: {MODEL[arch]}
train: {{batch_tokens: 288, eval_every: 2, log_every: 1, max_steps: {STEPS}, warmup_steps: 2}}
generation: {{num_beams: 1, max_len_ratio: 0.0, max_len_offset: 20}}
"""
    )
    return load_config(folder / f"{arch}.yaml", list(overrides))


def _train(config, run_dir, force: bool = False) -> list[str]:
    """Train quietly; the lines it would have printed."""
    lines: list[str] = []
    train_from_config(config, run_dir, force=force, progress=False, echo=lines.append)
    return lines


def _losses(run_dir) -> list[float]:
    """Every training and validation loss of metrics.jsonl, in order."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    return [r.get("train_loss", r.get("loss")) for r in records if "train_loss" in r or "loss" in r]


def _cache_lines(lines: list[str]) -> list[str]:
    return [line.split(": ", 1)[1] for line in lines if " feature cache " in line]  # stamped


def _initial(config) -> dict:
    """The weights training starts from (the run's seed, tokenizer and backbone)."""
    items = _read(config, "captions")
    return _model(config, None, items, ImageTransform(size=48))[0].state_dict()


# ------------------------------------------------------------------------------------------
# the trunk alone
# ------------------------------------------------------------------------------------------


def _backbone() -> BackboneEncoder:
    """A backbone with batch norm, whose statistics training must not touch when frozen."""
    torch.manual_seed(0)
    trunk = nn.Sequential(nn.Conv2d(3, 6, 3, stride=2, padding=1), nn.BatchNorm2d(6), nn.ReLU())
    trunk[1].running_mean.uniform_(-0.5, 0.5)
    return BackboneEncoder(trunk, 6, 8)


def test_a_frozen_backbone_keeps_its_weights_and_batch_norm_statistics():
    encoder = _backbone()
    before = {k: v.clone() for k, v in encoder.trunk.state_dict().items()}
    freeze_trunk(encoder)
    encoder.train()
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=0.1, weight_decay=0.5)
    for _ in range(3):
        encoder(torch.randn(4, 3, 8, 8)).states.square().mean().backward()
        optimizer.step()
    for name, value in encoder.trunk.state_dict().items():
        assert torch.equal(value, before[name]), name  # batch norm's statistics included
    assert all(p.grad is None for p in encoder.trunk.parameters())
    assert encoder.project.weight.grad is not None


def _cnn(coords: bool) -> CNNEncoder:
    torch.manual_seed(0)
    return CNNEncoder(16, channels=4, blocks=2, coords=coords, num_layers=1, num_heads=2)


ENCODERS = {"cnn": lambda: _cnn(False), "cnn-coords": lambda: _cnn(True), "backbone": _backbone}


@pytest.mark.parametrize("kind", ENCODERS)
def test_the_cached_cells_through_the_model_are_the_pixels_through_it(kind):
    encoder = ENCODERS[kind]().eval()
    freeze_trunk(encoder)
    images = torch.randn(3, 3, 16, 16)
    cells = Trunk(encoder)(images)  # (B, S, C)
    grid = encoder.grid(16)
    assert cells.shape[:2] == (3, grid[0] * grid[1])
    maps = torch.stack([cells_to_map(c, grid) for c in cells])  # (B, C, gh, gw)
    with reading_cells(nn.ModuleDict({"encoder": encoder})):
        from_cells = encoder(maps, need_weights=True)
    from_pixels = encoder(images, need_weights=True)
    assert from_cells.grid == from_pixels.grid == grid
    torch.testing.assert_close(from_cells.states, from_pixels.states, rtol=0, atol=0)
    if from_pixels.self_attention is not None:
        torch.testing.assert_close(from_cells.self_attention, from_pixels.self_attention)
    assert "forward" not in vars(trunk_of(encoder))  # put back
    assert getattr(encoder, "coords", None) is {"cnn": False, "cnn-coords": True}.get(kind)


def test_a_vit_has_no_trunk_to_freeze():
    with pytest.raises(ValueError, match="no trunk"):
        trunk_of(ViTEncoder(16, 4, 16, 2, 1, 32))


# ------------------------------------------------------------------------------------------
# training
# ------------------------------------------------------------------------------------------


def test_a_frozen_trunk_does_not_move_while_the_rest_learns(data, tmp_path):
    config = _config(data)
    _train(config, tmp_path / "run")
    start = _initial(config)
    trained = load_model_dir(tmp_path / "run" / "latest").model.state_dict()
    trunk = [k for k in start if k.startswith("encoder.features.")]
    assert trunk and all(torch.equal(trained[k], start[k]) for k in trunk)
    rest = [k for k in start if k not in trunk]
    assert all(not torch.equal(trained[k], start[k]) for k in rest if k.endswith("weight"))
    model = load_model_dir(tmp_path / "run" / "latest").model
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and not [n for n in trainable if n.startswith("encoder.features.")]
    with safe_open(str(tmp_path / "run" / "latest" / "training_state.safetensors"), "pt") as f:
        stepped = {int(k.split(".")[1]) for k in f.keys() if k.startswith("optimizer.")}
    assert stepped == set(range(len(trainable)))  # the optimizer holds only what trains
    unfrozen = _config(data, "rnn", "model.freeze_encoder=false")
    _train(unfrozen, tmp_path / "unfrozen")  # the check can fail: these weights move
    moved = load_model_dir(tmp_path / "unfrozen" / "latest").model.state_dict()
    assert not torch.equal(moved["encoder.features.0.weight"], start["encoder.features.0.weight"])


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_training_from_the_cache_is_training_through_the_frozen_trunk(data, tmp_path, arch):
    cache = tmp_path / "cache"
    through = _train(_config(data, arch), tmp_path / "through")
    cached = _train(_config(data, arch, f"data.feature_cache={cache}"), tmp_path / "cached")
    assert not _cache_lines(through)
    assert _cache_lines(cached) == [
        "training images 0 reused, 12 computed, 0 rebuilt",
        "validation images 0 reused, 4 computed, 0 rebuilt",
    ]
    a, b = _losses(tmp_path / "through"), _losses(tmp_path / "cached")
    assert len(a) == len(b) == STEPS + STEPS // 2  # every step's and every validation's
    torch.testing.assert_close(torch.tensor(b), torch.tensor(a), rtol=1e-5, atol=1e-6)
    x = load_model_dir(tmp_path / "through" / "latest").model.state_dict()
    y = load_model_dir(tmp_path / "cached" / "latest").model.state_dict()
    assert x.keys() == y.keys()  # the whole model, trunk included
    for name in x:
        torch.testing.assert_close(y[name], x[name], rtol=1e-4, atol=1e-5, msg=name)


def test_a_resume_and_a_second_run_read_the_cache_back(data, tmp_path):
    config = _config(data, "rnn", f"data.feature_cache={tmp_path / 'cache'}")
    cache = f"data.feature_cache={tmp_path / 'cache'}"
    first = _train(_config(data, "rnn", cache, "train.max_steps=4"), tmp_path / "run")
    resumed = _train(config, tmp_path / "run")
    straight = _train(config, tmp_path / "straight")
    assert _cache_lines(first)[0] == "training images 0 reused, 12 computed, 0 rebuilt"
    for lines in (resumed, straight):
        assert _cache_lines(lines) == [
            "training images 12 reused, 0 computed, 0 rebuilt",
            "validation images 4 reused, 0 computed, 0 rebuilt",
        ]
    a = load_model_dir(tmp_path / "run" / "latest").model.state_dict()
    b = load_model_dir(tmp_path / "straight" / "latest").model.state_dict()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-6, msg=name)


def test_a_damaged_entry_is_rebuilt_and_training_does_not_change(data, tmp_path):
    config = _config(data, "rnn", f"data.feature_cache={tmp_path / 'cache'}")
    _train(config, tmp_path / "run")
    [key] = list((tmp_path / "cache").iterdir())
    entries = sorted(key.glob("*.safetensors"))
    assert len(entries) == 16  # one per distinct image
    entries[0].write_bytes(entries[0].read_bytes()[:100])  # truncated
    lines = _train(config, tmp_path / "run", force=True)
    rebuilt = [line for line in _cache_lines(lines) if "1 rebuilt" in line]
    assert len(rebuilt) == 1 and "0 computed" in rebuilt[0]
    first = _losses(tmp_path / "run")
    assert len(first) == STEPS + STEPS // 2
    _train(_config(data, "rnn"), tmp_path / "through")
    torch.testing.assert_close(torch.tensor(first), torch.tensor(_losses(tmp_path / "through")),
                               rtol=1e-5, atol=1e-6)  # fmt: skip


def test_a_cached_run_s_model_directory_captions_pictures(data, tmp_path):
    from heedful.data.features import cached_features
    from heedful.data.image_pairs import FileImages
    from heedful.inference.translator import Translator
    from heedful.training.validation import make_validator

    config = _config(data, "rnn", f"data.feature_cache={tmp_path / 'cache'}")
    _train(config, tmp_path / "run")
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    on_cells = [r for r in records if "bleu" in r][-1]  # step 6: what the run measured
    loaded = load_model_dir(tmp_path / "run" / "latest")
    items = _read(config, "valid_captions")
    transform, paths = loaded.source.transform, [p for p, _ in items]
    references = [captions for _, captions in items]
    pixels = FileImages(paths, transform)  # the validation reads pixels
    valid = CaptionValidation(references, pixels, loaded.source, loaded.tgt_tokenizer, config)
    validate = make_validator(valid, config, "cpu")
    loaded.model.eval()
    with torch.no_grad():
        on_pixels = validate(loaded.model)
    assert on_pixels["loss"] == pytest.approx(on_cells["loss"], rel=1e-5)
    for name in ("bleu", "bleu1", "exact_match"):
        assert on_pixels[name] == pytest.approx(on_cells[name], abs=1e-9), name
    from_pixels = Translator.load(tmp_path / "run" / "latest").translate(paths)
    found = cached_features(Trunk(loaded.model.encoder), paths, transform, tmp_path / "cache")
    assert found.reused == 4 and found.computed == 0  # the run's cells, read back
    maps = torch.stack([cells_to_map(c, loaded.model.grid(48)) for c in found.features])
    searcher = Translator(loaded.model, loaded.source, loaded.tgt_tokenizer, loaded.generation)
    with reading_cells(loaded.model):
        found = [h[0] for h in searcher.search(maps)]
    from_cells = [loaded.tgt_tokenizer.decode(h.tokens) for h in found]
    assert [c.text for c in from_pixels] == from_cells
    # the same numbers, which differ from picture to picture (six steps may not yet make
    # their captions differ: the picture reaches the output all the same)
    scores = [h.score for h in found]
    assert [c.score for c in from_pixels] == pytest.approx(scores, abs=1e-5)
    assert min(abs(a - b) for i, a in enumerate(scores) for b in scores[i + 1 :]) > 1e-3


# ------------------------------------------------------------------------------------------
# hostile settings: each refused naming the key, before the run directory changes
# ------------------------------------------------------------------------------------------


def _a_file(tmp_path) -> str:
    (tmp_path / "a-file").write_text("not a folder")
    return str(tmp_path / "a-file")


HOSTILE = [  # (id, overrides(tmp_path), error pattern)
    ("cache-without-freeze", lambda t: ["model.freeze_encoder=false", f"data.feature_cache={t}"],
     r"data.feature_cache .* model.freeze_encoder is false"),
    ("row0-cache-empty", lambda t: ["data.feature_cache=''"], r"data.feature_cache: an empty name"),
    ("row0-cache-blank", lambda t: ["data.feature_cache='  '"],
     r"data.feature_cache: an empty name"),
    ("row0-cache-a-number", lambda t: ["data.feature_cache=5"],
     r"data.feature_cache: expected str"),
    ("row0-cache-a-list", lambda t: ["data.feature_cache=[a, b]"],
     r"data.feature_cache: expected str"),
    # found when training starts: named by the key's path in the sections
    ("row0-cache-huge", lambda t: [f"data.source.feature_cache={t}/{'x' * 5000}"],
     r"data.source.feature_cache: cannot make the folder"),
    ("cache-a-file", lambda t: [f"data.source.feature_cache={_a_file(t)}"],
     r"data.source.feature_cache: .*a-file is a file, not a folder"),
    ("cache-under-a-file", lambda t: [f"data.source.feature_cache={_a_file(t)}/cache"],
     r"data.source.feature_cache: cannot make the folder"),
    ("freeze-a-vit", lambda t: ["model.encoder=vit"],
     r"model.freeze_encoder: a ViT's patch embedding"),
    ("freeze-a-text-model", lambda t: ["model.encoder=text"],
     r"model.freeze_encoder: a text model has no image encoder"),
    ("row0-freeze-not-a-bool", lambda t: ["model.freeze_encoder='true'"],
     r"model.freeze_encoder: expected true or false"),
    # the same keys in their sections (issue 27, item 6)
    ("nested-cache-without-freeze",
     lambda t: ["model.encoder.freeze=false", f"data.source.feature_cache={t}"],
     r"data.source.feature_cache .* model.encoder.freeze is false"),
    ("nested-row0-cache-empty", lambda t: ["data.source.feature_cache=''"],
     r"data.source.feature_cache: an empty name"),
    ("nested-freeze-a-vit", lambda t: ["model.encoder.kind=vit", "model.encoder.freeze=true"],
     r"model.encoder.freeze: a ViT's patch embedding"),
    ("nested-row0-freeze-not-a-bool", lambda t: ["model.encoder.freeze='true'"],
     r"model.encoder.freeze: expected true or false"),
]  # fmt: skip


@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_feature_cache_settings(case, data, tmp_path):
    _, overrides, pattern = case
    with pytest.raises(ConfigError, match=pattern):
        _train(_config(data, "rnn", *overrides(tmp_path)), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_read_only_cache_folder_is_refused(data, tmp_path, monkeypatch):
    import heedful.training.captions_task as experiment

    # os.access as a user without write permission answers it (root may write anywhere)
    monkeypatch.setattr(experiment.os, "access", lambda path, mode: False)
    cache = f"data.source.feature_cache={tmp_path / 'cache'}"
    with pytest.raises(ConfigError, match="data.source.feature_cache: .* is not writable"):
        _train(_config(data, "rnn", cache), tmp_path / "run")
