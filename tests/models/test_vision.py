"""Image encoders and captioning models (models/vision.py): shapes, masks, grids, the 2-D
positions and Show, Attend and Tell's regulariser against float64 references, and the
search contract (incremental decoding equals teacher forcing)."""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from dataclasses import asdict, replace

import pytest
import torch
from torch import nn

from heedful.config import (
    CNNEncoderConfig,
    ConfigError,
    DecoderConfig,
    ModelConfig,
    ViTEncoderConfig,
    read_model,
)
from heedful.models.build import build_model
from heedful.models.encoder_decoder import attention_penalty
from heedful.models.pretrained import load_backbone_weights
from heedful.models.vision import (
    BackboneEncoder,
    CNNEncoder,
    VisionError,
    ViTEncoder,
    coordinate_channels,
    sinusoidal_encoding_2d,
    torchvision_trunk,
)

CNN = CNNEncoderConfig(image_size=32, channels=8, blocks=2)
CONFIGS = {
    "cnn-transformer": ModelConfig(
        d_model=16, num_heads=2, d_ff=32, dropout=0.0, encoder=CNN, decoder=DecoderConfig(layers=2)
    ),
    "cnn-rnn-bahdanau": ModelConfig(
        arch="rnn", d_model=8, hidden_size=16, dropout=0.0, encoder=CNN
    ),
    "cnn-coords-layers-transformer": ModelConfig(
        d_model=16,
        num_heads=2,
        d_ff=32,
        dropout=0.0,
        norm="pre",
        encoder=replace(CNN, coords=True, layers=1),
        decoder=DecoderConfig(layers=1),
    ),
    "cnn-coords-rnn": ModelConfig(
        arch="rnn", d_model=8, hidden_size=16, dropout=0.0, encoder=replace(CNN, coords=True)
    ),
    "cnn-rnn-luong-lstm": ModelConfig(
        arch="rnn",
        d_model=8,
        hidden_size=16,
        dropout=0.0,
        rnn_cell="lstm",
        rnn_layers=2,
        encoder=CNN,
        decoder=DecoderConfig(attention="luong-general"),
    ),
    "vit-transformer": ModelConfig(
        d_model=16,
        num_heads=2,
        d_ff=32,
        dropout=0.0,
        norm="pre",
        encoder=ViTEncoderConfig(image_size=32, patch_size=8, layers=2),
        decoder=DecoderConfig(layers=1),
    ),  # fmt: skip
}


def small_trunk() -> nn.Sequential:
    """A real convolutional trunk with a backbone's interface: (B, 3, H, W) -> (B, 12, H/4, W/4),
    its layers named as a classifier names them (as torchvision_trunk keeps a ResNet's)."""
    return nn.Sequential(
        OrderedDict(
            conv1=nn.Conv2d(3, 6, 3, stride=2, padding=1), bn1=nn.BatchNorm2d(6), relu=nn.ReLU(),
            conv2=nn.Conv2d(6, 12, 3, stride=2, padding=1),
        )
    )  # fmt: skip


@pytest.mark.parametrize(
    "encoder, grid",
    [
        (CNNEncoder(16, channels=4, blocks=3), (4, 4)),  # 32 halved three times
        (CNNEncoder(16, channels=4, blocks=3, coords=True, num_layers=1, num_heads=2), (4, 4)),
        (ViTEncoder(32, 8, 16, num_heads=2, num_layers=1, d_ff=32), (4, 4)),
        (BackboneEncoder(small_trunk(), 12, 16), (8, 8)),
    ],
    ids=["cnn", "cnn-coords-layers", "vit", "backbone"],
)
def test_encoders_give_regions_on_their_grid(encoder, grid):
    encoder.eval()
    regions = encoder(torch.randn(3, 3, 32, 32), need_weights=True)
    assert regions.states.shape == (3, grid[0] * grid[1], 16)
    assert regions.grid == grid == encoder.grid(32)
    if regions.self_attention is not None:  # over all regions, rows summing to 1
        weights = regions.self_attention
        assert weights.shape == (3, 1, 2, 16, 16)
        torch.testing.assert_close(weights.sum(-1), torch.ones(3, 1, 2, 16))


