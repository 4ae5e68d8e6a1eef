"""Prepared directories: a corpus tokenized once into flat, memory-mapped id arrays.

`heedful prepare` (data/prepare.py) writes one; training reads it here. The layout, version 1:

    manifest.json          what is here and what it was made from (written last: its presence
                           means the directory is complete; the directory is published by rename)
    tokenizer.src, .tgt    the tokenizers that made the ids (as in a model directory)
    train-00000.src.ids    shard 0's source ids, one flat array (uint16, or uint32 for a
                           vocabulary over 65,536), the sentences one after another
    train-00000.src.offsets  int64, pairs + 1 values: sentence i is ids[offsets[i]:offsets[i + 1]]
    train-00000.tgt.ids / .tgt.offsets   the same for the targets
    valid.jsonl            the validation pairs as text, ["source", "target"] per line: a few
                           thousand pairs, scored by BLEU from their text

Nothing is unpickled and nothing is read whole: the arrays are numpy memmaps, so a process
touches only the pages of the pairs it batches, and its memory does not grow with the corpus.
Every count in the manifest is checked against the files when they are opened (a truncated
shard, a manifest from another preparation), and errors name the file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from heedful.io import CheckpointError, read_json, regular_file

FORMAT = "heedful-prepared"
VERSION = 1
MANIFEST = "manifest.json"
SIDES = ("src", "tgt")


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


def read_manifest(directory: Path) -> dict:
    """The manifest of a prepared directory, checked for format and version."""
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
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise PreparedError(f"{path}: not a heedful prepared-data manifest")
    if manifest.get("version") != VERSION:
        raise PreparedError(
            f"{path}: prepared-data format version {manifest.get('version')!r}; this heedful "
            f"reads version {VERSION}: run heedful prepare again"
        )
    return manifest


def _memmap(path: Path, dtype: np.dtype, count: int) -> np.ndarray:
    """A read-only memmap of `count` values, after checking the file holds exactly that many."""
    try:
        size = regular_file(path).st_size
    except CheckpointError as error:
        raise PreparedError(f"{error}; run heedful prepare again") from None
    expected = count * dtype.itemsize
    if size != expected:
        what = "truncated" if size < expected else "longer than the manifest says"
        raise PreparedError(
            f"{path}: {size:,} bytes, but the manifest says {count:,} values of {dtype} "
            f"({expected:,} bytes): the file is {what}; run heedful prepare again"
        )
    if count == 0:
        return np.zeros(0, dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


@dataclass
class _Shard:
    pairs: int
    ids: dict[str, np.ndarray]  # side -> flat ids
    offsets: dict[str, np.ndarray]  # side -> (pairs + 1,) int64


def _open_shard(directory: Path, entry: dict, dtype: np.dtype) -> _Shard:
    files = shard_files(entry["name"])
    pairs, ids, offsets = int(entry["pairs"]), {}, {}
    for side in SIDES:
        # offsets are read into memory (8 bytes a sentence); ids stay mapped, as a plain ndarray
        # view (a memmap's own slicing costs microseconds a call)
        path = directory / files[f"{side}.offsets"]
        offsets[side] = np.array(_memmap(path, np.dtype(np.int64), pairs + 1))
        path = directory / files[f"{side}.ids"]
        ids[side] = _memmap(path, dtype, int(entry[f"{side}_tokens"])).view(np.ndarray)
        ends = offsets[side]
        if ends[0] != 0 or ends[-1] != len(ids[side]) or (np.diff(ends) <= 0).any():
            raise PreparedError(
                f"{directory / files[f'{side}.offsets']}: the offsets do not describe "
                f"{pairs:,} non-empty sentences in {len(ids[side]):,} ids; run heedful prepare "
                "again"
            )
    return _Shard(pairs, ids, offsets)


class PreparedSplit:
    """One split of a prepared directory as Pairs (data/batching.py): lengths in memory (an
    int64 per sentence), ids memory-mapped and read only for the pairs asked for."""

    def __init__(self, directory: Path, split: dict):
        self.directory, self.split = Path(directory), split
        self._open()

    def _open(self) -> None:
        dtype = np.dtype(self.split["dtype"])
        self.shards = [_open_shard(self.directory, e, dtype) for e in self.split["shards"]]
        self.first = np.cumsum([0] + [s.pairs for s in self.shards])  # global index of each
        self.src_lengths = np.concatenate([np.diff(s.offsets["src"]) for s in self.shards] or [[]])
        self.tgt_lengths = np.concatenate([np.diff(s.offsets["tgt"]) for s in self.shards] or [[]])

    def __len__(self) -> int:
        return int(self.first[-1])

    def ids(self, indices: np.ndarray) -> tuple[list[list[int]], list[list[int]]]:
        sides = []
        for side in SIDES:
            tokens, lengths = self.padded(side, indices)
            sides.append([row[:n] for row, n in zip(tokens.tolist(), lengths.tolist())])
        return sides[0], sides[1]

    def padded(self, side: str, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ids of pairs `indices` on one side as a zero-padded (B, longest) int64 array
        (0 is <pad>), and their lengths; one gather per shard, no loop over sentences."""
        indices = np.asarray(indices, dtype=np.int64)
        lengths = (self.src_lengths if side == "src" else self.tgt_lengths)[indices]
        width = int(lengths.max(initial=0))
        out = np.zeros((len(indices), width), np.int64)
        shard_of = np.searchsorted(self.first, indices, side="right") - 1
        columns = np.arange(width)
        for k in np.unique(shard_of).tolist():
            rows = np.flatnonzero(shard_of == k)
            shard = self.shards[k]
            starts = shard.offsets[side][indices[rows] - self.first[k]]  # (r,)
            inside = columns < lengths[rows, None]  # (r, width)
            positions = np.where(inside, starts[:, None] + columns, 0)
            out[rows] = np.where(inside, shard.ids[side][positions], 0)
        return out, lengths

    def batch(self, indices: np.ndarray):
        """A Batch (data/batching.py) of pairs `indices`, equal to collate() of their ids."""
        from heedful.data.batching import from_padded

        src, _ = self.padded("src", indices)
        tgt, tgt_lengths = self.padded("tgt", indices)
        return from_padded(src, tgt, tgt_lengths)

    # DataLoader workers started with "spawn" receive a pickled copy: send the paths, not the
    # mapped arrays (a memmap pickles as a full in-memory copy).
    def __getstate__(self) -> dict:
        return {"directory": self.directory, "split": self.split}

    def __setstate__(self, state: dict) -> None:
        self.directory, self.split = state["directory"], state["split"]
        self._open()


