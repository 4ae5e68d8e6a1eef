"""Hostile inputs for prepared directories (`heedful prepare`, `data.prepared`): each ends in a
named error, exit status 1 and no traceback, or in correct behaviour that the case checks."""

from __future__ import annotations

import errno
import gzip
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import test_hostile_training as training
from click.testing import CliRunner

from heedful.cli import main
from heedful.tasks.dates import generate_dates

# the training table's config, training from a prepared directory on one thread
CONFIG = training.CONFIG.replace("data:\n", "data:\n  prepared: {p}\n", 1) + "  threads: 1\n"


@dataclass
class Env:
    data: Path
    prepared: Path
    config: Path
    run_dir: Path

    def run(self, command: str, *args: str):
        extra = ("--run-dir", str(self.run_dir), "--no-progress") if command == "train" else ()
        return CliRunner().invoke(main, [command, str(self.config), *extra, *args])

    def shard(self, name: str) -> Path:
        return self.prepared / f"train-00000.{name}"

    def manifest(self, change: Callable[[dict], None]) -> None:
        path = self.prepared / "manifest.json"
        manifest = json.loads(path.read_text())
        change(manifest)
        path.write_text(json.dumps(manifest))


@dataclass
class Case:
    command: str  # prepare | train
    before: Callable | None = None  # (env) or (env, monkeypatch), after a first `prepare`
    code: int = 1
    words: tuple[str, ...] = ()
    fresh: bool = False  # no first `prepare`
    check: Callable[[Env], None] | None = None
    files: dict[str, bytes] = field(default_factory=dict)  # written into the corpus first


def lines(n: int, text: str = "3 May 2021") -> bytes:
    return (text + "\n").encode() * n


def gz_members(*parts: bytes) -> bytes:
    return b"".join(gzip.compress(part) for part in parts)


def copied(damage: Callable[[Env], object]):
    """`damage` to a directory on a node without the corpus: training cannot prepare it again,
    so it must say what is wrong (with the corpus there, it prepares again: see repaired)."""

    def before(env: Env) -> None:
        damage(env)
        remove_inputs(env)

    return before


def truncate(name: str, keep: int = -3):
    def before(env: Env) -> None:
        path = env.shard(name)
        path.write_bytes(path.read_bytes()[:keep])

    return copied(before)


def repaired(env: Env) -> None:
    from heedful.data.prepared import open_prepared

    assert len(open_prepared(env.prepared).train) == 300
    assert (env.run_dir / "latest").exists()


def swap_tokenizer(env: Env) -> None:
    other = env.prepared.parent / "other"
    (env.data / "train.src").write_bytes(lines(50, "zz qq"))
    (env.data / "train.tgt").write_bytes(lines(50, "zz qq"))
    assert env.run("prepare", "-o", str(other)).exit_code == 0
    (env.prepared / "tokenizer.src").write_bytes((other / "tokenizer.src").read_bytes())
    remove_inputs(env)


def remove_inputs(env: Env) -> None:
    """Training then takes the directory as prepared (a copy on a node without the corpus)."""
    for name in ("train.src", "train.tgt"):
        (env.data / name).unlink()


def disk_full(env: Env, monkeypatch) -> None:
    from heedful.data import prepare

    real, calls = prepare.ShardWriter._write, []

    def write(self, role, array):
        calls.append(role)
        if len(calls) > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, role, array)

    monkeypatch.setattr(prepare.ShardWriter, "_write", write)
    (env.data / "train.src").write_bytes(lines(300, "4 June 1999"))  # changed: prepared again


def old_copy_kept(env: Env) -> None:
    assert json.loads((env.prepared / "manifest.json").read_text())["splits"]["train"]["pairs"]
    assert not [p for p in env.prepared.parent.iterdir() if p.name.startswith(".")]


@copied
def reordered_offsets(env: Env) -> None:
    path = env.shard("src.offsets")
    offsets = np.fromfile(path, np.int64)
    offsets[[1, 2]] = offsets[[2, 1]]
    offsets.tofile(path)


def resume_with_other_tokenizers(env: Env) -> None:
    assert env.run("train").exit_code == 0
    (env.data / "train.src").write_bytes(lines(300, "5 Juli 1999 ÄÖ"))  # new characters


def trained(env: Env) -> None:
    assert (env.run_dir / "latest").exists()


# --- issue 26: prepared directories trusted by size ------------------------------------------


def set_ids(name: str, change: Callable[[np.ndarray], np.ndarray]):
    """Rewrite a shard's ids in place, the same size (the manifest's hash no longer matches)."""

    def damage(env: Env) -> None:
        path = env.shard(name)
        change(np.fromfile(path, np.uint16)).astype(np.uint16).tofile(path)

    return damage


def first_id(value: int):
    def change(ids: np.ndarray) -> np.ndarray:
        ids[0] = value
        return ids

    return change


