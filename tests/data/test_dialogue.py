"""The toy dialogue task: deterministic, the article's pair in training, held-out sources unseen,
and every source has one reply (so a perfect model exists)."""

from __future__ import annotations

import random
from collections import defaultdict
from itertools import islice

import pytest

from heedful.tasks.dates import Task
from heedful.tasks.dialogue import ARTICLE_PAIR, _pairs, dialogue_task, is_held_out


def test_the_articles_pair_is_in_training_and_never_held_out():
    assert ARTICLE_PAIR == ("Hi, How are you?", "I am fine")
    for seed in range(5):
        task = dialogue_task(200, 50, seed=seed)
        assert ARTICLE_PAIR in task.train
        assert ARTICLE_PAIR[0] not in {source for source, _ in task.test}
        assert not is_held_out(ARTICLE_PAIR[0], seed)


def test_sizes_disjointness_and_determinism():
    task = dialogue_task(3000, 500, seed=11)
    assert isinstance(task, Task)
    assert len(task.train) == 3000 and len(task.test) == 500
    test_sources = {source for source, _ in task.test}
    assert len(test_sources) == 500  # held-out sources do not repeat
    assert test_sources.isdisjoint(source for source, _ in task.train)
    assert all(is_held_out(source, 11) for source in test_sources)
    assert dialogue_task(3000, 500, seed=11) == task
    assert dialogue_task(3000, 500, seed=12) != task


def test_every_source_has_one_reply():
    replies = defaultdict(set)
    for source, reply in islice(_pairs(random.Random(3)), 50_000):
        replies[source].add(reply)
    assert {s: r for s, r in replies.items() if len(r) > 1} == {}
    assert len(replies) > 3000  # enough paraphrases that held-out sources are new strings


def test_replies_copy_names_and_things_and_ignore_paraphrase():
    pairs = dict(islice(_pairs(random.Random(5)), 20_000))
    assert pairs["Hello, how is it going?"] == "I am fine"
    assert pairs["Hi, call me Nora."] == "Nice to meet you, Nora"
    assert pairs["hi, call me Nora."] == "Nice to meet you, Nora"  # a name keeps its capital
    assert pairs["Do you enjoy jazz?"] == "Yes, I like jazz"
    assert pairs["Thanks a lot!"] == "You are welcome"


def test_every_kind_of_reply_is_held_out_somewhere_and_trained_on():
    task = dialogue_task(6000, 500, seed=1)
    kinds = ("I am fine", "My name is", "Nice to meet you", "Yes, I like", "You are welcome")
    for kind in kinds:
        assert any(reply.startswith(kind) for _, reply in task.test), kind
        assert any(reply.startswith(kind) for _, reply in task.train), kind


def test_bad_sizes_are_errors():
    with pytest.raises(ValueError):
        dialogue_task(0, 10)
    with pytest.raises(ValueError, match="held-out questions, not 100000"):
        dialogue_task(10, 100_000)
