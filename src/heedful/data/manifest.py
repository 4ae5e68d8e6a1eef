"""A prepared directory's manifest, and the check of its files against it (data/prepared.py).

Training reads the shards as the manifest describes them, so every field is checked before a
file is opened: the types and counts (a float, a bool, a negative or a string would be taken by
int() or numpy as something else), the shard names (only those `heedful prepare` writes, each
once: a name is a path, and one listed twice trains its pairs twice). The hashes
the manifest keeps are compared when `heedful prepare` would call the directory up to date and
when rank 0 trains on a copy without the corpus; that pass also bounds every id by the
vocabulary, as a full read costs the same.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np

from heedful.io import CheckpointError, read_json, regular_file

FORMAT = "heedful-prepared"
VERSION = 1
MANIFEST = "manifest.json"
SIDES = ("src", "tgt")
FIRST_WORD_ID = 3  # <pad>, <s>, </s> (data/tokenizers.py) are never in a sentence's ids
_SHARD_NAME = re.compile(r"train-[0-9]{5,}")  # ShardWriter's names: files inside the directory
_HEX = re.compile(r"[0-9a-f]{64}")
_BLOCK = 8 << 20  # bytes hashed at a time: a multiple of every ids dtype's size


class PreparedError(ValueError):
    """A prepared directory that cannot be used; the message names the file and the fix."""


def ids_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type that holds every id of the vocabulary."""
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


def shard_files(name: str) -> dict[str, str]:
    """The four files of a shard, by role."""
    return {
        f"{side}.{kind}": f"{name}.{side}.{kind}" for side in SIDES for kind in ("ids", "offsets")
    }


def sha256(path: Path) -> str:
    """The file's SHA-256, read in blocks (a corpus may be gigabytes)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def fingerprint(key: str, path: Path, known: dict | None = None) -> dict:
    """What a later `prepare` compares to know whether an input changed. The SHA-256 of a
    file whose size and modification time are those of `known` (the last preparation's
    fingerprint of it) is taken from there, as make and rsync trust them: hashing gigabytes
    again on every start would cost seconds."""
    info = path.stat()
    same = known is not None and (known["bytes"], known["mtime_ns"]) == (
        info.st_size,
        info.st_mtime_ns,
    )
    return {
        "key": key,
        "path": str(path),
        "bytes": info.st_size,
        "mtime_ns": info.st_mtime_ns,
        "sha256": known["sha256"] if same else sha256(path),
    }


def _damaged(path: Path, where: str, what: str, value) -> PreparedError:
    return PreparedError(
        f"{path}: {where}: {what}, got {value!r:.80}; a damaged manifest: run heedful prepare again"
    )


def _count(path: Path, where: str, value, least: int) -> int:
    """A count: a JSON integer (not a bool, a float or a string) of at least `least`."""
    if type(value) is not int or not least <= value < 2**62:
        raise _damaged(path, where, f"expected a whole number of at least {least}", value)
    return value


def _hexes(path: Path, where: str, value, keys) -> None:
    if not isinstance(value, dict) or set(value) != set(keys):
        raise _damaged(path, where, f"expected the SHA-256 of {', '.join(keys)}", value)
    for key in keys:
        if not isinstance(value[key], str) or not _HEX.fullmatch(value[key]):
            raise _damaged(path, f"{where}.{key}", "expected a SHA-256 (64 hex digits)", value[key])


def _check_shards(path: Path, split: dict) -> None:
    shards, names = split.get("shards"), set()
    if not isinstance(shards, list) or not shards:
        raise _damaged(path, "splits.train.shards", "expected a list of at least one shard", shards)
    for i, entry in enumerate(shards):
        where = f"splits.train.shards[{i}]"
        if not isinstance(entry, dict):
            raise _damaged(path, where, "expected an object", entry)
        name = entry.get("name")
        if not isinstance(name, str) or not _SHARD_NAME.fullmatch(name):
            raise _damaged(
                path,
                f"{where}.name",
                "expected a shard name train-NNNNN (a file in this directory)",
                name,
            )
        if name in names:
            raise _damaged(path, f"{where}.name", "a shard listed twice", name)
        names.add(name)
        pairs = _count(path, f"{where}.pairs", entry.get("pairs"), 1)
        for side in SIDES:  # every sentence has at least one id
            _count(path, f"{where}.{side}_tokens", entry.get(f"{side}_tokens"), pairs)
        _hexes(path, f"{where}.sha256", entry.get("sha256"), shard_files(name))


def check_manifest(manifest, path: Path) -> dict:
    """`manifest` if every field training reads has its type and a possible value."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise PreparedError(f"{path}: not a heedful prepared-data manifest")
    if manifest.get("version") != VERSION:
        raise PreparedError(
            f"{path}: prepared-data format version {manifest.get('version')!r}; this heedful "
            f"reads version {VERSION}: run heedful prepare again"
        )
    for key, kind in (("settings", dict), ("inputs", list), ("splits", dict)):
        if not isinstance(manifest.get(key), kind):
            raise _damaged(path, key, f"expected a JSON {kind.__name__}", manifest.get(key))
    _hexes(path, "tokenizers", manifest.get("tokenizers"), SIDES)
    split = manifest["splits"].get("train")
    if not isinstance(split, dict):
        raise _damaged(path, "splits.train", "expected an object", split)
    if split.get("dtype") not in ("uint16", "uint32"):
        raise _damaged(path, "splits.train.dtype", "expected uint16 or uint32", split.get("dtype"))
    _check_shards(path, split)
    _count(path, "valid_pairs", manifest.get("valid_pairs"), 1)
    if "valid_sha256" in manifest:  # written since issue 26
        _hexes(path, "valid_sha256", {"valid.jsonl": manifest["valid_sha256"]}, ["valid.jsonl"])
    return manifest