def shard_restored(env: Env) -> None:
    from heedful.data.prepared import check_prepared

    assert np.fromfile(env.shard("src.ids"), np.uint16)[0] != 65535
    check_prepared(env.prepared)


def node_copy(env: Env, monkeypatch) -> None:
    """A node's own copy, read by a rank that does not hash it (rank 0 hashes its copy)."""
    from heedful.data import prepared

    monkeypatch.setattr(prepared, "verify_files", lambda *args: None, raising=False)
    copied(set_ids("src.ids", lambda ids: np.full_like(ids, 65535)))(env)


def listed_twice(manifest: dict) -> None:
    split = manifest["splits"]["train"]
    split["shards"] = split["shards"] * 2
    for key in ("pairs", "src_tokens", "tgt_tokens"):
        split[key] *= 2


@copied
def shard_outside(env: Env) -> None:
    outside = env.prepared.parent / "outside"
    outside.mkdir()
    for path in env.prepared.glob("train-00000.*"):
        (outside / path.name).write_bytes(path.read_bytes())
    env.manifest(lambda m: m["splits"]["train"]["shards"][0].update(name="../outside/train-00000"))


@copied
def link_outside(env: Env) -> None:
    outside = env.prepared.parent / "elsewhere.ids"
    env.shard("src.ids").rename(outside)
    env.shard("src.ids").symlink_to(outside)


def smaller_vocabulary(env: Env) -> None:
    """tokenizer.src replaced by one of 5 symbols, and the manifest's hash made to match."""
    from heedful.data.prepared import sha256

    swap_tokenizer(env)  # also removes the corpus
    digest = sha256(env.prepared / "tokenizer.src")
    env.manifest(lambda m: m["tokenizers"].update(src=digest))


STAGING = ".prepared.tmp-0123abcd"


def staging_left(env: Env) -> None:
    (env.prepared.parent / STAGING).mkdir()
    (env.prepared.parent / STAGING / "train-00000.src.ids").write_bytes(b"\0" * 64)


def no_leftovers(env: Env) -> None:
    assert not [p.name for p in env.prepared.parent.iterdir() if p.name.startswith(".")]
    assert (env.prepared / "manifest.json").exists()


def between_the_renames(env: Env) -> None:
    """A kill between _publish's renames, on a node whose corpus is gone: the only copy is
    .prepared.old-PID (a PID above Linux's limit: no process has it), beside a staging one."""
    env.prepared.rename(env.prepared.with_name(".prepared.old-4194305"))
    staging_left(env)
    remove_inputs(env)


def restored(env: Env) -> None:
    no_leftovers(env)
    trained(env)


def users_folder(env: Env) -> None:
    env.prepared.rename(env.prepared.with_name("mine"))
    env.prepared.mkdir()
    (env.prepared / "keep").write_text("x")


def users_file_inside(env: Env) -> None:
    (env.prepared / "notes.txt").write_text("x")
    (env.data / "train.src").write_bytes(lines(300, "4 June 1999"))  # changed: prepared again


def kept(name: str):
    def check(env: Env) -> None:
        assert (env.prepared / name).read_text() == "x"

    return check


def into_the_corpus(env: Env) -> None:
    env.config.write_text(env.config.read_text().replace(f"prepared: {env.prepared}",
                                                         f"prepared: {env.data}"))  # fmt: skip


def corpus_kept(env: Env) -> None:
    assert (env.data / "train.src").stat().st_size > 0 and (env.data / "valid.tgt").exists()


