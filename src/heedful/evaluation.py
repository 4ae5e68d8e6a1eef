"""Scores of translations against references: sacreBLEU's BLEU, chrF and TER, the tokenized BLEU
papers report beside them, exact match, BLEU per source-length bucket (the table that shows
whether a fixed-size context vector is a bottleneck on long sentences), ROUGE-1/2/L for
summaries (Google's rouge-score), and BLEU-1..4 of captions against all of an image's
references."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# Scores where a smaller value is the better one: the validation loss and its perplexity, and
# TER (edits per reference word). BLEU, chrF and exact match grow with quality.
LOWER_IS_BETTER = frozenset({"loss", "ppl", "ter"})


def higher_is_better(metric: str) -> bool:
    """Which way `metric` improves: what early stopping and "best checkpoint" rank by."""
    return metric not in LOWER_IS_BETTER


def improves(metric: str, value: float, best: float | None) -> bool:
    """Whether `value` beats `best` (None: nothing to beat yet); a tie does not."""
    if best is None:
        return True
    return value > best if higher_is_better(metric) else value < best


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Fraction of hypotheses identical to their reference (the dates task's metric)."""
    _check_lengths(hypotheses, references)
    return sum(h == r for h, r in zip(hypotheses, references)) / len(references)


def _check_lengths(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not references:
        raise ValueError("scoring needs at least one reference")


@dataclass
class CorpusScores:
    """Corpus-level scores on detokenized text, with sacreBLEU's signatures for reproducibility."""

    bleu: float
    chrf: float
    ter: float
    signatures: dict[str, str]
    names: dict[str, str] = field(default_factory=dict)  # sacreBLEU's: BLEU, chrF2, TER
    verbose: dict[str, str] = field(default_factory=dict)  # BLEU's n-gram precisions and BP

    def __str__(self) -> str:
        return "\n".join(
            [
                f"BLEU = {self.bleu:.2f}  ({self.signatures['bleu']})",
                f"chrF = {self.chrf:.2f}  ({self.signatures['chrf']})",
                f"TER  = {self.ter:.2f}  ({self.signatures['ter']})",
            ]
        )

    def records(self) -> list[dict]:
        """One object per metric with the fields sacreBLEU's own `--format json` gives (name,
        score, signature, verbose_score where it has one), the score unrounded."""
        scores = {"bleu": self.bleu, "chrf": self.chrf, "ter": self.ter}
        records = []
        for metric, score in scores.items():
            record = {"name": self.names.get(metric, metric), "score": score}
            record["signature"] = self.signatures[metric]
            if self.verbose.get(metric):
                record["verbose_score"] = self.verbose[metric]
            records.append(record)
        return records


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> CorpusScores:
    """BLEU (13a tokenization, case-sensitive), chrF and TER, exactly as `sacrebleu` scores."""
    from sacrebleu.metrics import BLEU, CHRF, TER

    _check_lengths(hypotheses, references)
    metrics = {"bleu": BLEU(), "chrf": CHRF(), "ter": TER()}
    scores = {
        name: m.corpus_score(list(hypotheses), [list(references)]) for name, m in metrics.items()
    }
    return CorpusScores(
        scores["bleu"].score,
        scores["chrf"].score,
        scores["ter"].score,
        {name: str(m.get_signature()) for name, m in metrics.items()},
        {name: score.name for name, score in scores.items()},
        {name: _verbose(score) for name, score in scores.items()},
    )


def _verbose(score) -> str:
    """sacreBLEU's verbose part of a score ("60.0/33.3/... (BP = ...)"): BLEU has one."""
    line = score.format(score_only=False)  # "BLEU = 27.30 60.0/33.3/... (BP = ...)"
    prefix = f"{score.name} = {score.format(score_only=True)}"
    return line.removeprefix(prefix).strip()


@dataclass
class TokenizedBleu:
    """BLEU the way papers on Multi30k (and most fairseq papers) report it, to set beside
    sacreBLEU's: both sides Moses-tokenized (tokenizer.perl's rules, from sacremoses), then
    BLEU-4 over whitespace tokens without smoothing, which is what fairseq-generate's scorer and
    multi-bleu.perl compute on tokenized data. Many Multi30k papers also lowercase their data,
    so both are given. It reads higher than detokenized, cased sacreBLEU on the same outputs
    (more, shorter tokens match), so a number from a paper is compared with these, never with
    sacreBLEU's (Post 2018, "A Call for Clarity in Reporting BLEU Scores")."""

    cased: float
    lowercased: float
    signature: str

    def __str__(self) -> str:
        return (
            f"tokenized BLEU (as papers report it) = {self.cased:.2f} cased, "
            f"{self.lowercased:.2f} lowercased  ({self.signature})"
        )

    def record(self) -> dict:
        return {"cased": self.cased, "lowercased": self.lowercased, "signature": self.signature}


def moses_language(language: str) -> str:
    """The language code sacremoses's rules are chosen by: 'de' of 'de', 'de_DE' or 'de-AT'."""
    return language.replace("-", "_").split("_")[0].lower() or "en"


def tokenized_bleu(
    hypotheses: Sequence[str], references: Sequence[str], language: str
) -> TokenizedBleu:
    """BLEU on Moses-tokenized text, cased and lowercased (TokenizedBleu says why); `language`:
    the target language, whose non-breaking prefixes (z.B., Mr.) the tokenizer keeps."""
    from importlib.metadata import version

    from sacrebleu.metrics import BLEU
    from sacremoses import MosesTokenizer

    _check_lengths(hypotheses, references)
    lang = moses_language(language)
    moses = MosesTokenizer(lang=lang)

    def tokenized(texts: Sequence[str]) -> list[str]:
        return [moses.tokenize(t, escape=False, return_str=True) for t in texts]

    hyps, refs = tokenized(hypotheses), [tokenized(references)]
    cased, lower = (
        BLEU(tokenize="none", smooth_method="none", lowercase=lowercase, force=True)
        for lowercase in (False, True)
    )
    signature = (
        f"moses:{lang}|sacremoses {version('sacremoses')}|tok:none|smooth:none|"
        f"sacrebleu {version('sacrebleu')}"
    )
    return TokenizedBleu(
        cased.corpus_score(hyps, refs).score, lower.corpus_score(hyps, refs).score, signature
    )


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    from sacrebleu.metrics import BLEU

    _check_lengths(hypotheses, references)
    return BLEU().corpus_score(list(hypotheses), [list(references)]).score


def caption_bleu(
    hypotheses: Sequence[str], references: Sequence[Sequence[str]], lowercase: bool = False
) -> dict:
    """BLEU-1 to BLEU-4 of captions, each against all the references of its image (COCO's
    Bleu_1..Bleu_4: BLEU-n is the geometric mean of the modified 1..n-gram precisions, times
    the brevity penalty against the closest reference length), scored by sacreBLEU.

    references[i]: image i's captions, any number of them (at least one). sacreBLEU takes
    reference streams of equal length, so image i's list is padded with None, which sacreBLEU
    leaves out (its signature then says nrefs:var). Returns {"bleu1": ..., "bleu4": ...,
    "signature": ...}: sacreBLEU's signature, the same for every order (13a tokens, exp
    smoothing for an order without a match).
    """
    from sacrebleu.metrics import BLEU

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} captions but references for {len(references)} images")
    if not references:
        raise ValueError("scoring needs at least one image")
    for i, refs in enumerate(references):
        if isinstance(refs, str) or not refs or not all(isinstance(r, str) for r in refs):
            raise ValueError(f"references[{i}] must be a non-empty list of caption strings")
    most = max(len(refs) for refs in references)
    streams = [[refs[k] if k < len(refs) else None for refs in references] for k in range(most)]
    scores: dict = {}
    for n in range(1, 5):
        metric = BLEU(max_ngram_order=n, lowercase=lowercase)
        scores[f"bleu{n}"] = metric.corpus_score(list(hypotheses), streams).score
    return {**scores, "signature": str(metric.get_signature())}


ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


