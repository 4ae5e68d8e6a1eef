"""JSON Lines corpora (data.train_jsonl / valid_jsonl): the same pairs as aligned files, through
both readers (in memory and `heedful prepare`); tests/test_hostile_jsonl.py has the bad files."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace

import pytest

from heedful.config import ConfigError, DataConfig
from heedful.data.corpus import iter_split, read_jsonl, read_parallel, split_files, split_source
from heedful.data.prepare import prepare
from heedful.data.prepared import open_prepared
from heedful.tasks.dates import generate_dates


def jsonl(pairs, src="document", tgt="summary") -> bytes:
    rows = ({src: s, tgt: t, "other": [1, {"x": None}]} for s, t in pairs)
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode()


def corpus(tmp_path, n=200) -> DataConfig:
    for split, count, seed in (("train", n, 1), ("valid", 20, 2)):
        pairs = generate_dates(count, seed)
        (tmp_path / f"{split}.jsonl").write_bytes(jsonl(pairs, "article", "highlights"))
        for side, column in (("src", 0), ("tgt", 1)):
            text = "".join(pair[column] + "\n" for pair in pairs)
            (tmp_path / f"{split}.{side}").write_text(text, encoding="utf-8")
    return DataConfig(
        train_jsonl=str(tmp_path / "train.jsonl"),
        valid_jsonl=str(tmp_path / "valid.jsonl"),
        jsonl_src_field="article",
        jsonl_tgt_field="highlights",
        vocab_size=100,
        max_length=40,
    )


def test_jsonl_gives_the_pairs_of_aligned_files(tmp_path):
    data = corpus(tmp_path)
    aligned = read_parallel(tmp_path / "train.src", tmp_path / "train.tgt", "s", "t")
    assert list(iter_split(data, "train")) == aligned
    packed = tmp_path / "train.jsonl.gz"
    packed.write_bytes(gzip.compress((tmp_path / "train.jsonl").read_bytes()))
    assert read_jsonl(packed, "data.train_jsonl", "article", "highlights") == aligned
    assert split_source(data, "valid") == f"data.valid_jsonl ({tmp_path / 'valid.jsonl'})"


def test_one_form_per_split(tmp_path):
    data = corpus(tmp_path)
    with pytest.raises(ConfigError, match="data.train_jsonl and data.train_src/_tgt are exclus"):
        split_files(replace(data, train_src="a", train_tgt="b"), "train")
    with pytest.raises(ConfigError, match=r"\(or data.valid_tsv, or data.valid_jsonl\) are req"):
        split_files(replace(data, valid_jsonl=None), "valid")
    with pytest.raises(ConfigError, match="data.jsonl_src_field: must name a field"):
        replace(data, jsonl_src_field="")


def test_prepare_reads_jsonl_and_prepares_again_for_other_fields(tmp_path):
    """`heedful prepare` reads the same pairs; the fields are part of what it fingerprints, so
    reading other fields of the same files is not taken for up to date."""
    data = corpus(tmp_path)
    files = {f"{split}_{side}": str(tmp_path / f"{split}.{side}")
             for split in ("train", "valid") for side in ("src", "tgt")}  # fmt: skip
    aligned = replace(data, train_jsonl=None, valid_jsonl=None, **files)
    said = []
    for config, directory in ((data, "p"), (aligned, "q")):
        prepare(config, tmp_path / directory, progress=False, echo=said.append, workers=1)
    ids = [open_prepared(tmp_path / d).train for d in ("p", "q")]
    assert ids[0].ids(range(len(ids[0]))) == ids[1].ids(range(len(ids[1])))
    prepare(data, tmp_path / "p", progress=False, echo=said.append)
    assert "up to date" in said[-1]
    swapped = replace(data, jsonl_src_field="highlights", jsonl_tgt_field="article")
    prepare(swapped, tmp_path / "p", progress=False, echo=said.append, workers=1)
    assert "up to date" not in said[-1]
    first = open_prepared(tmp_path / "p").train.ids([0])
    assert first[0] == ids[1].ids([0])[1] and first[1] == ids[1].ids([0])[0]  # sides swapped