CASES = [
    pytest.param(
        Case("prepare", fresh=True, files={"train.src": b"", "train.tgt": b""},
             words=("no training pairs left",)),
        id="row0-empty-training-files",
    ),
    pytest.param(
        Case("prepare", fresh=True, files={"train.src": lines(299) + b"x" * 5_000_000 + b"\n"},
             code=0, words=("kept 299 of 300", "1 longer than data.max_length")),
        id="row0-huge-line-dropped-as-a-pair",
    ),
    pytest.param(Case("train", truncate("src.ids"), words=("truncated", "src.ids")),
                 id="row0-truncated-shard"),
    pytest.param(Case("train", truncate("tgt.offsets", 0), words=("truncated", "tgt.offsets")),
                 id="row0-empty-offsets-file"),
    pytest.param(
        Case("train", copied(lambda env: env.manifest(
            lambda m: m["splits"]["train"].update(dtype=7))),
             words=("damaged manifest",)),
        id="row0-wrong-type-in-manifest",
    ),
    pytest.param(
        Case("train", copied(lambda env: env.manifest(
            lambda m: m["splits"]["train"]["shards"][0].update(pairs=float("nan")))),
            words=("damaged manifest",)),
        id="row0-non-finite-count-in-manifest",
    ),
    pytest.param(
        Case("train", copied(lambda env: (env.prepared / "manifest.json").write_bytes(
            (env.prepared / "manifest.json").read_text().encode("utf-16"))),
            words=("manifest.json", "UTF-16")),
        id="row0-manifest-in-utf16",
    ),
    pytest.param(
        Case("train", copied(lambda env: env.manifest(lambda m: m.update(version=0))),
             words=("format version 0", "prepare again")),
        id="older-format-version",
    ),
    pytest.param(
        Case("train", swap_tokenizer, words=("tokenizer.src", "not the tokenizer")),
        id="another-tokenizer",
    ),
    pytest.param(
        Case("train", copied(lambda env: env.manifest(
            lambda m: m["splits"]["train"]["shards"][0].update(pairs=301))),
            words=("manifest says", "src.offsets")),
        id="manifest-does-not-match-the-shards",
    ),
    pytest.param(Case("train", reordered_offsets, words=("offsets do not describe",)),
                 id="offsets-out-of-order"),
    pytest.param(
        Case("train", copied(lambda env: (env.prepared / "manifest.json").unlink()),
             words=("data.train_src: file not found",)),
        id="no-manifest-an-unfinished-directory",
    ),
    pytest.param(
        Case("train", copied(lambda env: (env.prepared / "valid.jsonl").write_text(
            '["a", "b"]\n[1]\n')),
             words=("valid.jsonl: line 2",)),
        id="damaged-validation-text",
    ),
    pytest.param(
        Case("prepare", disk_full, words=("no space left", "nothing was published"),
             check=old_copy_kept),
        id="disk-fills-during-prepare",
    ),
    pytest.param(
        Case("prepare", fresh=True, words=("data.train_src", "has 301 lines", "has 300"),
             files={"train.src": gz_members(lines(150), lines(151))}),
        id="gzip-member-with-one-line-too-many",
    ),
    pytest.param(
        Case("prepare", fresh=True, words=("gzip data is damaged",),
             files={"train.src": gzip.compress(lines(300))[:-12]}),
        id="truncated-gzip-input",
    ),
    pytest.param(
        Case("prepare", fresh=True, words=("line 12", "invalid UTF-8", "decompressed"),
             files={"train.src": gzip.compress(lines(11) + b"bad \xff\n" + lines(288))}),
        id="invalid-utf8-inside-gzip",
    ),
    pytest.param(
        Case("train", lambda env: (remove_inputs(env), env.config.write_text(
            env.config.read_text().replace("max_length: 40", "max_length: 30"))),
            words=("other data settings",)),
        id="prepared-with-other-settings",
    ),
    pytest.param(
        Case("train", resume_with_other_tokenizers, words=("tokenizers differ", "--force")),
        id="resume-after-the-vocabulary-changed",
    ),
    pytest.param(
        Case("prepare", lambda env: (env.prepared.rename(env.prepared.with_name("x")),
                                     env.prepared.write_text("a file")),
             words=("not a directory",)),
        id="prepared-path-is-a-file",
    ),
    pytest.param(Case("train", lambda env: env.shard("src.ids").write_bytes(b""), code=0,
                      check=repaired), id="damaged-shard-prepared-again-when-the-corpus-is-here"),
    pytest.param(Case("train", remove_inputs, code=0, check=trained,
                      words=("as it was prepared",)),
                 id="copied-directory-without-the-corpus-trains"),
    pytest.param(
        Case("prepare", set_ids("src.ids", first_id(65535)), code=0, check=shard_restored,
             words=("train-00000.src.ids", "id 65535", "preparing")),
        id="sha-same-size-shard-with-id-65535-is-prepared-again",
    ),
    pytest.param(
        Case("train", copied(set_ids("src.ids", first_id(65535))),
             words=("train-00000.src.ids", "id 65535", "not a word")),
        id="sha-id-past-the-vocabulary-in-a-copy",
    ),
    pytest.param(
        Case("train", node_copy, words=("train-00000.src.ids", "id 65535", "not a word")),
        id="sha-id-past-the-vocabulary-read-by-a-batch-on-a-node",
    ),
    pytest.param(
        Case("train", copied(set_ids("src.ids", lambda ids: ids[::-1])),
             words=("train-00000.src.ids", "SHA-256 differs")),
        id="sha-reversed-ids",
    ),
    pytest.param(
        Case("train", copied(set_ids("tgt.ids", np.zeros_like)),
             words=("train-00000.tgt.ids", "id 0 ")),
        id="sha-zeroed-ids",
    ),
    pytest.param(
        Case("train", smaller_vocabulary, words=("train-00000.src.ids", "not a word")),
        id="sha-tokenizer-of-a-smaller-vocabulary-with-its-hash",
    ),
    pytest.param(
        Case("train", copied(lambda env: env.manifest(listed_twice)),
             words=("shards[1].name", "listed twice")),
        id="shard-listed-twice",
    ),
    pytest.param(
        Case("train", copied(lambda env: env.manifest(
            lambda m: m["splits"]["train"].update(shards=[]))),
             words=("splits.train.shards", "at least one shard")),
        id="row0-no-shards",
    ),
    pytest.param(
        Case("train", copied(lambda env: env.manifest(
            lambda m: m["splits"]["train"]["shards"][0].update(pairs="300"))),
             words=("shards[0].pairs", "whole number")),
        id="row0-count-a-string",
    ),
    pytest.param(
        Case("train", copied(lambda env: env.manifest(
            lambda m: m["splits"]["train"]["shards"][0].update(src_tokens=2.0 * m["splits"][
                "train"]["shards"][0]["src_tokens"] / 2))),
             words=("shards[0].src_tokens", "whole number")),
        id="row0-count-a-float",
    ),
    pytest.param(Case("train", shard_outside, words=("shards[0].name", "train-NNNNN")),
                 id="shard-name-outside-the-directory"),
    pytest.param(Case("train", link_outside, words=("src.ids", "outside the prepared directory")),
                 id="shard-a-link-out-of-the-directory"),
    pytest.param(
        Case("train", copied(lambda env: (env.prepared / "valid.jsonl").write_bytes(b"")),
             words=("valid.jsonl", "0 validation pairs", "says 16")),
        id="row0-empty-validation-text",
    ),
    pytest.param(
        Case("train", copied(lambda env: (env.prepared / "valid.jsonl").write_text(
            '["\\ud800", "x"]\n' * 16)), words=("valid.jsonl: line 1", "surrogates not allowed")),
        id="row0-lone-surrogate-in-validation-text",
    ),
    pytest.param(
        Case("prepare", fresh=True, files={"valid.src": b"", "valid.tgt": b""},
             words=("data.valid_src", "empty")),
        id="row0-empty-validation-files",
    ),
    pytest.param(Case("prepare", staging_left, code=0, check=no_leftovers,
                      words=(f"removed {STAGING}",)), id="staging-left-by-a-kill-prepare"),
    pytest.param(Case("train", copied(staging_left), code=0, check=no_leftovers,
                      words=(f"removed {STAGING}",)), id="staging-left-by-a-kill-train"),
    pytest.param(Case("train", between_the_renames, code=0, check=restored,
                      words=("restored", ".prepared.old-4194305")),
                 id="killed-between-the-renames-without-the-corpus"),
    pytest.param(Case("prepare", users_folder, words=("not empty", "'keep'"), check=kept("keep")),
                 id="prepare-into-a-users-folder"),
    pytest.param(Case("prepare", users_file_inside, words=("also holds", "'notes.txt'"),
                      check=kept("notes.txt")), id="prepare-over-its-directory-with-a-users-file"),
    pytest.param(Case("prepare", into_the_corpus, words=("holds the input",), check=corpus_kept),
                 id="prepare-into-the-corpus-directory"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_hostile_prepared_input(tmp_path, monkeypatch, case: Case):
    data = tmp_path / "data"
    data.mkdir()
    for split, n, seed in (("train", 300, 1), ("valid", 16, 2)):
        pairs = generate_dates(n, seed)
        (data / f"{split}.src").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        (data / f"{split}.tgt").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG.format(d=data, p=tmp_path / "prepared"))
    env = Env(data, tmp_path / "prepared", config, tmp_path / "run")
    if not case.fresh:
        assert env.run("prepare", "--no-progress").exit_code == 0
    for name, content in case.files.items():
        (data / name).write_bytes(content)
    if case.before is not None:
        takes_monkeypatch = case.before.__code__.co_argcount == 2
        case.before(*((env, monkeypatch) if takes_monkeypatch else (env,)))
    result = env.run(case.command, *(("--no-progress",) if case.command == "prepare" else ()))
    assert result.exit_code == case.code, result.output
    assert "Traceback" not in result.output
    for word in case.words:
        assert word in result.output, (word, result.output)
    if case.check is not None:
        case.check(env)


def test_recover_keeps_what_is_live_or_not_its_own(tmp_path):
    """The cleanup of the rows above deletes only leftovers of its own directory's name that
    no live process holds: a `prepare` building now, a publish between its renames (its PID
    runs), another directory's staging and names heedful does not make all survive."""
    from heedful.data.staging import building, recover

    target = tmp_path / "prepared"
    kept = {".other.tmp-0123abcd", ".prepared.old-x", f".prepared.old-{os.getppid()}"}
    for name in kept:
        (tmp_path / name).mkdir()
    with building(target) as build:
        (build / "f").write_bytes(b"x")
        assert recover(target) == [] and build.exists()
    assert (target / "f").read_bytes() == b"x"
    assert {p.name for p in tmp_path.iterdir()} == kept | {"prepared"}
