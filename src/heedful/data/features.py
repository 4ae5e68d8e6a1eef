"""Features of a frozen image encoder cached on disk (safetensors): training a caption decoder
over a frozen backbone then decodes and encodes each image once, not once per epoch
(training/captions_task.py with model.encoder.freeze and data.source.feature_cache; the encoder
it is given there is models/frozen.py's Trunk, the part of the image encoder that does not
learn).

Layout: CACHE_DIR/KEY/SHA.safetensors, one file per distinct image content, holding "features"
(S, d) float32, and in its metadata the format, KEY and SHA. SHA is the SHA-256 of the image
file's bytes (a renamed or copied image is found again; an edited one is not). KEY is
`cache_key`: the SHA-256 of the encoder (its repr, so its architecture, and every parameter
and buffer: name, dtype, shape and bytes) and of the transform's size, mean and std. Anything
that changes the features changes KEY, so a stale entry is never read: it sits in another
folder (delete CACHE_DIR to reclaim the space).

Each file is written atomically (heedful.io), so a killed run leaves whole entries or none.
An entry that cannot be read, whose metadata is not its own, or that holds a tensor of another
type, rank or a non-finite value, is computed again and rewritten (CachedFeatures.rebuilt
counts them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from heedful.data.images import ImageTransform, image_bytes, load_image
from heedful.io import atomic_write_bytes

FORMAT = "heedful-features/1"


@dataclass
class CachedFeatures:
    """What cached_features returns: the features, and how many distinct images were read
    from the cache, computed, or computed again because their entry was damaged."""

    features: torch.Tensor  # (N, S, d) float32, in the order of the images given
    reused: int
    computed: int
    rebuilt: int


def weights_hash(encoder: torch.nn.Module) -> str:
    """SHA-256 of the encoder's architecture (its repr) and its state: parameters and buffers
    (batch-norm statistics change the features as much as weights do)."""
    digest = hashlib.sha256(repr(encoder).encode("utf-8"))
    for name, value in sorted(encoder.state_dict().items()):
        if not isinstance(value, torch.Tensor):  # extra state: whatever it is, as text
            digest.update(f"{name}|{value!r}".encode())
            continue
        tensor = value.detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def cache_key(encoder: torch.nn.Module, transform: ImageTransform) -> str:
    """The folder name under the cache directory: one per (encoder, preprocessing)."""
    pixels = {k: v for k, v in transform.to_dict().items() if k != "max_pixels"}  # no effect
    text = json.dumps(
        {"format": FORMAT, "encoder": weights_hash(encoder), "transform": pixels}, sort_keys=True
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _read_entry(path: Path, key: str, sha: str) -> torch.Tensor | None:
    """The cached (S, d) features of one image, or None if missing, damaged or not ours."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            if f.metadata() != {"format": FORMAT, "key": key, "image_sha256": sha}:
                return None
            if list(f.keys()) != ["features"]:
                return None
            features = f.get_tensor("features")
    except Exception:  # a truncated, empty or foreign file: safetensors' errors vary
        return None
    good = features.dtype == torch.float32 and features.dim() == 2 and features.numel() > 0
    return features if good and bool(torch.isfinite(features).all()) else None


def _write_entry(path: Path, features: torch.Tensor, key: str, sha: str) -> None:
    from safetensors.torch import save

    metadata = {"format": FORMAT, "key": key, "image_sha256": sha}
    atomic_write_bytes(path, save({"features": features.contiguous()}, metadata=metadata))


@torch.no_grad()
def _encode(encoder: torch.nn.Module, images: list[Path], transform: ImageTransform):
    """(B, S, d) float32 features of `images` on the CPU; a wrong output is a ValueError."""
    device = next(encoder.parameters(), torch.empty(0)).device
    batch = torch.stack([load_image(path, transform) for path in images]).to(device)
    out = encoder(batch)  # (B, S, d)
    if not isinstance(out, torch.Tensor) or out.dim() != 3 or out.shape[0] != len(images):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"the encoder must map (B, 3, H, W) to (B, S, d); it gave {shape}")
    out = out.detach().float().cpu()
    if not torch.isfinite(out).all():
        raise ValueError(f"the encoder gave non-finite features for one of {images}")
    return out


def cached_features(
    encoder: torch.nn.Module,
    images: Sequence[str | Path],
    transform: ImageTransform,
    cache_dir: str | Path,
    batch_size: int = 32,
) -> CachedFeatures:
    """The frozen `encoder`'s features of each image, read from `cache_dir` where they are
    there and computed (in eval mode, without gradients, `batch_size` images at a time) and
    written there where not. See the module docstring for the layout and what is rebuilt.
    A bad image is an ImageError naming it (the entries written before it stay good).
    """
    key = cache_key(encoder, transform)
    folder = Path(cache_dir) / key
    folder.mkdir(parents=True, exist_ok=True)
    shas = [hashlib.sha256(image_bytes(path, None)[0]).hexdigest() for path in images]
    found: dict[str, torch.Tensor] = {}
    missing: dict[str, Path] = {}  # sha -> one image with that content
    rebuilt = 0
    for sha, path in zip(shas, images):
        if sha in found or sha in missing:
            continue
        entry = folder / f"{sha}.safetensors"
        features = _read_entry(entry, key, sha)
        if features is None:
            missing[sha] = Path(path)
            rebuilt += entry.exists()
        else:
            found[sha] = features
    was_training = encoder.training
    encoder.eval()
    try:
        pending = list(missing.items())
        for start in range(0, len(pending), batch_size):
            chunk = pending[start : start + batch_size]
            out = _encode(encoder, [path for _, path in chunk], transform)  # (B, S, d)
            for (sha, _), features in zip(chunk, out):
                _write_entry(folder / f"{sha}.safetensors", features.clone(), key, sha)
                found[sha] = features
    finally:
        encoder.train(was_training)
    shapes = {tuple(found[sha].shape) for sha in found}
    if len(shapes) > 1:  # only a hand-edited cache mixes shapes under one key
        raise ValueError(f"{folder}: cached features of shapes {sorted(shapes)}; delete it")
    features = torch.stack([found[sha] for sha in shas]) if shas else torch.empty(0, 0, 0)
    return CachedFeatures(features, len(found) - len(missing), len(missing) - rebuilt, rebuilt)
