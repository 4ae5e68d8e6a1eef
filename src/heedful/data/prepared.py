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
Every field of the manifest is checked (data/manifest.py), every count against the files when
they are opened (a truncated shard, a manifest from another preparation), and every id a batch
reads against the vocabulary (a node's own copy that rank 0's hash check never saw); errors
name the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from heedful.data.manifest import (  # noqa: F401 (the names prepare.py and the CLI import)
    FIRST_WORD_ID,
    FORMAT,
    MANIFEST,
    SIDES,
    VERSION,
    PreparedError,
    ids_dtype,
    inside,
    read_manifest,
    sha256,
    shard_files,
    verify_files,
)


def _memmap(path: Path, dtype: np.dtype, count: int) -> np.ndarray:
    """A read-only memmap of `count` values, after checking the file holds exactly that many."""
    size = path.stat().st_size  # `path` from inside(): a regular file in the directory
    expected = count * dtype.itemsize
    if size != expected:
        what = "truncated" if size < expected else "longer than the manifest says"
        raise PreparedError(
            f"{path}: {size:,} bytes, but the manifest says {count:,} values of {dtype} "
            f"({expected:,} bytes): the file is {what}; run heedful prepare again"
        )
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


@dataclass
class _Shard:
    pairs: int
    ids: dict[str, np.ndarray]  # side -> flat ids
    offsets: dict[str, np.ndarray]  # side -> (pairs + 1,) int64
    files: dict[str, Path]  # side -> its ids file, for messages


def _open_shard(directory: Path, entry: dict, dtype: np.dtype) -> _Shard:
    files = {role: inside(directory, file) for role, file in shard_files(entry["name"]).items()}
    pairs, ids, offsets = entry["pairs"], {}, {}
    for side in SIDES:
        # offsets are read into memory (8 bytes a sentence); ids stay mapped, as a plain ndarray
        # view (a memmap's own slicing costs microseconds a call)
        path = files[f"{side}.offsets"]
        offsets[side] = np.array(_memmap(path, np.dtype(np.int64), pairs + 1))
        ids[side] = _memmap(files[f"{side}.ids"], dtype, entry[f"{side}_tokens"]).view(np.ndarray)
        ends = offsets[side]
        if ends[0] != 0 or ends[-1] != len(ids[side]) or (np.diff(ends) <= 0).any():
            raise PreparedError(
                f"{path}: the offsets do not describe {pairs:,} non-empty sentences in "
                f"{len(ids[side]):,} ids; run heedful prepare again"
            )
    return _Shard(pairs, ids, offsets, {side: files[f"{side}.ids"] for side in SIDES})


class PreparedSplit:
    """One split of a prepared directory as Pairs (data/batching.py): lengths in memory (an
    int64 per sentence), ids memory-mapped and read only for the pairs asked for, each checked
    against its side's vocabulary size (`vocab`, source and target) as it is read."""

    def __init__(self, directory: Path, split: dict, vocab: tuple[int, int]):
        self.directory, self.split, self.vocab = Path(directory), split, vocab
        self._open()

    def _open(self) -> None:
        dtype = np.dtype(self.split["dtype"])
        self.shards = [_open_shard(self.directory, e, dtype) for e in self.split["shards"]]
        self.first = np.cumsum([0] + [s.pairs for s in self.shards])  # global index of each
        self.src_lengths = np.concatenate([np.diff(s.offsets["src"]) for s in self.shards])
        self.tgt_lengths = np.concatenate([np.diff(s.offsets["tgt"]) for s in self.shards])

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
            self._check_ids(shard, side, out[rows], inside)
        return out, lengths

    def _check_ids(self, shard: _Shard, side: str, ids: np.ndarray, inside: np.ndarray) -> None:
        """An id past the vocabulary would be an IndexError (a device assert on a GPU) in the
        embedding, and <pad>/<s>/</s> inside a sentence a silent wrong target."""
        vocab = self.vocab[SIDES.index(side)]
        bad = inside & ((ids >= vocab) | (ids < FIRST_WORD_ID))
        if bad.any():
            row, column = map(int, np.argwhere(bad)[0])
            raise PreparedError(
                f"{shard.files[side]}: id {int(ids[row, column])} is not a word of the "
                f"tokenizer's {vocab:,} (ids {FIRST_WORD_ID} to {vocab - 1}); the file was "
                "changed after heedful prepare wrote it: prepare again"
            )

    def batch(self, indices: np.ndarray):
        """A Batch (data/batching.py) of pairs `indices`, equal to collate() of their ids."""
        from heedful.data.batching import from_padded

        src, _ = self.padded("src", indices)
        tgt, tgt_lengths = self.padded("tgt", indices)
        return from_padded(src, tgt, tgt_lengths)

    # DataLoader workers started with "spawn" receive a pickled copy: send the paths, not the
    # mapped arrays (a memmap pickles as a full in-memory copy).
    def __getstate__(self) -> dict:
        return {"directory": self.directory, "split": self.split, "vocab": self.vocab}

    def __setstate__(self, state: dict) -> None:
        self.directory, self.split, self.vocab = state["directory"], state["split"], state["vocab"]
        self._open()


