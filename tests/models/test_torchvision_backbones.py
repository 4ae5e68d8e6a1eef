"""torchvision backbones as image encoders, against a real torchvision (issue 12).

PyPI's torchvision wheels are built for their own torch, so the main environment (torch 2.13
CPU) cannot import one; CI's vision stage (.ci/run, item 4) makes a second venv with torch
2.14.1 and torchvision 0.29.1 and runs this file there with HEEDFUL_REQUIRE_TORCHVISION=1,
under which a torchvision that does not import fails every test instead of skipping them.

What is checked: the trunk torchvision_trunk cuts is torchvision's own network up to its last
feature map (same numbers in float64, same channels and grid); weights from a local file load
into the trunk and nowhere else, and files that do not fit are refused by name; a caption
model with a torchvision encoder trains, saves, reloads, captions and resumes. Nothing is
downloaded: every network starts from a seeded random init.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from torch import nn

REQUIRED = os.environ.get("HEEDFUL_REQUIRE_TORCHVISION") == "1"
try:
    import torchvision.models as models
    from torchvision.models.feature_extraction import create_feature_extractor

    MISSING = None
except (ImportError, RuntimeError, OSError) as error:  # PyPI's build beside another torch
    MISSING = f"{type(error).__name__}: {error}"
    if not REQUIRED:
        pytest.skip(
            "torchvision does not import beside this torch; CI runs these tests in its vision "
            f"stage (.ci/run, item 4) with torch 2.14.1 and torchvision 0.29.1 ({MISSING})",
            allow_module_level=True,
        )

from image_models import scene_files  # noqa: E402

from heedful.models.pretrained import load_backbone_weights  # noqa: E402
from heedful.models.vision import (  # noqa: E402
    BackboneEncoder,
    VisionError,
    sinusoidal_encoding_2d,
    torchvision_trunk,
)


@pytest.fixture(autouse=True)
def _torchvision_required():
    """HEEDFUL_REQUIRE_TORCHVISION=1 and no torchvision: every test fails, naming why."""
    if MISSING is not None:
        pytest.fail(f"HEEDFUL_REQUIRE_TORCHVISION=1 but torchvision does not import: {MISSING}")


# name: (torchvision's node for the last feature map, the head after the pooling)
FAMILIES = {
    "resnet18": ("layer4", lambda net: net.fc),
    "mobilenet_v3_small": ("features", lambda net: net.classifier),
    "efficientnet_b0": ("features", lambda net: net.classifier),
}


def _classifier(name: str, seed: int) -> nn.Module:
    """torchvision's whole classifier, random init from `seed`, with its BatchNorms' running
    statistics randomised too (a fresh net's are 0 and 1, which any file would match)."""
    torch.manual_seed(seed)
    net = models.__dict__[name](weights=None)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return net.eval()


def _copy_trunk_into(net: nn.Module, trunk: nn.Module) -> None:
    """The trunk's tensors into the classifier, under the classifier's names (a ResNet's
    own, the others' under `features.`); the head keeps its own."""
    theirs = net.state_dict()
    for key, value in trunk.state_dict().items():
        name = key if key in theirs else f"features.{key}"
        assert theirs[name].shape == value.shape, name
        theirs[name] = value
    net.load_state_dict(theirs)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_trunk_is_torchvision_s_network_up_to_its_last_feature_map(name):
    """Same channels as the head reads, same map as torchvision's own feature extractor (the
    FX-traced classifier cut at its last feature node), and the classifier's logits are the
    head over the trunk's map averaged over the grid: nothing of the network is lost or kept
    beyond the pooling. All in float64, on an image that is not square-friendly (72 px)."""
    node, head_of = FAMILIES[name]
    torch.manual_seed(0)
    trunk, channels = torchvision_trunk(name)
    net = _classifier(name, seed=1)
    _copy_trunk_into(net, trunk)
    trunk, net = trunk.double().eval(), net.double()
    head = head_of(net)
    assert channels == next(m for m in head.modules() if isinstance(m, nn.Linear)).in_features
    images = torch.rand(
        2, 3, 72, 72, dtype=torch.float64, generator=torch.Generator().manual_seed(3)
    )
    with torch.no_grad():
        mine = trunk(images)  # (B, C, gh, gw)
        reference = create_feature_extractor(net, {node: "map"})(images)["map"]
        torch.testing.assert_close(mine, reference, rtol=0, atol=0)
        logits = head(mine.mean((2, 3)))  # global average pooling, then the head
        torch.testing.assert_close(logits, net(images), rtol=1e-12, atol=1e-12)
    assert mine.shape[1] == channels


@pytest.mark.parametrize("size", [32, 64, 72, 97])
@pytest.mark.parametrize("name", FAMILIES)
def test_the_encoder_s_grid_is_the_feature_map_s(name, size):
    """BackboneEncoder.grid (a meta-tensor probe) is the grid a real image makes, and the
    regions are that grid's cells, row-major, projected to D."""
    trunk, channels = torchvision_trunk(name)
    encoder = BackboneEncoder(trunk, channels, d_model=16).eval()
    probed = encoder.grid(size)  # its probe is float32, as heedful's models are
    encoder.double()
    images = torch.rand(1, 3, size, size, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(size))  # fmt: skip
    with torch.no_grad():
        feature_map = trunk(images)  # (1, C, gh, gw)
        regions = encoder(images)
    grid = tuple(feature_map.shape[2:])
    assert probed == grid == regions.grid
    assert regions.states.shape == (1, grid[0] * grid[1], 16)  # (B, S, D)
    s = (grid[0] - 1) * grid[1]  # the cell at row gh-1, column 0 is region (gh-1)·gw
    cell = feature_map[0, :, grid[0] - 1, 0]  # (C,)
    w, b = encoder.project.weight, encoder.project.bias
    expected = w @ cell + b + sinusoidal_encoding_2d(*grid, 16, torch.float64)[s]
    # the encoder makes its position table in float32 (values in [-1, 1]): ~6e-8 of rounding
    torch.testing.assert_close(regions.states[0, s], expected, rtol=0, atol=1e-7)


def _write_weights(net: nn.Module, path):
    """net's state dict as heedful reads it: safetensors by the suffix, else torch.save."""
    state = net.state_dict()
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()}, path)
    else:
        torch.save(state, path)
    return state


