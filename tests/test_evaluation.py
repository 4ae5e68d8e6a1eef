import pytest
import sacrebleu

from heedful.evaluation import (
    bleu_by_length,
    corpus_scores,
    exact_match,
    format_length_table,
    higher_is_better,
    improves,
    moses_language,
    tokenized_bleu,
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


# ---------------------------------------------------------------------------------------------
# The tokenized BLEU papers report (fairseq-generate's scorer, multi-bleu.perl)
# ---------------------------------------------------------------------------------------------

GERMAN_HYPS = ["Ein Mann fährt z.B. ein Fahrrad.", "Zwei Hunde spielen im Schnee", "Eine Katze."]
GERMAN_REFS = [
    "Ein Mann fährt, z.B., ein Rad.",
    "Zwei Hunde spielen im Schnee.",
    "eine Katze schläft.",
]
# tokenizer.perl's German rules: "z.B." is a non-breaking prefix, a word's full stop and a
# comma are tokens of their own
MOSES_HYPS = ["Ein Mann fährt z.B. ein Fahrrad .", "Zwei Hunde spielen im Schnee", "Eine Katze ."]
MOSES_REFS = [
    "Ein Mann fährt , z.B. , ein Rad .",
    "Zwei Hunde spielen im Schnee .",
    "eine Katze schläft .",
]


def multi_bleu(hypotheses: list[list[str]], references: list[list[str]]) -> float:
    """BLEU-4 as multi-bleu.perl computes it, written out: clipped n-gram matches summed over
    the corpus, their geometric mean, times exp(1 - r/c) when the output is shorter."""
    import math
    from collections import Counter

    matches, totals = [0] * 4, [0] * 4
    for hyp, ref in zip(hypotheses, references):
        for n in range(1, 5):
            grams = Counter(tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1))
            ref_grams = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
            matches[n - 1] += sum(min(c, ref_grams[g]) for g, c in grams.items())
            totals[n - 1] += max(len(hyp) - n + 1, 0)
    c, r = sum(len(h) for h in hypotheses), sum(len(x) for x in references)
    precision = math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / 4)
    return 100 * precision * (1.0 if c > r else math.exp(1 - r / c))


def test_tokenized_bleu_is_multi_bleu_over_moses_tokens():
    scores = tokenized_bleu(GERMAN_HYPS, GERMAN_REFS, "de_DE")
    hyps, refs = [h.split() for h in MOSES_HYPS], [r.split() for r in MOSES_REFS]
    assert scores.cased == pytest.approx(multi_bleu(hyps, refs), abs=1e-9)
    lower = [[w.lower() for w in s] for s in hyps], [[w.lower() for w in s] for s in refs]
    assert scores.lowercased == pytest.approx(multi_bleu(*lower), abs=1e-9)
    assert scores.lowercased > scores.cased  # "Eine" matches "eine" only lowercased
    assert scores.signature.startswith("moses:de|sacremoses")
    assert f"{scores.cased:.2f} cased" in str(scores)


def test_tokenized_bleu_languages_and_bad_input():
    assert tokenized_bleu(GERMAN_REFS, GERMAN_REFS, "de").cased == pytest.approx(100.0)
    assert moses_language("de-AT") == moses_language("de_DE") == moses_language("DE") == "de"
    with pytest.raises(ValueError, match="2 hypotheses but 3 references"):
        tokenized_bleu(GERMAN_HYPS[:2], GERMAN_REFS, "de")