def read_valid(directory: Path) -> list[tuple[str, str]]:
    """The validation pairs a prepared directory keeps as text."""
    path = directory / "valid.jsonl"
    pairs, number = [], 0
    try:
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):  # noqa: B007 (in the error)
                pair = json.loads(line)
                if not (
                    isinstance(pair, list)
                    and len(pair) == 2
                    and all(isinstance(t, str) for t in pair)
                ):
                    raise ValueError("expected [source, target]")
                pairs.append((pair[0], pair[1]))
    except FileNotFoundError:
        raise PreparedError(f"{path}: missing; run heedful prepare again") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise PreparedError(
            f"{path}: line {number}: not a [source, target] pair ({error})"
        ) from None
    return pairs


def sha256(path: Path) -> str:
    """The file's SHA-256, read in blocks (a corpus may be gigabytes)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def load_prepared_tokenizers(directory: Path, manifest: dict):
    """The (source, target) tokenizers, checked against the hashes the manifest recorded."""
    from heedful.data.tokenizers import load_tokenizer

    loaded = []
    for side in SIDES:
        path = directory / f"tokenizer.{side}"
        try:
            regular_file(path)
        except CheckpointError as error:
            raise PreparedError(f"{error}; run heedful prepare again") from None
        if sha256(path) != manifest["tokenizers"][side]:
            raise PreparedError(
                f"{path}: not the tokenizer this directory's ids were made with (its hash "
                "differs from the manifest's); run heedful prepare again"
            )
        loaded.append(load_tokenizer(path))
    return tuple(loaded)


@dataclass
class Prepared:
    """An opened prepared directory."""

    directory: Path
    manifest: dict
    tokenizers: tuple  # (source, target)
    train: PreparedSplit
    valid: list[tuple[str, str]]


def open_prepared(directory: str | Path) -> Prepared:
    """Open a prepared directory for training: manifest, tokenizers, shards, validation text."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    try:
        tokenizers = load_prepared_tokenizers(directory, manifest)
        train = PreparedSplit(directory, manifest["splits"]["train"])
    except (KeyError, TypeError, ValueError, OverflowError) as error:
        if isinstance(error, PreparedError):
            raise
        raise PreparedError(
            f"{directory / MANIFEST}: a damaged manifest ({type(error).__name__}: {error}); "
            "run heedful prepare again"
        ) from None
    return Prepared(directory, manifest, tokenizers, train, read_valid(directory))
