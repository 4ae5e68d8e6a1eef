import pytest
import sacrebleu

from heedful.evaluation import (
    bleu_by_length,
    corpus_scores,
    exact_match,
    format_length_table,
    higher_is_better,
    improves,
)

HYPS = ["A man is riding a horse .", "Two dogs play in the snow", "a cat", "The child runs fast."]
REFS = [
    "A man rides a horse.",
    "Two dogs play in the snow.",
    "A cat sleeps.",
    "The child runs quickly.",
]


def test_scores_equal_sacrebleus_own():
    scores = corpus_scores(HYPS, REFS)
    assert scores.bleu == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert scores.chrf == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert scores.ter == pytest.approx(sacrebleu.corpus_ter(HYPS, [REFS]).score)
    assert scores.signatures["bleu"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert "BLEU = " in str(scores) and scores.signatures["chrf"] in str(scores)


def test_perfect_and_mismatched_inputs():
    assert corpus_scores(REFS, REFS).bleu == pytest.approx(100.0)
    assert exact_match(["a", "b"], ["a", "c"]) == 0.5
    with pytest.raises(ValueError, match="3 hypotheses but 4 references"):
        corpus_scores(HYPS[:3], REFS)


def test_bleu_by_length_buckets_the_right_sentences():
    sources = ["one two", " ".join(["w"] * 15), " ".join(["w"] * 25), " ".join(["w"] * 40)]
    table = bleu_by_length(sources, HYPS, REFS)
    assert [b.label for b in table] == ["1-10", "11-20", "21-30", "31+"]
    assert [b.sentences for b in table] == [1, 1, 1, 1]
    for bucket, i in zip(table, range(4)):
        assert bucket.bleu == pytest.approx(sacrebleu.corpus_bleu([HYPS[i]], [[REFS[i]]]).score)
    empty = bleu_by_length(sources[:1], HYPS[:1], REFS[:1])
    assert empty[1].sentences == 0 and empty[1].bleu is None
    assert "| 11-20 | 0 | - |" in format_length_table(empty)


def test_which_way_each_score_improves():
    assert [higher_is_better(m) for m in ("bleu", "chrf", "dev_exact_match")] == [True] * 3
    assert [higher_is_better(m) for m in ("loss", "ppl", "ter")] == [False] * 3
    assert improves("loss", 1.0, None) and improves("loss", 1.0, 2.0)
    assert not improves("loss", 2.0, 1.0) and not improves("loss", 1.0, 1.0)  # a tie does not
    assert improves("bleu", 2.0, 1.0) and not improves("bleu", 1.0, 2.0)
