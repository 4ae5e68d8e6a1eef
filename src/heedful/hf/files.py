"""The files of a Hugging Face directory: all inside it, regular, and the weights they hold.

transformers opens whatever a directory points to: a symbolic link to a file elsewhere, or a
shard that model.safetensors.index.json names as "../../x" or "/abs/x". heedful reads a model
from its own directory only: every file in it resolves inside it (the one exception is the
Hugging Face cache, where snapshots/REV/NAME links to ../../blobs/HASH of the same model), is
a regular file (a FIFO would block the read for ever), and every shard the index lists is a
plain relative name inside it. The weights' headers (never their data) say how many numbers the
files hold, to compare with what config.json describes before anything is allocated.
"""

from __future__ import annotations

import math
import os
from pathlib import Path, PurePosixPath

from heedful.io import CheckpointError, read_json, regular_file

SAFETENSORS = "model.safetensors"
INDEX = "model.safetensors.index.json"
MAX_INDEX_BYTES = 64 << 20


def _inside(path: Path, root: Path, directory: Path) -> None:
    """A path whose target (symbolic links resolved) is in the directory, or a named error."""
    real = Path(os.path.realpath(path))
    if real == root or root in real.parents:
        return
    cache = root.parent.parent / "blobs"  # huggingface_hub's models--ORG--NAME/snapshots/REV
    if root.parent.name == "snapshots" and real.parent == cache:
        return
    raise CheckpointError(
        f"{path}: leads to {real}, outside {directory}; heedful reads a model's files from "
        "its own directory only: copy the file into it"
    )


def check_files(directory: Path) -> None:
    """Every entry of the directory inside it; the files among them regular ones."""
    root = Path(os.path.realpath(directory))
    for entry in sorted(directory.iterdir()):
        _inside(entry, root, directory)
        if not entry.is_dir():
            regular_file(entry)


def _shard_path(directory: Path, index: Path, tensor: str, name) -> Path:
    """A shard's name from the index's weight_map: a relative path with no '..'."""
    parts = PurePosixPath(name).parts if isinstance(name, str) else ()
    if not parts or PurePosixPath(name).is_absolute() or ".." in parts or "\\" in name:
        raise CheckpointError(
            f"{index}: weight_map[{tensor!r}] is {name!r}; a shard is named by a file name "
            "inside the model's directory (no absolute path, no '..')"
        )
    path = directory.joinpath(*parts)
    _inside(path, Path(os.path.realpath(directory)), directory)
    regular_file(path)
    return path


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files transformers would read: model.safetensors, else the shards
    model.safetensors.index.json lists."""
    if (directory / SAFETENSORS).exists():
        regular_file(directory / SAFETENSORS)
        return [directory / SAFETENSORS]
    index = directory / INDEX
    data = read_json(index, MAX_INDEX_BYTES)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index}: no weight_map (an object of tensor name -> shard)")
    shards = {_shard_path(directory, index, k, v) for k, v in weight_map.items()}
    return sorted(shards)


def weight_shapes(paths: list[Path]) -> dict[str, list[int]]:
    """Every tensor's shape, from the safetensors headers (the data is not read)."""
    from safetensors import SafetensorError, safe_open

    shapes: dict[str, list[int]] = {}
    for path in paths:
        try:
            with safe_open(str(path), framework="pt") as f:  # checks the header and offsets
                for name in f.keys():
                    if name in shapes:
                        raise CheckpointError(f"{path}: tensor {name} is in two shards")
                    shapes[name] = list(f.get_slice(name).get_shape())
        except (SafetensorError, OSError, ValueError) as error:
            if isinstance(error, CheckpointError):
                raise
            raise CheckpointError(
                f"{path}: transformers cannot load this model: not a valid safetensors file "
                f"({error})"
            ) from None
    return shapes


def numbers(shapes: dict[str, list[int]]) -> int:
    return sum(math.prod(shape) for shape in shapes.values())
