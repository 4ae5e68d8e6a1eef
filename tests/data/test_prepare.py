"""heedful prepare: prepared ids equal in-memory encoding; shards, workers, gzip, re-runs."""

from __future__ import annotations

import gzip
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from heedful.config import DataConfig, SourceConfig
from heedful.data.corpus import filter_pairs, read_parallel
from heedful.data.prepare import prepare
from heedful.data.prepared import MANIFEST, open_prepared
from heedful.data.tokenizers import train_tokenizers
from heedful.tasks.dates import generate_dates


def corpus(directory: Path, n: int = 400, seed: int = 1) -> DataConfig:
    """A small generated corpus (dates), with an empty and an overlong pair to drop."""
    directory.mkdir(parents=True, exist_ok=True)
    pairs = generate_dates(n, seed) + [("", "2020-01-01"), ("x" * 90, "y")]
    for split, rows in (("train", pairs), ("valid", generate_dates(20, 2))):
        for side, column in (("src", 0), ("tgt", 1)):
            text = "".join(row[column] + "\n" for row in rows)
            (directory / f"{split}.{side}").write_text(text, encoding="utf-8")
    return DataConfig(
        train_src=str(directory / "train.src"),
        train_tgt=str(directory / "train.tgt"),
        valid_src=str(directory / "valid.src"),
        valid_tgt=str(directory / "valid.tgt"),
        vocab_size=100,
        max_length=40,
    )


def all_ids(directory: Path):
    prepared = open_prepared(directory)
    return prepared.train.ids(np.arange(len(prepared.train)))


def quiet(*args, **kwargs):
    return prepare(*args, progress=False, echo=lambda message: None, **kwargs)


def test_prepared_ids_equal_the_in_memory_encoding(tmp_path):
    data = corpus(tmp_path / "c")
    quiet(data, tmp_path / "p", workers=1)
    pairs = read_parallel(data.train_src, data.train_tgt, "s", "t")
    # the tokenizer in-memory training trains (experiment._new_tokenizers) ...
    src_tok, tgt_tok = train_tokenizers(
        [s for s, _ in pairs], [t for _, t in pairs], "sentencepiece", 100, joint=True
    )
    prepared = open_prepared(tmp_path / "p")
    assert prepared.tokenizers[0].model_proto == src_tok.model_proto
    # ... and the ids and drops of the in-memory filter
    src_ids, tgt_ids, report = filter_pairs(pairs, src_tok, tgt_tok, data.max_length)
    assert all_ids(tmp_path / "p") == (src_ids, tgt_ids)
    split = prepared.manifest["splits"]["train"]
    assert (split["pairs"], split["dropped_empty"], split["dropped_too_long"]) == (400, 1, 1)
    assert report.kept == 400 and prepared.valid == read_parallel(
        data.valid_src, data.valid_tgt, "s", "t"
    )
    assert list(prepared.train.src_lengths) == [len(s) for s in src_ids]


