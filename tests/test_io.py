"""Files: atomic writes, directories published whole (`staged`), leftovers put right, reads."""

import os

import pytest

from heedful.io import (
    CheckpointError,
    atomic_write_bytes,
    read_json,
    recover_directories,
    staged,
)


def listing(path):
    return sorted(p.name for p in path.iterdir())


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    target = tmp_path / "f.json"
    atomic_write_bytes(target, b"old")

    def fail(*_):
        raise OSError("disk full")

    monkeypatch.setattr("os.fsync", fail)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert listing(tmp_path) == ["f.json"]  # no temporary left behind


def test_staged_builds_beside_the_target_and_publishes_whole(tmp_path):
    final = tmp_path / "runs" / "m"
    with staged(final) as build:
        assert build.parent == final.parent and build.name.startswith(".m.tmp-")
        (build / "a").write_text("new")
        assert not final.exists()  # nothing visible until the block ends
    assert (final / "a").read_text() == "new" and listing(final.parent) == ["m"]
    with staged(final) as build:  # replacing: the old directory goes, nothing else stays
        (build / "b").write_text("newer")
    assert listing(final) == ["b"] and listing(final.parent) == ["m"]


def test_staged_leaves_the_old_directory_when_the_block_fails(tmp_path):
    final = tmp_path / "m"
    final.mkdir()
    (final / "a").write_text("old")
    with pytest.raises(RuntimeError, match="cut off"), staged(final) as build:
        (build / "a").write_text("half")
        raise RuntimeError("cut off")
    assert (final / "a").read_text() == "old" and listing(tmp_path) == ["m"]


def test_recover_puts_back_what_a_kill_between_the_renames_left(tmp_path):
    def leftover(name, content):
        (tmp_path / name).mkdir()
        (tmp_path / name / "weights").write_text(content)

    leftover(".a.old-42", "old a")  # a's first rename done, the second not
    leftover(".a.tmp-x1", "new a, maybe cut off")
    leftover(".b.tmp-x2", "complete b")  # b was never published, but a link points there
    leftover(".c.tmp-x3", "a cut-off save of c")
    notes = recover_directories(tmp_path, complete=lambda p: True, needed=["b"])
    assert listing(tmp_path) == ["a", "b"]
    assert (tmp_path / "a" / "weights").read_text() == "old a"
    assert (tmp_path / "b" / "weights").read_text() == "complete b"
    assert sum("restored" in n for n in notes) == 2 and sum("removed" in n for n in notes) == 2
    assert recover_directories(tmp_path, complete=lambda p: True) == []


def test_reads_name_the_file_and_what_is_wrong(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}')  # a UTF-8 byte-order mark is fine
    assert read_json(path) == {"a": 1}
    for content, words in (
        (b'{"a": 1, "a": 2}', "the key 'a' appears twice"),
        ('{"a": 1}'.encode("utf-16"), "UTF-16 or binary"),
        (b'{"a": \xff}', "not UTF-8 (invalid byte 0xff"),
        (b"x" * 100, "100 bytes, more than the 10"),
    ):
        path.write_bytes(content)
        with pytest.raises(CheckpointError, match=f"{path}: .*{words}".replace("(", r"\(")):
            read_json(path, max_bytes=10 if len(content) == 100 else None)
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(CheckpointError, match="not a regular file"):
        read_json(tmp_path / "pipe")
    with pytest.raises(CheckpointError, match="missing nothing.json"):
        read_json(tmp_path / "nothing.json")
