"""data/features.py: a frozen encoder's features cached on disk are the encoder's own, read back
instead of computed, and computed again when the encoder, the transform or the entry changes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from heedful.data.features import cache_key, cached_features
from heedful.data.images import ImageError, ImageTransform, load_image

TRANSFORM = ImageTransform(size=8)


class GridEncoder(torch.nn.Module):
    """A small real CNN: (B, 3, 8, 8) -> a 4 × 4 grid of 6-d regions, (B, 16, 6)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, stride=2, padding=1)
        self.norm = torch.nn.BatchNorm2d(6)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        grid = torch.relu(self.norm(self.conv(images)))  # (B, 6, 4, 4)
        return grid.flatten(2).transpose(1, 2)  # (B, 16, 6)


@pytest.fixture
def encoder():
    torch.manual_seed(0)
    model = GridEncoder()
    model.norm.running_mean.uniform_(-0.5, 0.5)  # statistics that eval mode must use
    return model


@pytest.fixture
def images(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for i in range(5):
        path = tmp_path / f"img{i}.png"
        Image.fromarray(rng.integers(0, 256, (9, 11, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    copy = tmp_path / "copy-of-img1.png"
    copy.write_bytes(paths[1].read_bytes())
    return paths + [copy]


def direct(encoder, paths, transform=TRANSFORM) -> torch.Tensor:
    encoder.eval()
    with torch.no_grad():
        out = encoder(torch.stack([load_image(p, transform) for p in paths]))
    encoder.train()
    return out


def entries(cache, encoder, transform=TRANSFORM):
    return sorted((cache / cache_key(encoder, transform)).glob("*.safetensors"))


def test_features_are_the_encoders_and_read_back(tmp_path, encoder, images):
    cache = tmp_path / "cache"
    first = cached_features(encoder, images, TRANSFORM, cache, batch_size=2)
    assert first.features.shape == (6, 16, 6) and first.features.dtype == torch.float32
    torch.testing.assert_close(first.features, direct(encoder, images), rtol=0, atol=1e-6)
    assert (first.computed, first.reused, first.rebuilt) == (5, 0, 0)  # a copy is one entry
    assert len(entries(cache, encoder)) == 5
    assert encoder.training  # put back as it was
    again = cached_features(encoder, images, TRANSFORM, cache)
    assert (again.computed, again.reused, again.rebuilt) == (0, 5, 0)
    assert torch.equal(again.features, first.features)


def test_new_weights_or_another_transform_compute_again(tmp_path, encoder, images):
    cache = tmp_path / "cache"
    cached_features(encoder, images, TRANSFORM, cache)
    with torch.no_grad():
        encoder.conv.bias[0] += 0.25
    changed = cached_features(encoder, images, TRANSFORM, cache)
    assert changed.computed == 5
    torch.testing.assert_close(changed.features, direct(encoder, images), rtol=0, atol=1e-6)
    encoder.norm.running_var.mul_(2)  # a buffer changes the features too
    assert cached_features(encoder, images, TRANSFORM, cache).computed == 5
    other = ImageTransform(size=8, mean=(0.5, 0.5, 0.5))
    assert cached_features(encoder, images, other, cache).computed == 5
    assert len(list(cache.iterdir())) == 4  # one folder per (encoder, transform)


def damage_truncated(path, encoder, images):
    path.write_bytes(path.read_bytes()[:-7])


def damage_other_image(path, encoder, images):
    others = [p for p in path.parent.iterdir() if p != path]
    path.write_bytes(others[0].read_bytes())  # a whole entry, of another image


def damage_non_finite(path, encoder, images):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        metadata, features = f.metadata(), f.get_tensor("features")
    features[0, 0] = float("nan")
    save_file({"features": features}, str(path), metadata=metadata)


def damage_empty(path, encoder, images):
    path.write_bytes(b"")


@pytest.mark.parametrize(
    "damage", [damage_truncated, damage_other_image, damage_non_finite, damage_empty]
)
def test_a_damaged_entry_is_computed_again(tmp_path, encoder, images, damage):
    cache = tmp_path / "cache"
    first = cached_features(encoder, images, TRANSFORM, cache)
    damage(entries(cache, encoder)[2], encoder, images)
    again = cached_features(encoder, images, TRANSFORM, cache)
    assert (again.computed, again.reused, again.rebuilt) == (0, 4, 1)
    torch.testing.assert_close(again.features, first.features, rtol=0, atol=1e-6)
    assert cached_features(encoder, images, TRANSFORM, cache).reused == 5  # and rewritten


def test_a_bad_image_or_encoder_is_named(tmp_path, encoder, images):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png")
    with pytest.raises(ImageError, match="bad.png: not an image"):
        cached_features(encoder, images + [bad], TRANSFORM, tmp_path / "cache")
    with pytest.raises(ValueError, match=r"\(B, S, d\); it gave \(5, 6, 4, 4\)"):
        cached_features(encoder.conv, images, TRANSFORM, tmp_path / "cache")