def test_shards_are_bounded_and_workers_do_not_change_a_byte(tmp_path):
    data = replace(corpus(tmp_path / "c"), shard_tokens=700)
    one = quiet(data, tmp_path / "one", workers=1)
    two = quiet(data, tmp_path / "two", workers=2)
    shards = one["splits"]["train"]["shards"]
    assert len(shards) > 5
    assert all(s["src_tokens"] + s["tgt_tokens"] <= 700 for s in shards)
    assert sum(s["pairs"] for s in shards) == 400
    for name in os.listdir(tmp_path / "one"):
        if name != MANIFEST:
            same = (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
            assert same, name
    assert one["splits"] == two["splits"]
    assert all_ids(tmp_path / "one") == all_ids(tmp_path / "two")


def test_gzip_inputs_give_the_same_ids(tmp_path):
    data = corpus(tmp_path / "c")
    for side in ("train_src", "train_tgt"):
        path = Path(getattr(data, side))
        gz = path.with_suffix(path.suffix + ".gz")
        # two gzip members, as `cat a.gz b.gz` makes: one stream of lines
        lines = path.read_bytes().split(b"\n")
        half = len(lines) // 2
        gz.write_bytes(
            gzip.compress(b"\n".join(lines[:half]) + b"\n")
            + gzip.compress(b"\n".join(lines[half:]))
        )
        data = replace(data, **{side: str(gz)})
    quiet(corpus(tmp_path / "plain"), tmp_path / "a")
    quiet(data, tmp_path / "b")
    assert all_ids(tmp_path / "a") == all_ids(tmp_path / "b")


def test_preparing_again_does_nothing_unless_an_input_changed(tmp_path):
    data = corpus(tmp_path / "c")
    quiet(data, tmp_path / "p")
    manifest = tmp_path / "p" / MANIFEST
    written = manifest.stat().st_mtime_ns
    said = []
    prepare(data, tmp_path / "p", progress=False, echo=said.append)
    assert manifest.stat().st_mtime_ns == written and "up to date" in said[-1]
    os.utime(data.train_src)  # touched, same bytes: still up to date
    quiet(data, tmp_path / "p")
    assert manifest.stat().st_mtime_ns == written
    with open(data.train_src, "a", encoding="utf-8") as f:
        f.write("1 May 2001\n")
    with open(data.train_tgt, "a", encoding="utf-8") as f:
        f.write("2001-05-01\n")
    assert quiet(data, tmp_path / "p")["splits"]["train"]["pairs"] == 401
    assert quiet(replace(data, max_length=12), tmp_path / "p")["settings"]["max_length"] == 12


def test_given_tokenizers_are_used_and_checked(tmp_path):
    data = corpus(tmp_path / "c")
    quiet(data, tmp_path / "p")
    given = replace(
        data,
        source=SourceConfig(tokenizer=str(tmp_path / "p" / "tokenizer.src")),
        tgt_tokenizer=str(tmp_path / "p" / "tokenizer.tgt"),
    )
    quiet(given, tmp_path / "q")
    assert all_ids(tmp_path / "p") == all_ids(tmp_path / "q")


def test_the_reader_takes_only_the_pairs_asked_for(tmp_path):
    data = replace(corpus(tmp_path / "c"), shard_tokens=500)
    quiet(data, tmp_path / "p")
    src, tgt = all_ids(tmp_path / "p")
    split = open_prepared(tmp_path / "p").train
    picked = np.array([399, 0, 57, 200, 57])  # across shards, one twice
    assert split.ids(picked) == ([src[i] for i in picked], [tgt[i] for i in picked])
    # the vectorized batch is collate()'s
    from heedful.data.batching import collate

    for rows in (picked, np.arange(400), np.array([3])):
        expected = collate(*split.ids(rows))
        assert all(a.equal(b) for a, b in zip(split.batch(rows), expected))


def test_a_pickled_split_reopens_its_files(tmp_path):
    import pickle

    quiet(corpus(tmp_path / "c"), tmp_path / "p")
    split = open_prepared(tmp_path / "p").train
    again = pickle.loads(pickle.dumps(split))
    assert len(pickle.dumps(split)) < 2000  # paths, not arrays
    assert again.ids(np.arange(10)) == split.ids(np.arange(10))


def test_an_unfinished_directory_is_not_taken_for_a_prepared_one(tmp_path):
    from heedful.data.prepared import PreparedError

    quiet(corpus(tmp_path / "c"), tmp_path / "p")
    (tmp_path / "p" / MANIFEST).unlink()
    with pytest.raises(PreparedError, match="incomplete one"):
        open_prepared(tmp_path / "p")


def test_a_vocabulary_the_text_cannot_fill_is_lowered_as_training_lowers_it(tmp_path):
    """`heedful prepare` trains the tokenizers `heedful train` would (fill_vocabulary): asked
    for more pieces than the text holds, both train the most it can and say so in one line."""
    from heedful.data.sentencepiece_model import fill_vocabulary

    data = replace(corpus(tmp_path / "c"), vocab_size=5000)
    said: list[str] = []
    prepare(data, tmp_path / "p", workers=1, progress=False, echo=said.append)
    lowered = [line for line in said if "data.vocab_size" in line]
    assert len(lowered) == 1 and "5000 is more than the training text can fill" in lowered[0]
    pairs = read_parallel(data.train_src, data.train_tgt, "s", "t")
    src_tok, _ = fill_vocabulary(
        lambda size: train_tokenizers(
            [s for s, _ in pairs], [t for _, t in pairs], "sentencepiece", size, joint=True
        ),
        5000,
        echo=lambda line: None,
    )
    prepared = open_prepared(tmp_path / "p")
    assert 4 < len(prepared.tokenizers[0]) < 5000
    assert prepared.tokenizers[0].model_proto == src_tok.model_proto