@dataclass
class RougeScores:
    """ROUGE-1, -2 and -L F1 (Lin 2004) of each hypothesis against its reference, averaged over
    the sentences and scaled to 0-100, as summarization papers report them (See et al. 2017)."""

    rouge1: float
    rouge2: float
    rougeL: float  # the package's own names
    signature: str

    def __str__(self) -> str:
        return (
            f"ROUGE-1 = {self.rouge1:.2f}  ROUGE-2 = {self.rouge2:.2f}  "
            f"ROUGE-L = {self.rougeL:.2f}  ({self.signature})"
        )

    def records(self) -> list[dict]:
        """One object per ROUGE score, shaped as CorpusScores.records()."""
        names = {"rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeL": "ROUGE-L"}
        return [
            {"name": names[kind], "score": getattr(self, kind), "signature": self.signature}
            for kind in ROUGE_TYPES
        ]


def require_rouge():
    """The rouge-score package's scorer module, or an error that says how to install it."""
    try:
        from rouge_score import rouge_scorer
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "ROUGE needs the rouge-score package: pip install 'heedful[rouge]'"
        ) from None
    return rouge_scorer


def rouge_scores(
    hypotheses: Sequence[str], references: Sequence[str], use_stemmer: bool = True
) -> RougeScores:
    """Mean ROUGE-1/2/L F1 × 100, exactly as the `rouge-score` package scores each pair.

    Its tokenizer lowercases and keeps runs of a-z and 0-9 only, so it suits English; a
    language with other letters loses them (the signature says so). Needs the package:
    pip install 'heedful[rouge]'.
    """
    from importlib.metadata import version

    rouge_scorer = require_rouge()
    _check_lengths(hypotheses, references)
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer)
    totals = dict.fromkeys(ROUGE_TYPES, 0.0)
    for hypothesis, reference in zip(hypotheses, references):
        scores = scorer.score(reference, hypothesis)  # (target, prediction): reference first
        for name in ROUGE_TYPES:
            totals[name] += scores[name].fmeasure
    mean = {name: 100 * total / len(references) for name, total in totals.items()}
    signature = (
        f"rouge-score {version('rouge-score')}|F1|mean over sentences|n:{len(references)}|"
        f"stemmer:{'porter' if use_stemmer else 'none'}|tok:lowercase a-z0-9"
    )
    return RougeScores(**mean, signature=signature)


