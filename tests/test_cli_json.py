"""`heedful evaluate --json`: one JSON document on stdout, each metric as sacreBLEU's own
`--format json` gives it (name, score, signature, verbose_score), checked against sacreBLEU
scoring the same translations, with the settings that made them."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from sacrebleu.metrics import BLEU, CHRF, TER

import heedful
from heedful.cli import main
from heedful.evaluation import tokenized_bleu


@pytest.fixture
def test_files(reverse_test_set, tmp_path):
    pairs = reverse_test_set[:40]
    (tmp_path / "src.txt").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (tmp_path / "ref.txt").write_text("".join(r + "\n" for _, r in pairs), encoding="utf-8")
    return pairs, ["--src", str(tmp_path / "src.txt"), "--ref", str(tmp_path / "ref.txt")]


def _evaluate(model_dir, *args: str) -> dict:
    result = CliRunner().invoke(main, ["evaluate", str(model_dir), "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # the whole of stdout: one document, nothing else


def test_each_metric_is_sacrebleus_own_score_and_signature(reverse_model_dir, test_files):
    pairs, files = test_files
    report = _evaluate(reverse_model_dir, *files, "--batch-size", "7")
    outputs = [t.text for t in heedful.load(reverse_model_dir).translate([s for s, _ in pairs])]
    references = [[r for _, r in pairs]]
    by_name = {record["name"]: record for record in report["scores"]}
    assert list(by_name) == ["BLEU", "chrF2", "TER"]
    for name, metric in (("BLEU", BLEU()), ("chrF2", CHRF()), ("TER", TER())):
        score = metric.corpus_score(outputs, references)
        assert by_name[name]["score"] == pytest.approx(score.score, abs=1e-9)
        assert by_name[name]["signature"] == str(metric.get_signature())
    bleu = BLEU().corpus_score(outputs, references)
    assert by_name["BLEU"]["verbose_score"] in bleu.format(score_only=False)
    assert "/" in by_name["BLEU"]["verbose_score"]  # the n-gram precisions
    assert report["sentences"] == len(pairs)
    assert report["model"] == str(reverse_model_dir)
    settings = report["settings"]
    assert settings["batch_size"] == 7 and settings["num_beams"] == 1  # the model's own
    assert settings["engine"] == "torch" and settings["metric"] == "bleu"
    assert settings["src"] == files[1] and settings["ref"] == files[3]
    assert sum(b["sentences"] for b in report["bleu_by_length"]) == len(pairs)
    papers = tokenized_bleu(outputs, references[0], heedful.load(reverse_model_dir).languages[1])
    assert report["tokenized_bleu"] == pytest.approx(papers.record())
    text = CliRunner().invoke(main, ["evaluate", str(reverse_model_dir), *files]).output
    assert text.startswith(f"BLEU = {bleu.score:.2f}  (")  # without --json: the text report
    assert str(papers) in text  # the tokenized BLEU papers report, beside sacreBLEU's


def test_rouge_adds_its_scores_with_their_signature(reverse_model_dir, test_files):
    _, files = test_files
    report = _evaluate(reverse_model_dir, *files, "--metric", "rouge", "--beam", "2")
    names = [record["name"] for record in report["scores"]]
    assert names == ["BLEU", "chrF2", "TER", "ROUGE-1", "ROUGE-2", "ROUGE-L"]
    rouge = report["scores"][3]
    assert rouge["signature"].startswith("rouge-score") and 0 <= rouge["score"] <= 100
    assert report["settings"]["num_beams"] == 2
