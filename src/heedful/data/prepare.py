"""`heedful prepare`: tokenize a corpus once, in worker processes, into a prepared directory.

Reading streams (one line at a time, gzip too, as strictly as data/corpus.py reads small
corpora), so memory stays flat whatever the corpus size; the ids go to disk shard by shard
(data/prepared.py describes the layout). The directory is built beside its place and renamed
into it at the end, so an interrupted or failed run (a full disk) never leaves a directory that
looks complete. Preparing again with unchanged inputs and settings does nothing: the manifest
records each input's size, modification time and SHA-256, and the tokenizers' hashes.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from itertools import islice
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from heedful.data.corpus import filter_pairs, iter_split, split_files
from heedful.data.manifest import fingerprint
from heedful.data.prepared import (
    FORMAT,
    MANIFEST,
    SIDES,
    VERSION,
    PreparedError,
    check_prepared,
    ids_dtype,
    read_manifest,
    sha256,
    shard_files,
)
from heedful.data.staging import building, recover
from heedful.io import atomic_write_json
from heedful.output_dirs import DirectoryKind, replaceable

CHUNK_PAIRS = 10_000  # pairs per task sent to a worker
_OWN = re.compile(
    r"manifest\.json|tokenizer\.(src|tgt)|valid\.jsonl|train-[0-9]{5,}\.(src|tgt)\.(ids|offsets)"
)

# what `prepare` replaces: a directory it wrote (its manifest there, a damaged one too, so that
# it is made again) holding nothing else; a user's folder or file is never deleted
PREPARED = DirectoryKind(
    "a heedful prepared directory",
    recognise=lambda directory: (directory / MANIFEST).is_file(),
    owns=lambda path: bool(_OWN.fullmatch(path.name)) and path.is_file(),
)


def settings(data) -> dict:
    """The data settings the prepared ids depend on (a change means preparing again)."""
    keys = ("tokenizer", "vocab_size", "sp_model_type", "joint_vocab", "tokenizer_sample")
    given = data.source.tokenizer is not None
    chosen = {"given_tokenizers": given, **({} if given else {k: getattr(data, k) for k in keys})}
    return {**chosen, "max_length": data.max_length, "shard_tokens": data.shard_tokens}


def inputs(data, known: list[dict] = ()) -> list[dict]:
    """Fingerprints of every file a preparation reads: both splits and given tokenizers
    (`known`: the last preparation's, whose hashes are reused for files unchanged on disk)."""
    files = [*split_files(data, "train"), *split_files(data, "valid")]
    if data.source.tokenizer is not None:
        # keyed as before the config's sections, so that a directory prepared then is current
        files += [("data.src_tokenizer", Path(data.source.tokenizer))]
        files += [("data.tgt_tokenizer", Path(data.tgt_tokenizer))]
    for key, path in files:
        if not path.is_file():
            named = "data.source.tokenizer" if key == "data.src_tokenizer" else key
            raise PreparedError(f"{named}: file not found: {path}")
    fields = {"key", "path", "bytes", "mtime_ns", "sha256"}
    last = {(f["key"], f["path"]): f for f in known if isinstance(f, dict) and fields <= f.keys()}
    return [fingerprint(key, path, last.get((key, str(path)))) for key, path in files]


# --- tokenizing in worker processes -----------------------------------------------------------

_worker: dict = {}  # this worker's tokenizers and length limit (set by _start_worker)


def _start_worker(tokenizer_files: tuple[str, str], max_length: int) -> None:
    from heedful.data.tokenizers import load_tokenizer

    _worker["tokenizers"] = tuple(load_tokenizer(path) for path in tokenizer_files)
    _worker["max_length"] = max_length


def _encode(pairs: list[tuple[str, str]]) -> tuple:
    """One chunk -> per side (flat ids, lengths), then the dropped counts (as filter_pairs)."""
    src_tok, tgt_tok = _worker["tokenizers"]
    src_ids, tgt_ids, report = filter_pairs(pairs, src_tok, tgt_tok, _worker["max_length"])
    flat = []
    for ids in (src_ids, tgt_ids):
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
        flat.append(
            (np.fromiter((i for s in ids for i in s), np.int64, int(lengths.sum())), lengths)
        )
    return flat[0], flat[1], report.dropped_empty, report.dropped_too_long


def _chunks(pairs: Iterable[tuple[str, str]]) -> Iterator[list[tuple[str, str]]]:
    pairs = iter(pairs)
    while chunk := list(islice(pairs, CHUNK_PAIRS)):
        yield chunk


def encoded_chunks(pairs, tokenizer_files, max_length: int, workers: int) -> Iterator[tuple]:
    """_encode over the chunks of `pairs`, in order, in `workers` processes (1: this one).

    At most 4 chunks per worker are in flight, so memory stays bounded when reading is faster
    than tokenizing. Workers start with "spawn": they load the tokenizers, nothing of torch.
    """
    if workers <= 1:
        _start_worker(tokenizer_files, max_length)
        yield from map(_encode, _chunks(pairs))
        return
    with ProcessPoolExecutor(
        workers, get_context("spawn"), _start_worker, (tokenizer_files, max_length)
    ) as pool:
        pending: deque = deque()
        for chunk in _chunks(pairs):
            pending.append(pool.submit(_encode, chunk))
            if len(pending) >= 4 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


# --- writing shards -------------------------------------------------------------------------


class ShardWriter:
    """Appends encoded pairs to the current shard's four files; starts a new shard before one
    would hold more than `shard_tokens` ids (a pair never spans two shards)."""

    def __init__(self, directory: Path, split: str, dtype: np.dtype, shard_tokens: int):
        self.directory, self.split, self.dtype = directory, split, dtype
        self.shard_tokens, self.shards, self.files = shard_tokens, [], None

    def _open(self) -> None:
        name = f"{self.split}-{len(self.shards):05d}"
        entry = {"name": name, "pairs": 0, "src_tokens": 0, "tgt_tokens": 0, "sha256": {}}
        self.shards.append(entry)
        self.files = {
            role: open(self.directory / file, "wb") for role, file in shard_files(name).items()
        }  # noqa: SIM115
        self.hashes = {role: hashlib.sha256() for role in self.files}
        for side in SIDES:
            self._write(f"{side}.offsets", np.zeros(1, np.int64))

    def _write(self, role: str, array: np.ndarray) -> None:
        data = array.tobytes()
        self.files[role].write(data)
        self.hashes[role].update(data)

    def add(self, src: tuple[np.ndarray, np.ndarray], tgt: tuple[np.ndarray, np.ndarray]) -> None:
        """Append pairs given as (flat ids, lengths) per side."""
        sizes = src[1] + tgt[1]
        start, starts = (
            0,
            {side: np.concatenate([[0], np.cumsum(x[1])]) for side, x in zip(SIDES, (src, tgt))},
        )
        while start < len(sizes):
            if self.files is None or self._full(int(sizes[start])):
                self._close()
                self._open()
            entry = self.shards[-1]
            room = self.shard_tokens - entry["src_tokens"] - entry["tgt_tokens"]
            fits = int(np.searchsorted(np.cumsum(sizes[start:]), room, side="right"))
            end = start + max(1, fits)  # a pair longer than a whole shard goes in alone
            for side, (flat, lengths) in zip(SIDES, (src, tgt)):
                a, b = starts[side][start], starts[side][end]
                ends = entry[f"{side}_tokens"] + np.cumsum(lengths[start:end])
                self._write(f"{side}.ids", flat[a:b].astype(self.dtype))
                self._write(f"{side}.offsets", ends.astype(np.int64))
                entry[f"{side}_tokens"] += int(b - a)
            entry["pairs"] += end - start
            start = end

    def _full(self, next_size: int) -> bool:
        entry = self.shards[-1]
        used = entry["src_tokens"] + entry["tgt_tokens"]
        return used > 0 and used + next_size > self.shard_tokens

    def _close(self) -> None:
        if self.files is not None:
            for role, file in self.files.items():
                file.close()
                self.shards[-1]["sha256"][role] = self.hashes[role].hexdigest()
            self.files = None

    def close(self) -> list[dict]:
        self._close()
        return self.shards


# --- the whole preparation ----------------------------------------------------------------


@dataclass
class SplitReport:
    """What encoding a split did: pairs read, kept, dropped and why, tokens per side."""

    read: int = 0
    pairs: int = 0
    dropped_empty: int = 0
    dropped_too_long: int = 0
    src_tokens: int = 0
    tgt_tokens: int = 0

    def add(self, src, tgt, empty: int, too_long: int) -> None:
        """Count one encoded chunk (its sides as (flat ids, lengths))."""
        self.pairs += len(src[1])
        self.read += len(src[1]) + empty + too_long
        self.dropped_empty += empty
        self.dropped_too_long += too_long
        self.src_tokens += len(src[0])
        self.tgt_tokens += len(tgt[0])

    def __str__(self) -> str:
        return (
            f"kept {self.pairs:,} of {self.read:,} pairs (dropped {self.dropped_empty:,} with an "
            f"empty side, {self.dropped_too_long:,} longer than data.max_length on a side); "
            f"{self.src_tokens:,} + {self.tgt_tokens:,} tokens"
        )


def _tokenizers(data, build: Path, echo) -> tuple[str, str]:
    """Copy the given tokenizers, or train them on a sample of the training text, into the
    directory being built; -> the two files, as workers load them."""
    from heedful.data.sentencepiece_model import fill_vocabulary
    from heedful.data.tokenizers import train_tokenizers

    files = (str(build / "tokenizer.src"), str(build / "tokenizer.tgt"))
    if data.source.tokenizer is not None:
        for given, file in zip((data.source.tokenizer, data.tgt_tokenizer), files):
            shutil.copyfile(given, file)
        return files
    sample = (
        "all" if data.tokenizer == "char" else f"a sample of {data.tokenizer_sample:,} lines of"
    )
    echo(f"training the {data.tokenizer} tokenizers on {sample} the training text")

    def train(vocab_size: int):  # the sides read afresh for each try: they are generators
        sides = (s for s, _ in iter_split(data, "train")), (t for _, t in iter_split(data, "train"))
        return train_tokenizers(
            *sides,
            kind=data.tokenizer,
            vocab_size=vocab_size,
            model_type=data.sp_model_type,
            joint=data.joint_vocab,
            sample=data.tokenizer_sample,
        )

    try:  # a vocab_size the text cannot fill is lowered in one line, as `heedful train` does
        trained = fill_vocabulary(train, data.vocab_size, echo)
    except ValueError as error:
        raise PreparedError(
            f"cannot train the data.tokenizer ({data.tokenizer}): {error}"
        ) from None
    for tokenizer, file in zip(trained, files):
        tokenizer.save(file)
    return files


def _encode_train(
    data, build: Path, files, workers: int, progress: bool, echo=print
) -> tuple[SplitReport, dict]:
    """The training split into shards; its progress a bar on a terminal, else a plain line
    every logs.PLAIN_EVERY seconds (a bar's redraws would pile up in a file)."""
    from heedful.data.tokenizers import load_tokenizer
    from heedful.logs import Counter

    dtype = ids_dtype(max(len(load_tokenizer(f)) for f in files))
    writer, report = ShardWriter(build, "train", dtype, data.shard_tokens), SplitReport()
    bar = Counter("encoding", "pairs", progress, echo)
    chunks = encoded_chunks(iter_split(data, "train"), files, data.max_length, workers)
    for src, tgt, empty, too_long in chunks:
        writer.add(src, tgt)
        report.add(src, tgt, empty, too_long)
        bar.update(len(src[1]) + empty + too_long)
    bar.close()
    split = {**asdict(report), "dtype": dtype.name, "shards": writer.close()}
    return report, split


def _write_valid(data, build: Path) -> int:
    """valid.jsonl; an empty split is refused here, not at the first validation."""
    from heedful.data.corpus import split_source

    count = 0
    with open(build / "valid.jsonl", "w", encoding="utf-8") as out:
        for count, pair in enumerate(iter_split(data, "valid"), start=1):  # noqa: B007
            out.write(json.dumps(pair, ensure_ascii=False) + "\n")
    if count == 0:
        raise PreparedError(
            f"{split_source(data, 'valid')}: empty, no sentence pairs; the valid split needs "
            "at least one line"
        )
    return count


def up_to_date(directory: Path, data, fingerprints: list[dict], echo=print) -> bool:
    """Whether `directory` holds a complete preparation of these inputs with these settings,
    every file as the manifest's hashes say (a damaged copy is made again, and said so)."""
    try:
        manifest = read_manifest(directory)
    except PreparedError:
        return False
    if manifest.get("settings") != settings(data):
        return False
    old = {(f["key"], f["sha256"], f["bytes"]) for f in manifest.get("inputs", [])}
    if old != {(f["key"], f["sha256"], f["bytes"]) for f in fingerprints}:
        return False
    try:
        check_prepared(directory)
    except PreparedError as error:
        echo(f"preparing {directory} again: {error}")
        return False
    return True


def prepare(
    data,
    directory: str | Path,
    workers: int | None = None,
    force: bool = False,
    progress: bool = True,
    echo: Callable[[str], None] = print,
) -> dict:
    """Prepare `data` (a DataConfig) into `directory` unless it is already up to date.

    workers: tokenizing processes (None: one per CPU this process may use). -> the manifest.
    """
    directory = Path(directory)
    if getattr(data, "corpora", ()):  # their target tokens are not in the shards' ids yet
        raise PreparedError(
            "heedful prepare does not read data.corpora (several language pairs) yet; train "
            "from the corpora in memory, without data.prepared"
        )
    if directory.exists() and not directory.is_dir():
        raise PreparedError(f"{directory}: not a directory (data.prepared names a directory)")
    for note in recover(directory):  # what a killed `prepare` left beside it
        echo(note)
    workers = workers or len(os.sched_getaffinity(0))
    try:
        known = [] if force else read_manifest(directory).get("inputs", [])
    except PreparedError:
        known = []
    known = known if isinstance(known, list) else []
    fingerprints = inputs(data, known)
    if not force and up_to_date(directory, data, fingerprints, echo):
        echo(f"{directory}: up to date (inputs and settings unchanged); nothing to do")
        return read_manifest(directory)
    try:
        with building(directory, replaceable(PREPARED, [f["path"] for f in fingerprints])) as build:
            valid_pairs = _write_valid(data, build)  # first: an empty split fails at once
            files = _tokenizers(data, build, echo)
            report, split = _encode_train(data, build, files, workers, progress, echo)
            if report.pairs == 0:
                raise PreparedError(
                    f"no training pairs left: {report}; check the files or data.max_length"
                )
            manifest = {
                "format": FORMAT, "version": VERSION, "settings": settings(data),
                "inputs": fingerprints, "workers": workers,
                "tokenizers": {side: sha256(Path(f)) for side, f in zip(SIDES, files)},
                "splits": {"train": split}, "valid_pairs": valid_pairs,
                "valid_sha256": sha256(build / "valid.jsonl"),
            }  # fmt: skip
            atomic_write_json(build / MANIFEST, manifest)
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        raise PreparedError(
            f"{directory}: no space left on the device while preparing; nothing was "
            "published (an earlier preparation there, if any, is unchanged)"
        ) from None
    echo(f"{directory}: {report}, in {len(split['shards'])} shard(s)")
    return manifest