def test_a_region_reads_only_its_own_part_of_the_image():
    """Region s = i·gw + j of a ViT's patch embedding covers rows [8i, 8i + 8) and columns
    [8j, 8j + 8): changing one patch's pixels changes that region's embedding alone."""
    vit = ViTEncoder(32, 8, 16, num_heads=2, num_layers=0, d_ff=32).eval()
    images = torch.randn(1, 3, 32, 32)
    changed = images.clone()
    changed[:, :, 8:16, 16:24] += 1.0  # the patch at row 1, column 2
    diff = (vit(changed).states - vit(images).states).abs().sum(-1)[0]  # (S,)
    assert diff.nonzero().flatten().tolist() == [1 * 4 + 2]


def reference_2d(gh: int, gw: int, d: int) -> torch.Tensor:
    """PE[i·gw + j] = [PE_1d(i) over d/2 dims, PE_1d(j) over d/2 dims], in float64 math."""
    half, out = d // 2, torch.zeros(gh * gw, d, dtype=torch.float64)
    for i in range(gh):
        for j in range(gw):
            for k in range(half):
                angle_i = i / 10000 ** ((k - k % 2) / half)
                angle_j = j / 10000 ** ((k - k % 2) / half)
                trig = math.sin if k % 2 == 0 else math.cos
                out[i * gw + j, k], out[i * gw + j, half + k] = trig(angle_i), trig(angle_j)
    return out


@pytest.mark.parametrize("gh, gw, d", [(3, 5, 8), (4, 4, 12), (1, 7, 6)])
def test_2d_positions_match_a_float64_reference(gh, gw, d):
    torch.testing.assert_close(
        sinusoidal_encoding_2d(gh, gw, d, torch.float64), reference_2d(gh, gw, d)
    )
    with pytest.raises(ValueError, match="even"):
        sinusoidal_encoding_2d(2, 2, 7)


def test_coordinate_channels_match_a_float64_reference():
    """Channel 0 is the pixel centre's column, channel 1 its row, each from −1 at the image's
    edge to +1 at the other: x = (2j + 1)/W − 1, y = (2i + 1)/H − 1, the same for every image."""
    h, w = 3, 5
    planes = coordinate_channels(torch.zeros(2, 3, h, w, dtype=torch.float64))
    assert planes.shape == (2, 2, h, w)
    for i in range(h):
        for j in range(w):
            expected = [(2 * j + 1) / w - 1, (2 * i + 1) / h - 1]
            for b in range(2):
                assert planes[b, :, i, j].tolist() == pytest.approx(expected, abs=1e-15)


def test_coordconv_lets_a_cell_know_where_it_is():
    """A blank image gives every interior cell of a plain CNN the same features (only the
    zero padding at the borders tells them apart); with the coordinate channels they differ."""
    torch.manual_seed(0)
    blank = torch.zeros(1, 3, 64, 64)
    for coords, distinct in ((False, False), (True, True)):
        cnn = CNNEncoder(8, channels=4, blocks=3, coords=coords).eval()
        cells = cnn.features(
            blank if not coords else torch.cat([blank, coordinate_channels(blank)], 1)
        )[0, :, 2:6, 2:6]  # (C, 4, 4): no border
        spread = (cells - cells[:, :1, :1]).abs().amax().item()
        assert (spread > 1e-4) is distinct, coords


def test_attention_penalty_matches_a_float64_reference():
    torch.manual_seed(0)
    cross = torch.rand(2, 3, 2, 5, 6, dtype=torch.float64).softmax(-1)  # (B, L, H, T, S)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    expected = 0.0
    for b in range(2):
        for s in range(6):
            coverage = sum(
                cross[b, :, :, t, s].mean().item() for t in range(5) if mask[b, t]
            )  # Σ_t α_ts, α averaged over layers and heads
            expected += (1.0 - coverage) ** 2
    assert attention_penalty(cross, mask).item() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("name", CONFIGS)
