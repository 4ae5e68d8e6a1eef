"""ROUGE-1/2/L (issue 15, item 5): our report is the rouge-score package's own numbers."""

from __future__ import annotations

import sys

import pytest
from rouge_score import rouge_scorer

from heedful.evaluation import rouge_scores

# A known pair from the ROUGE literature's usual example (Lin 2004, §3.1): the candidate
# shares "police", "the", "gunman" with the reference; "killed" and "kill" meet only when stemmed.
REFERENCE = "police killed the gunman"
CANDIDATE = "police kill the gunman"
HYPS = [CANDIDATE, "the gunman killed police", "two dogs play in snow", "Storms hit the coast"]
REFS = [REFERENCE, REFERENCE, "Two dogs play in the snow.", "storm hits coast of Florida"]


def test_a_known_pair_by_hand():
    """Without stemming: unigrams police, the, gunman of 4 and 4 -> F1 3/4; bigrams "the
    gunman" of 3 and 3 -> 1/3; LCS "police ... the gunman", 3 -> 3/4. Stemmed, all are 1."""
    plain = rouge_scores([CANDIDATE], [REFERENCE], use_stemmer=False)
    assert (plain.rouge1, plain.rouge2, plain.rougeL) == pytest.approx((75.0, 100 / 3, 75.0))
    stemmed = rouge_scores([CANDIDATE], [REFERENCE])
    assert (stemmed.rouge1, stemmed.rouge2, stemmed.rougeL) == pytest.approx((100, 100, 100))


@pytest.mark.parametrize("stem", [True, False])
def test_scores_equal_the_packages_own(stem):
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=stem)
    ours = rouge_scores(HYPS, REFS, use_stemmer=stem)
    for name in ("rouge1", "rouge2", "rougeL"):
        theirs = [scorer.score(r, h)[name].fmeasure for h, r in zip(HYPS, REFS)]
        assert getattr(ours, name) == pytest.approx(100 * sum(theirs) / len(theirs))
    assert "rouge-score 0.1.2|F1|mean over sentences|n:4" in ours.signature
    assert str(ours).startswith("ROUGE-1 = ") and ours.signature in str(ours)


def test_mismatched_inputs_and_a_missing_package(monkeypatch):
    with pytest.raises(ValueError, match="3 hypotheses but 4 references"):
        rouge_scores(HYPS[:3], REFS)
    monkeypatch.setitem(sys.modules, "rouge_score", None)  # as if not installed
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'heedful\[rouge\]'"):
        rouge_scores(HYPS, REFS)