def _pair(line: str):
    """[source, target] from one line of valid.jsonl, as two strings that are UTF-8 text."""
    pair = json.loads(line)
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(t, str) for t in pair)):
        raise ValueError("expected [source, target]")
    for text in pair:
        text.encode("utf-8")  # a lone surrogate ("\\ud800") parses as JSON but is no text
    return pair[0], pair[1]


def read_valid(directory: Path, expected: int) -> list[tuple[str, str]]:
    """The validation pairs a prepared directory keeps as text: `expected` of them."""
    path = inside(directory, "valid.jsonl")
    pairs, number = [], 0
    try:
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):  # noqa: B007 (in the error)
                pairs.append(_pair(line))
    except (ValueError, UnicodeError) as error:  # UnicodeEncodeError: a lone surrogate
        raise PreparedError(
            f"{path}: line {number}: not a [source, target] pair ({error}); run heedful prepare "
            "again"
        ) from None
    if len(pairs) != expected:
        raise PreparedError(
            f"{path}: {len(pairs):,} validation pairs, but {MANIFEST} says {expected:,}: the file "
            "was changed after heedful prepare wrote it; run heedful prepare again"
        )
    return pairs


def load_prepared_tokenizers(directory: Path, manifest: dict):
    """The (source, target) tokenizers, checked against the hashes the manifest recorded."""
    from heedful.data.tokenizers import load_tokenizer

    loaded = []
    for side in SIDES:
        path = inside(directory, f"tokenizer.{side}")
        if sha256(path) != manifest["tokenizers"][side]:
            raise PreparedError(
                f"{path}: not the tokenizer this directory's ids were made with (its hash "
                "differs from the manifest's); run heedful prepare again"
            )
        loaded.append(load_tokenizer(path))
    dtype = ids_dtype(max(map(len, loaded)))
    if manifest["splits"]["train"]["dtype"] != dtype.name:
        raise PreparedError(
            f"{directory / MANIFEST}: splits.train.dtype is {manifest['splits']['train']['dtype']}"
            f", but the tokenizers' {max(map(len, loaded)):,} ids are stored as {dtype.name}; "
            "run heedful prepare again"
        )
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
    """Open a prepared directory for training: manifest, tokenizers, shards, validation text;
    the cheap checks (fields, sizes, offsets), made by every process on every start."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    tokenizers = load_prepared_tokenizers(directory, manifest)
    vocab = (len(tokenizers[0]), len(tokenizers[1]))
    train = PreparedSplit(directory, manifest["splits"]["train"], vocab)
    valid = read_valid(directory, manifest["valid_pairs"])
    return Prepared(directory, manifest, tokenizers, train, valid)


def check_prepared(directory: str | Path) -> Prepared:
    """open_prepared, then every file against the manifest's hashes and every id against the
    vocabulary: one read of the directory, made by `prepare` before it says "up to date" and
    by rank 0 before it trains on a copy whose corpus is not there."""
    prepared = open_prepared(directory)
    vocab = tuple(map(len, prepared.tokenizers))
    verify_files(prepared.directory, prepared.manifest, vocab)
    return prepared