def test_captioners_decode_incrementally_as_they_are_taught(name):
    """decode_step, as every search calls it, gives the teacher-forced forward's log-probs;
    the memory mask is all true; cross-attention rows sum to 1 over the S regions."""
    torch.manual_seed(0)
    model = build_model(CONFIGS[name], 4, 11).eval()
    images, tgt_in = torch.randn(2, 3, 32, 32), torch.randint(4, 11, (2, 5))
    out = model(images, tgt_in, need_weights=True)
    regions = math.prod(model.grid(32))
    assert out.logits.shape == (2, 5, 11)
    assert out.attention.cross.shape[-2:] == (5, regions)
    torch.testing.assert_close(
        out.attention.cross.sum(-1), torch.ones(out.attention.cross.shape[:-1])
    )
    memory = model.encode(images)
    mask = memory.mask
    assert mask.shape == (2, 1, regions) and bool(mask.all())
    state, steps = model.init_state(memory), []
    for t in range(5):
        log_probs, state, _ = model.decode_step(memory, state, tgt_in[:, t])
        steps.append(log_probs)
    torch.testing.assert_close(
        torch.stack(steps, 1), out.logits.log_softmax(-1), atol=1e-5, rtol=1e-4
    )


def test_the_rnn_decoder_starts_from_the_mean_region():
    torch.manual_seed(0)
    model = build_model(CONFIGS["cnn-rnn-bahdanau"], 4, 11).eval()
    images = torch.randn(2, 3, 32, 32)
    mean = model.encoder(images).states.mean(1)  # (B, N)
    [h0] = model.init_state(model.encode(images)).hidden
    torch.testing.assert_close(h0[0], torch.tanh(model.decoder.bridge(mean)))


@pytest.mark.parametrize("name", ["cnn-rnn-bahdanau", "cnn-transformer"])
def test_the_penalty_is_added_while_training_only(name):
    torch.manual_seed(0)
    config = CONFIGS[name]
    penalised = replace(config, decoder=replace(config.decoder, attention_penalty=0.5))
    model = build_model(penalised, 4, 11)
    images, tgt_in = torch.randn(2, 3, 32, 32), torch.randint(4, 11, (2, 5))
    tgt_in[1, 3:] = 0  # padding: those steps do not count
    out = model.train()(images, tgt_in)
    assert out.attention is None  # computed for the penalty, not returned unasked
    with torch.no_grad():
        model.eval()
        cross = model(images, tgt_in, need_weights=True).attention.cross
    expected = 0.5 * attention_penalty(cross.double(), tgt_in != 0)
    torch.testing.assert_close(out.penalty.double(), expected, rtol=1e-5, atol=1e-6)
    out.penalty.backward()  # it trains the attention
    assert model.eval()(images, tgt_in).penalty is None


def test_a_backbone_loads_a_classifier_s_weights_by_name(tmp_path):
    """A whole classifier's file (conv1, bn1, ... as torchvision names them; a head too)
    loads into the trunk, which keeps those names; a file without them is refused."""
    from safetensors.torch import save_file

    classifier = nn.Module()
    trunk = small_trunk()
    for name, layer in trunk.named_children():
        classifier.add_module(name, layer)
    classifier.fc = nn.Linear(12, 5)
    with torch.no_grad():
        trunk.bn1.running_mean.uniform_()  # buffers load too
    save_file(
        {k: v.contiguous() for k, v in classifier.state_dict().items()}, tmp_path / "w.safetensors"
    )
    encoder = BackboneEncoder(small_trunk(), 12, 16)
    load_backbone_weights(encoder, tmp_path / "w.safetensors")
    for mine, theirs in zip(encoder.trunk.state_dict().values(), trunk.state_dict().values()):
        torch.testing.assert_close(mine, theirs)
    save_file({"fc.weight": torch.zeros(5, 12)}, tmp_path / "head.safetensors")
    with pytest.raises(VisionError, match="does not fit the backbone"):
        load_backbone_weights(encoder, tmp_path / "head.safetensors")
    (tmp_path / "junk.pth").write_bytes(b"not a state dict")
    with pytest.raises(VisionError, match="cannot read"):
        load_backbone_weights(encoder, tmp_path / "junk.pth")
    with pytest.raises(VisionError, match="no such file"):
        load_backbone_weights(encoder, tmp_path / "missing.safetensors")