LENGTH_BUCKETS = ((1, 10), (11, 20), (21, 30), (31, None))


@dataclass
class LengthBucket:
    label: str  # e.g. "11-20"
    sentences: int
    bleu: float | None  # None for an empty bucket


def bleu_by_length(
    sources: Sequence[str],
    hypotheses: Sequence[str],
    references: Sequence[str],
    buckets: Sequence[tuple[int, int | None]] = LENGTH_BUCKETS,
) -> list[LengthBucket]:
    """Corpus BLEU of the sentences whose *source* has 1-10, 11-20, 21-30, 31+ tokens.

    Length counts whitespace-separated source words, so the table means the same thing for
    every model and vocabulary.
    """
    _check_lengths(hypotheses, references)
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources but {len(references)} references")
    out = []
    for low, high in buckets:
        chosen = [
            i
            for i, s in enumerate(sources)
            if low <= len(s.split()) and (high is None or len(s.split()) <= high)
        ]
        label = f"{low}-{high}" if high is not None else f"{low}+"
        score = (
            bleu([hypotheses[i] for i in chosen], [references[i] for i in chosen])
            if chosen
            else None
        )
        out.append(LengthBucket(label, len(chosen), score))
    return out


def format_length_table(buckets: Sequence[LengthBucket]) -> str:
    rows = ["| source words | sentences | BLEU |", "| --- | ---: | ---: |"]
    for b in buckets:
        rows.append(f"| {b.label} | {b.sentences} | {'-' if b.bleu is None else f'{b.bleu:.2f}'} |")
    return "\n".join(rows)
