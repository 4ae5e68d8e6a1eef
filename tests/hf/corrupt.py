"""Hugging Face directories made wrong in one way each, for test_hostile.py's tables: a copy
of one of the tiny models (conftest.hf_dirs) with a file edited, replaced or linked elsewhere."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path


def copy_of(arch: str):
    def make(tmp_path: Path, hf_dirs) -> Path:
        return Path(shutil.copytree(hf_dirs[arch], tmp_path / arch))

    return make


def edit_json(arch: str, name: str, change):
    def make(tmp_path, hf_dirs):
        directory = copy_of(arch)(tmp_path, hf_dirs)
        data = json.loads((directory / name).read_text(encoding="utf-8"))
        change(data)
        (directory / name).write_text(json.dumps(data), encoding="utf-8")
        return directory

    return make


def edits(arch: str, **changes):
    """Several files edited: edits("t5", config_json=f, generation_config_json=g)."""

    def make(tmp_path, hf_dirs):
        directory = copy_of(arch)(tmp_path, hf_dirs)
        for key, change in changes.items():
            path = directory / key.replace("_json", ".json")
            data = json.loads(path.read_text(encoding="utf-8"))
            change(data)
            path.write_text(json.dumps(data), encoding="utf-8")
        return directory

    return make


def setting(arch: str, name: str, **values):
    return edit_json(arch, name, lambda d: d.update(values))


def tensors(arch: str, change):
    """model.safetensors rewritten with change(dict of tensors)."""

    def make(tmp_path, hf_dirs):
        from safetensors.torch import load_file, save_file

        directory = copy_of(arch)(tmp_path, hf_dirs)
        weights = load_file(directory / "model.safetensors")
        change(weights)
        save_file(weights, directory / "model.safetensors", metadata={"format": "pt"})
        return directory

    return make


def index_naming(shard, linked: bool = False, listed=None):
    """model.safetensors replaced by an index whose every tensor is in shard(tmp_path): a
    path relative to the directory, or an absolute one; the file is made there (linked: a
    symbolic link there to the file outside; listed: the weight_map written instead)."""

    def make(tmp_path, hf_dirs):
        from safetensors import safe_open

        directory = copy_of("bart")(tmp_path, hf_dirs)
        name = shard(tmp_path)
        with safe_open(str(directory / "model.safetensors"), framework="pt") as f:
            weight_map = dict.fromkeys(f.keys(), name)
        target = directory / name  # an absolute name replaces the directory
        target.parent.mkdir(parents=True, exist_ok=True)
        outside = tmp_path / "outside-shard"
        os.replace(directory / "model.safetensors", outside if linked else target)
        if linked:
            target.symlink_to(outside)
        (directory / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {}, "weight_map": weight_map if listed is None else listed}),
            encoding="utf-8",
        )
        return directory

    return make


def linked_out(arch: str, name: str):
    """NAME moved out of the directory, a symbolic link to it left in its place."""

    def make(tmp_path, hf_dirs):
        directory = copy_of(arch)(tmp_path, hf_dirs)
        outside = tmp_path / f"outside-{name}"
        os.replace(directory / name, outside)
        (directory / name).symlink_to(outside)
        return directory

    return make


def repeated_piece(tmp_path, hf_dirs):  # json.load would keep the second id silently
    directory = copy_of("marian")(tmp_path, hf_dirs)
    text = (directory / "vocab.json").read_text(encoding="utf-8")
    (directory / "vocab.json").write_text('{"</s>": 7, ' + text[1:], encoding="utf-8")
    return directory