def test_torchvision_backbones_name_what_is_wrong():
    """torchvision missing or built for another torch (PyPI's CUDA wheels beside a CPU torch
    fail with 'operator torchvision::nms does not exist'): a VisionError saying so."""
    try:
        import torchvision.models  # noqa: F401
    except (ImportError, RuntimeError, OSError):
        if os.environ.get("HEEDFUL_REQUIRE_TORCHVISION") == "1":  # CI's vision stage
            pytest.fail("HEEDFUL_REQUIRE_TORCHVISION=1 but torchvision does not import")
        with pytest.raises(VisionError, match="needs torchvision"):
            torchvision_trunk("resnet18")
        return
    trunk, channels = torchvision_trunk("resnet18")
    assert channels == 512 and trunk(torch.zeros(1, 3, 64, 64)).shape == (1, 512, 2, 2)
    with pytest.raises(VisionError, match="no model named"):
        torchvision_trunk("no_such_net")


BAD_CONFIGS = {
    "row0-unknown-encoder": (dict(encoder="pixels"), "model.encoder: 'pixels' is not one of"),
    "row0-empty-encoder": (dict(encoder=""), "model.encoder"),
    "row0-torchvision-without-name": (dict(encoder="torchvision:"), "does not name"),
    "row0-torchvision-bad-name": (dict(encoder="torchvision:../x"), "does not name"),
    "row0-zero-image-size": (dict(encoder="cnn", image_size=0), "model.image_size"),
    "row0-nan-penalty": (dict(encoder="cnn", attention_penalty=float("nan")), "attention_penalty"),
    "row0-inf-penalty": (dict(encoder="cnn", attention_penalty=float("inf")), "attention_penalty"),
    "row0-negative-penalty": (dict(encoder="cnn", attention_penalty=-1.0), "attention_penalty"),
    "row0-huge-blocks": (dict(encoder="cnn", image_size=32, cnn_blocks=6), "cnn_blocks"),
    "row0-negative-cnn-layers": (dict(encoder="cnn", cnn_layers=-1), "model.cnn_layers"),
    "row0-fractional-cnn-layers": (dict(encoder="cnn", cnn_layers=1.5), "model.cnn_layers"),
    "row0-string-cnn-coords": (dict(encoder="cnn", cnn_coords="yes"), "model.cnn_coords"),
    "cnn-layers-under-rnn": (
        dict(encoder="cnn", arch="rnn", cnn_layers=1),
        "only arch transformer reads",
    ),
    "patch-leaves-pixels": (dict(encoder="vit", image_size=30, patch_size=8), "must divide"),
    "vit-under-rnn": (dict(encoder="vit", arch="rnn"), "use model.arch transformer"),
    "local-attention-on-a-grid": (
        dict(encoder="cnn", arch="rnn", attention="luong-local-m"),
        "lie on a grid",
    ),
    "copy-from-an-image": (dict(encoder="cnn", arch="rnn", copy=True), "cannot copy"),
    "penalty-without-attention": (
        dict(encoder="cnn", arch="rnn", attention="none", attention_penalty=1.0),
        "has none",
    ),
    # the flat keys that became one, model.encoder.layers: each is read by its own kinds
    "encoder-layers-of-a-cnn": (
        dict(encoder="cnn", encoder_layers=3),
        "model.encoder_layers: only model.encoder text / vit uses it",
    ),
    "cnn-layers-of-a-vit": (
        dict(encoder="vit", cnn_layers=1),
        "model.cnn_layers: only model.encoder cnn",
    ),
    # the sections (issue 27, item 6): the same mistakes, named by their nested paths
    "nested-unknown-kind": (
        dict(encoder={"kind": "pixels"}),
        "model.encoder.kind: 'pixels' is not one of",
    ),
    "nested-kind-a-number": (dict(encoder={"kind": 3}), "model.encoder.kind: expected str"),
    "nested-encoder-a-string-beside-a-section": (
        dict(encoder="cnn", decoder=3),
        "model.decoder: expected a mapping",
    ),
    "nested-zero-image-size": (
        dict(encoder={"kind": "cnn", "image_size": 0}),
        "model.encoder.image_size: must be > 0",
    ),
    "nested-negative-cnn-layers": (
        dict(encoder={"kind": "cnn", "layers": -1}),
        "model.encoder.layers: must be a whole number >= 0",
    ),
    "nested-string-coords": (
        dict(encoder={"kind": "cnn", "coords": "yes"}),
        "model.encoder.coords: expected true or false",
    ),
    "nested-patch-of-a-cnn": (
        dict(encoder={"kind": "cnn", "patch_size": 4}),
        "model.encoder.patch_size: only model.encoder.kind vit uses it, this one is cnn",
    ),
    "nested-freeze-a-vit": (
        dict(encoder={"kind": "vit", "freeze": True}),
        "model.encoder.freeze: a ViT's patch embedding",
    ),
    "nested-weights-of-a-text-model": (
        dict(encoder={"weights": "w.pt"}),
        "model.encoder.weights: only model.encoder.kind torchvision:<name> uses it",
    ),
    "nested-penalty-of-a-text-model": (
        dict(decoder={"attention_penalty": 1.0}),
        "model.decoder.attention_penalty: only model.encoder.kind cnn / vit",
    ),
    "nested-cnn-layers-under-rnn": (
        dict(arch="rnn", encoder={"kind": "cnn", "layers": 1}),
        "model.encoder.layers: the CNN's encoder layers .* only arch transformer reads",
    ),
    "nested-copy-from-an-image": (
        dict(arch="rnn", encoder={"kind": "cnn"}, decoder={"copy": True}),
        "model.decoder.copy: a caption cannot copy",
    ),
    # a key given flat and nested at once
    "clash-flat-and-nested": (
        dict(encoder={"kind": "cnn", "blocks": 2}, cnn_blocks=3),
        "model.cnn_blocks and model.encoder.blocks: one key given twice",
    ),
}


@pytest.mark.parametrize("case", BAD_CONFIGS)
def test_bad_image_configs_name_the_key(case):
    """Read as a model directory's config.json is (flat or nested, config/flat.py)."""
    fields, message = BAD_CONFIGS[case]
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        read_model(fields)


def test_image_keys_of_a_text_model_are_errors_and_left_out_of_its_directory():
    with pytest.raises(ConfigError, match="model.attention_penalty: only model.encoder"):
        read_model({"attention_penalty": 1.0})
    with pytest.raises(ConfigError, match="model.patch_size: only model.encoder vit"):
        read_model({"encoder": "cnn", "patch_size": 4})
    text = ModelConfig().used()
    # the text Transformer's keys, nor its decoder's penalty
    assert text["encoder"] == {"kind": "text", "layers": 2, "share_embeddings": False}
    assert text["decoder"] == {"layers": 2, "tie_embeddings": False}
    cnn = ModelConfig(encoder=CNN).used()
    assert cnn["encoder"] == {**asdict(CNN), "kind": "cnn"}  # every key of a CNN
    assert cnn["decoder"]["attention_penalty"] == 0.0