def _items(tmp_path):
    """One captioned image, enough to train a tokenizer: the experiment's own inputs."""
    return [(tmp_path / "x.png", ["a red circle", "a blue square"])]


ARCHS = {  # the decoders' smallest settings
    "transformer": ["model.d_model=16", "model.num_heads=2", "model.decoder_layers=1",
                    "model.d_ff=32"],
    "rnn": ["model.arch=rnn", "model.d_model=8", "model.hidden_size=16"],
}  # fmt: skip


def _experiment_model(tmp_path, arch, overrides):
    """The model `heedful train` starts from (captions_experiment._model): built with the
    run's seed, then the backbone's weights from model.encoder.weights when given."""
    from heedful.config import load_config
    from heedful.data.images import ImageTransform
    from heedful.training.captions_task import _model

    config = load_config(
        None, [*ARCHS[arch], "model.image_size=64", "data.tokenizer=char", *overrides]
    )
    model, _, _ = _model(config, None, _items(tmp_path), ImageTransform(size=64))
    return model


@pytest.mark.parametrize(
    "name,suffix,arch",
    [
        ("resnet18", ".pth", "transformer"),
        ("resnet18", ".safetensors", "transformer"),
        ("mobilenet_v3_small", ".safetensors", "transformer"),
        ("resnet18", ".safetensors", "rnn"),
    ],
)  # fmt: skip
def test_weights_from_a_local_file_load_into_the_trunk_and_nowhere_else(
    tmp_path, name, suffix, arch
):
    """The trunk's every tensor (parameters and BatchNorm statistics) is the file's, exactly;
    the classifier head is not loaded; every other tensor is what the same seed gives without
    the file (so the file touched nothing else)."""
    path = tmp_path / f"{name}{suffix}"
    state = _write_weights(_classifier(name, seed=11), path)
    encoder = [f"model.encoder=torchvision:{name}"]
    loaded = _experiment_model(tmp_path, arch, [*encoder, f"model.encoder_weights={path}"])
    plain = _experiment_model(tmp_path, arch, encoder)
    trunk = loaded.encoder.trunk.state_dict()
    head = {k for k in state if k.startswith(("fc.", "classifier."))}
    assert head and not any(k.startswith(("fc.", "classifier.")) for k in trunk)
    for key, value in trunk.items():
        source = state[key] if key in state else state[f"features.{key}"]
        assert torch.equal(value, source), key
    assert len(trunk) == len(state) - len(head)  # every tensor but the head's was taken
    moved = [k for k, v in plain.encoder.trunk.state_dict().items()
             if not torch.equal(v, trunk[k])]  # fmt: skip
    random = {k for k, v in trunk.items() if v.dim() == 4 or "running_" in k}  # convs, stats
    assert random and random <= set(moved)  # so the check above is not the random init's
    others, theirs = loaded.state_dict(), plain.state_dict()
    assert len(others) == len(theirs) > len(trunk)
    for key in others:
        if "trunk." not in key:
            assert torch.equal(others[key], theirs[key]), key