def read_manifest(directory: Path) -> dict:
    """The manifest of a prepared directory, checked for format, version and every field."""
    path = directory / MANIFEST
    if directory.exists() and not directory.is_dir():
        raise PreparedError(f"{directory}: not a directory (data.prepared names a directory)")
    if not directory.is_dir():
        raise PreparedError(f"{directory}: no such prepared directory (run heedful prepare)")
    if not path.exists():
        raise PreparedError(
            f"{directory}: not a prepared directory, or an incomplete one (no {MANIFEST}); "
            "run heedful prepare again"
        )
    try:
        manifest = read_json(path, max_bytes=64 << 20)
    except CheckpointError as error:
        raise PreparedError(str(error)) from None
    return check_manifest(manifest, path)


def inside(directory: Path, name: str) -> Path:
    """directory / name, a regular file that is in the directory (not a link out of it)."""
    path = directory / name
    try:
        regular_file(path)
    except CheckpointError as error:
        raise PreparedError(f"{error}; run heedful prepare again") from None
    if not path.resolve().is_relative_to(directory.resolve()):
        raise PreparedError(
            f"{path}: a link to {path.resolve()}, outside the prepared directory; a prepared "
            "directory holds its own files: copy it with the files (cp -rL), or prepare again"
        )
    return path


def _scan(path: Path, dtype: np.dtype | None, vocab: int) -> str:
    """The file's SHA-256; for an ids file (`dtype`), every id checked on the way."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        position = 0
        while block := f.read(_BLOCK):
            digest.update(block)
            if dtype is not None and block:
                ids = np.frombuffer(block, dtype)
                bad = np.flatnonzero((ids >= vocab) | (ids < FIRST_WORD_ID))
                if bad.size:
                    at = position + int(bad[0])
                    raise PreparedError(
                        f"{path}: id {int(ids[bad[0]])} at position {at:,} is not a word of "
                        f"the tokenizer's {vocab:,} (ids {FIRST_WORD_ID} to {vocab - 1}); the "
                        "file was changed after heedful prepare wrote it: prepare again"
                    )
                position += len(ids)
    return digest.hexdigest()


def verify_files(directory: Path, manifest: dict, vocab: tuple[int, int]) -> None:
    """Every shard file and valid.jsonl against the manifest's SHA-256 (one full read), and
    every id bounded by its side's vocabulary; the first difference is named."""
    split = manifest["splits"]["train"]
    dtype = np.dtype(split["dtype"])
    expected = [
        (inside(directory, file), role, entry["sha256"][role])
        for entry in split["shards"]
        for role, file in shard_files(entry["name"]).items()
    ]
    if "valid_sha256" in manifest:
        expected.append((inside(directory, "valid.jsonl"), "valid", manifest["valid_sha256"]))
    for path, role, digest in expected:
        side = role.split(".")[0]
        ids = dtype if role.endswith(".ids") else None
        if _scan(path, ids, vocab[SIDES.index(side)] if ids else 0) != digest:
            raise PreparedError(
                f"{path}: its SHA-256 differs from the one {MANIFEST} keeps: the file was "
                "changed after heedful prepare wrote it; prepare again (or copy the directory "
                "again)"
            )
