"""Batches side by side (heedful.cpu.in_streams): each item once, one torch thread per item,
no more at once than torch had threads, errors raised, torch's count given back; and the
Translator's outputs with its batches side by side equal to one batch after another."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

from heedful.cpu import in_streams
from heedful.inference.translator import Translator

MODELS = Path(__file__).resolve().parent / "golden" / "models"


@pytest.fixture
def two_threads():
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(saved)


class Record:
    """What each call of work saw: its thread, torch's count there, how many ran at once."""

    def __init__(self, fail: int | None = None, pause: float = 0.02):
        self.lock, self.running, self.most = threading.Lock(), 0, 0
        self.seen: list[tuple[int, str, int]] = []
        self.fail, self.pause = fail, pause

    def __call__(self, item: int) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.seen.append((item, threading.current_thread().name, torch.get_num_threads()))
        time.sleep(self.pause)  # long enough for a second item to start beside it
        with self.lock:
            self.running -= 1
        if item == self.fail:
            raise ValueError(f"item {item} failed")


def test_items_run_two_at_once_on_one_thread_each_and_the_count_comes_back(two_threads):
    work = Record()
    in_streams(work, list(range(7)))
    assert sorted(item for item, _, _ in work.seen) == list(range(7))
    assert work.most == 2
    assert {count for _, _, count in work.seen} == {1}
    assert all(name.startswith("heedful-stream") for _, name, _ in work.seen)
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("items, side_by_side", [([0], True), ([0, 1, 2], False)])
def test_one_item_or_side_by_side_off_runs_here_on_every_thread(two_threads, items, side_by_side):
    work, looks = Record(pause=0.0), []

    class Cores:
        def look(self):
            looks.append(torch.get_num_threads())

    in_streams(work, items, Cores(), side_by_side)
    here = threading.current_thread().name
    assert work.seen == [(i, here, 2) for i in items] and work.most == 1
    assert looks == [2] * len(items)  # the free cores looked at after every item


def test_one_thread_runs_the_items_in_order_here():
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        work = Record(pause=0.0)
        in_streams(work, [2, 0, 1])
        assert [item for item, _, _ in work.seen] == [2, 0, 1] and work.most == 1
    finally:
        torch.set_num_threads(saved)


def test_an_error_is_raised_the_items_not_started_are_dropped_and_the_count_comes_back(
    two_threads,
):
    work = Record(fail=1)
    with pytest.raises(ValueError, match="item 1 failed"):
        in_streams(work, list(range(20)))
    assert len(work.seen) < 20  # the rest never started
    assert work.running == 0  # those in flight finished before the error was raised
    assert torch.get_num_threads() == 2


def test_side_by_side_the_streams_are_the_watched_cores_and_nobody_looks(two_threads):
    """With the threads left to heedful (a FreeCores), as many streams as the cores it
    watches, even after a look cut torch's threads to one; a stream waits for no other, so
    the free cores are not looked at while they run."""

    class Cores:
        cores = [0, 1, 2]

        def look(self):
            raise AssertionError("looked at the free cores while decoding side by side")

    torch.set_num_threads(1)  # as a look beside a busy process leaves it
    work = Record(pause=0.05)
    in_streams(work, list(range(6)), Cores())
    assert sorted(item for item, _, _ in work.seen) == list(range(6))
    assert work.most == 3 and {count for _, _, count in work.seen} == {1}
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_batches_side_by_side_give_the_outputs_of_one_thread_in_order(two_threads, arch):
    """Each batch decoded on one thread beside another equals the same batch decoded alone on
    one thread (the same kernels), in the inputs' order, with attention too."""
    translator = Translator.load(MODELS / arch)
    texts = ["abcdef", "ab", "", "cba", "abcabc", "b", "acb", "ccc", "abca"]
    assert translator.streams
    beside = translator.translate(texts, num_beams=2, batch_size=2, need_weights=True)
    torch.set_num_threads(1)
    alone = translator.translate(texts, num_beams=2, batch_size=2, need_weights=True)
    assert [t.text for t in beside] == [t.text for t in alone]
    assert [t.score for t in beside] == [t.score for t in alone]
    for a, b in zip(beside, alone):
        if b.attention is None:
            assert a.attention is None
        else:
            assert torch.equal(a.attention, b.attention)