def _resnet18_state():
    return _classifier("resnet18", seed=5).state_dict()


def _without(key):
    def make():
        state = _resnet18_state()
        del state[key]
        return state

    return make


def _reshaped(key, shape):
    def make():
        state = _resnet18_state()
        state[key] = torch.zeros(shape)
        return state

    return make


# Weights files that do not fit a torchvision:resnet18 encoder: (what the file holds, how it is
# written, the VisionError's words). Every message names model.encoder.weights and the file.
BAD_WEIGHTS = {
    "another-family": (lambda: _classifier("mobilenet_v3_small", 5).state_dict(), "st",
                       "does not fit the backbone (missing ['bn1.bias'"),
    "bottleneck-resnet": (lambda: _classifier("resnet50", 5).state_dict(), "pth",
                          "layer1.0.conv1.weight is [64, 64, 1, 1], the backbone's is [64,"),
    "missing-statistics": (_without("layer4.1.bn2.running_var"), "pth",
                           "missing ['layer4.1.bn2.running_var']"),
    "missing-parameter": (_without("conv1.weight"), "st", "missing ['conv1.weight']"),
    "wrong-shape": (_reshaped("conv1.weight", (64, 3, 5, 5)), "st",
                    "conv1.weight is [64, 3, 5, 5], the backbone's is [64, 3, 7, 7]"),
    "head-only": (lambda: {"fc.weight": torch.zeros(1000, 512)}, "pth", "does not fit"),
    "empty": (lambda: {}, "pth", "does not fit the backbone"),
    "a-list": (lambda: [torch.zeros(3)], "pth", "holds no state dict"),
    "truncated-pth": (_resnet18_state, "pth-half", "cannot read"),
    "truncated-safetensors": (_resnet18_state, "st-half", "cannot read"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_WEIGHTS)
def test_a_weights_file_that_does_not_fit_is_refused_by_name(tmp_path, case):
    from safetensors.torch import save_file

    make, how, words = BAD_WEIGHTS[case]
    state = make()
    path = tmp_path / ("w.safetensors" if how.startswith("st") else "w.pth")
    if how.startswith("st"):
        save_file({k: v.contiguous() for k, v in state.items()}, path)
    else:
        torch.save(state, path)
    if how.endswith("-half"):
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    encoder = BackboneEncoder(*torchvision_trunk("resnet18"), d_model=16)
    before = {k: v.clone() for k, v in encoder.trunk.state_dict().items()}
    with pytest.raises(VisionError, match="model.encoder.weights") as error:
        load_backbone_weights(encoder, path)
    assert words in str(error.value) and str(path) in str(error.value)
    for key, value in encoder.trunk.state_dict().items():  # refused before one tensor is copied
        assert torch.equal(value, before[key]), key


@pytest.mark.parametrize(
    ("deeper", "smaller"), [("resnet34", "resnet18"), ("mobilenet_v3_large", "mobilenet_v3_small")]
)
def test_a_deeper_network_of_the_same_family_is_refused(tmp_path, deeper, smaller):
    """resnet34's file holds every resnet18 tensor with its shape: its extra blocks, among
    the trunk's own names, must not be dropped without a word; nothing is copied either."""
    torch.save(_classifier(deeper, seed=5).state_dict(), tmp_path / "w.pth")
    encoder = BackboneEncoder(*torchvision_trunk(smaller), d_model=16)
    before = {k: v.clone() for k, v in encoder.trunk.state_dict().items()}
    with pytest.raises(VisionError, match="model.encoder.weights"):
        load_backbone_weights(encoder, tmp_path / "w.pth")
    for key, value in encoder.trunk.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_a_caption_model_on_resnet18_trains_reloads_captions_and_resumes(tmp_path):
    """`heedful train` with model.encoder torchvision:resnet18 and a local weights file: two
    steps, then two more on resume, give the weights (BatchNorm statistics included) four
    uninterrupted steps give; the model directory reloads as a Translator that captions a
    picture over resnet18's 2 × 2 grid of a 64-pixel image."""
    import heedful
    from heedful.checkpoint.model_dir import load_model_dir
    from heedful.config import load_config
    from heedful.inference.translator import Translator
    from heedful.training.experiment import train_from_config

    scene_files(tmp_path, 8, seed=1)
    scenes, _ = scene_files(tmp_path, 2, seed=2)
    weights = tmp_path / "resnet18.safetensors"
    _write_weights(_classifier("resnet18", seed=21), weights)
    (tmp_path / "config.yaml").write_text(
        f"""data:
  images: {tmp_path / "images"}
  captions: {tmp_path / "captions-1.txt"}
  valid_captions: {tmp_path / "captions-2.txt"}
  tokenizer: char
model: {{encoder: "torchvision:resnet18", encoder_weights: {weights}, image_size: 64,
         d_model: 16, num_heads: 2, decoder_layers: 1, d_ff: 32, attention_penalty: 0.5}}
train: {{batch_tokens: 160, eval_every: 2, log_every: 1, max_steps: 4, warmup_steps: 2}}
generation: {{num_beams: 1, max_len_ratio: 0.0, max_len_offset: 12}}
"""
    )
    quiet = dict(progress=False, echo=lambda line: None)
    config = load_config(tmp_path / "config.yaml", ["train.max_steps=2"])
    assert train_from_config(config, tmp_path / "run", **quiet).steps == 2
    assert (tmp_path / "run" / "latest" / "model.safetensors").is_file()
    config = load_config(tmp_path / "config.yaml")
    resumed = train_from_config(config, tmp_path / "run", **quiet)
    straight = train_from_config(config, tmp_path / "straight", **quiet)
    assert resumed.steps == straight.steps == 4
    loaded = load_model_dir(tmp_path / "run" / "latest")
    assert loaded.model_config.encoder.kind == "torchvision:resnet18"
    a, b = loaded.model.state_dict(), load_model_dir(tmp_path / "straight" / "latest")
    b = b.model.state_dict()
    assert any(k.endswith("running_mean") for k in a)  # BatchNorm's statistics are saved
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-6, msg=name)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [m for m in metrics if "bleu" in m and np.isfinite(m["loss"])]

    captioner = Translator.load(tmp_path / "run" / "latest")
    assert captioner.source.grid == (2, 2)
    png = tmp_path / "images" / "s2-0.png"
    [from_file] = captioner.translate([png], need_weights=True)
    [from_array] = heedful.load(tmp_path / "run" / "latest").translate([scenes.pixels(0)])
    assert isinstance(from_file.text, str) and from_file.text == from_array.text
    assert from_file.grid == (2, 2)
    assert from_file.attention.shape == (len(from_file.tokens), 1, 2, 4)  # (T, L, H, S)
    torch.testing.assert_close(from_file.weights().sum(-1), torch.ones(len(from_file.tokens)))
