"""Pretrained backbone weights from a local file (model.encoder.weights), never a download.

The file is what people have: a torchvision classifier's state dict (a .pth, read with
weights_only=True so no code in a pickle can run) or the same tensors as safetensors. Its
keys name the whole classifier; heedful's trunk is the classifier without its head, under
the same names (a ResNet's conv1, layer1, ...) or under `features.` (VGG, MobileNet, ...).

Every check runs before one tensor is copied, so a refused file leaves the trunk as it was:
- each trunk tensor must be in the file, with its shape;
- what the file holds beyond the trunk must be the head. A deeper network of the same
  family (resnet34's file for resnet18) holds every resnet18 tensor with the same shape; its
  extra blocks sit among the trunk's own names (layer1.2...), which no head does, so it is
  refused rather than silently cut down to the smaller network.
"""

from __future__ import annotations

from pathlib import Path

import torch

from heedful.models.vision import BackboneEncoder, VisionError


def load_backbone_weights(encoder: BackboneEncoder, path: str | Path) -> None:
    """Copy the trunk's tensors from the file at `path` into encoder.trunk (its head is left
    out), or raise VisionError naming model.encoder.weights, the file and what does not fit."""
    path = Path(path)
    if not path.is_file():
        raise VisionError(f"model.encoder.weights: no such file {path}")
    state = _read(path)
    mine = encoder.trunk.state_dict()
    renamed, rest = _match_keys(list(mine), state)  # rest: tensors of no head
    missing = sorted(set(mine) - set(renamed))
    if missing:
        raise VisionError(
            f"model.encoder.weights: {path} does not fit the backbone (missing {missing[:5]})"
        )
    for key, tensor in renamed.items():
        if not isinstance(tensor, torch.Tensor) or tensor.shape != mine[key].shape:
            got = list(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise VisionError(
                f"model.encoder.weights: {path}: {key} is {got}, the backbone's is "
                f"{list(mine[key].shape)}"
            )
    if rest:
        raise VisionError(
            f"model.encoder.weights: {path} holds more layers than the backbone ({rest[:3]}): "
            "a deeper network's file?"
        )
    encoder.trunk.load_state_dict(renamed)


def _read(path: Path) -> dict:
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any unreadable file is the same error to a user
        raise VisionError(f"model.encoder.weights: cannot read {path}: {error}") from None
    if not isinstance(state, dict):
        raise VisionError(f"model.encoder.weights: {path} holds no state dict of tensors")
    return state


def _match_keys(wanted: list[str], state: dict) -> tuple[dict, list[str]]:
    """(the trunk's tensors, the file's keys that are neither the trunk's nor a head's).

    The trunk's tensors are under the same names (a ResNet's) or under `features.` (VGG,
    MobileNet, ...). Beyond them a classifier's file holds its head (fc.weight,
    classifier.1.bias), under names of its own; a key that sits among the trunk's names (a
    first part the trunk has, or a Sequential's index) is a layer the backbone does not have."""
    prefixed = [k for k in state if k.startswith("features.")]
    if all(k in state for k in wanted) or not prefixed:
        found = {k: state[k] for k in wanted if k in state}
        tops = {k.split(".")[0] for k in wanted}
        rest = [k for k in state if k not in found]
        return found, [k for k in rest if k.split(".")[0] in tops or k.split(".")[0].isdigit()]
    inside = {k.removeprefix("features."): state[k] for k in prefixed}
    found = {k: inside[k] for k in wanted if k in inside}
    return found, [f"features.{k}" for k in inside if k not in found]
