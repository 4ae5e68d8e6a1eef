"""evaluation.caption_bleu: BLEU-1..4 of captions against every reference of their image, checked
against a float64 computation of modified n-gram precision and the brevity penalty by hand."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from sacrebleu.metrics import BLEU

from heedful.evaluation import caption_bleu

HYPOTHESES = [
    "a small red circle left of a blue square",
    "two dogs on the grass",
    "a man rides a bike",
]
REFERENCES = [  # 3, 1 and 2 references: a variable number per image
    [
        "a red circle left of a blue square",
        "a small red circle is left of the blue square",
        "there is a circle",
    ],
    ["two dogs are running on the grass"],
    ["a man riding a bike down the road", "a person rides a bicycle"],
]


def ngrams(words: list[str], n: int) -> Counter:
    return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def bleu_by_hand(hypotheses, references, order: int) -> float:
    """Papineni et al. 2002: corpus-level modified n-gram precision (each n-gram's count clipped
    to its largest count in any one reference), geometric mean over 1..order, times the brevity
    penalty against the reference length closest to each hypothesis (the shorter on a tie)."""
    matches, totals = [0] * order, [0] * order
    hyp_len = ref_len = 0
    for hypothesis, refs in zip(hypotheses, references):
        words, ref_words = hypothesis.split(), [r.split() for r in refs]
        hyp_len += len(words)
        ref_len += min((abs(len(r) - len(words)), len(r)) for r in ref_words)[1]
        for n in range(1, order + 1):
            counts = ngrams(words, n)
            most = Counter()
            for r in ref_words:
                most |= ngrams(r, n)  # elementwise max
            matches[n - 1] += sum(min(c, most[g]) for g, c in counts.items())
            totals[n - 1] += sum(counts.values())
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals)) / order
    brevity = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * brevity * math.exp(log_precision)


def test_each_order_matches_the_hand_computation():
    scores = caption_bleu(HYPOTHESES, REFERENCES)
    for n in range(1, 5):
        expected = bleu_by_hand(HYPOTHESES, REFERENCES, n)
        assert scores[f"bleu{n}"] == pytest.approx(expected, rel=1e-12, abs=1e-12), n
    assert scores["bleu1"] > scores["bleu2"] > scores["bleu3"] > scores["bleu4"] > 0
    assert scores["signature"].startswith("nrefs:var|") and "tok:13a" in scores["signature"]


def test_the_brevity_penalty_applies():
    """Every hypothesis word is in a reference (19 of 19), but the hypotheses have 19 words and
    their closest references 8 + 7 + 5 = 20 (9 words is as close to 8 as to 10: the shorter)."""
    bleu1 = caption_bleu(HYPOTHESES, REFERENCES)["bleu1"]
    assert bleu1 == pytest.approx(100 * math.exp(1 - 20 / 19), rel=1e-12)


def test_every_reference_counts_and_their_order_does_not():
    only_second = caption_bleu(
        ["a person rides a bicycle"], [["a man rides", "a person rides a bicycle"]]
    )
    assert only_second["bleu4"] == pytest.approx(100.0)
    reordered = caption_bleu(HYPOTHESES, [list(reversed(refs)) for refs in REFERENCES])
    assert reordered == caption_bleu(HYPOTHESES, REFERENCES)


def test_one_reference_each_is_plain_sacrebleu():
    refs = [r[0] for r in REFERENCES]
    scores = caption_bleu(HYPOTHESES, [[r] for r in refs])
    assert scores["bleu4"] == BLEU().corpus_score(HYPOTHESES, [refs]).score
    assert scores["signature"].startswith("nrefs:1|")


@pytest.mark.parametrize(
    ("hypotheses", "references", "message"),
    [
        (["a"], [["a"], ["b"]], "1 captions but references for 2 images"),
        ([], [], "at least one image"),
        (["a", "b"], [["a"], []], r"references\[1\] must be a non-empty list"),
        (["a"], ["a cat"], r"references\[0\] must be a non-empty list"),
        (["a"], [["a", None]], r"references\[0\]"),
    ],
)
def test_bad_references_are_named(hypotheses, references, message):
    with pytest.raises(ValueError, match=message):
        caption_bleu(hypotheses, references)
