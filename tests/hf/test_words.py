"""Pieces merged into words (heedful.visualize.words): spans, labels, and weights that stay
distributions: the mean over a query word's pieces, the sum over a key word's."""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner

from heedful.cli import main
from heedful.visualize.trace import Trace, build_trace
from heedful.visualize.words import merge_words, word_labels, word_spans

from .builders import TEXTS


def test_word_starts_follow_the_tokenizers_marks_and_special_tokens():
    pieces = ["__en__", "▁a", "▁s", "ma", "ll", "▁.", "</s>"]
    spans = word_spans(pieces)
    assert spans == [(0, 1), (1, 2), (2, 5), (5, 6), (6, 7)]
    assert word_labels(pieces, spans) == ["__en__", "a", "small", ".", "</s>"]
    bpe = ["<s>", "a", "Ġs", "m", "Ġ", "do", "</s>", "en_XX"]
    assert word_labels(bpe, word_spans(bpe)) == ["<s>", "a", "sm", "do", "</s>", "en_XX"]


def test_merged_weights_are_means_of_rows_and_sums_of_columns(translators):
    trace = build_trace(translators["m2m_100"], TEXTS[0], num_beams=2, n_best=2)
    merged = merge_words(trace)
    Trace.from_dict(merged.to_dict())  # a valid trace: shapes, weights in [0, 1]
    source = word_spans(trace.source_tokens)
    first, merged_first = trace.hypotheses[0], merged.hypotheses[0]
    target = word_spans(first.tokens)
    cross = np.asarray(first.cross_attention)  # (T, L, H, S)
    got = np.asarray(merged_first.cross_attention)  # (T', L, H, S')
    assert got.shape == (len(target), *cross.shape[1:3], len(source))
    (ts, te), (ss, se) = target[1], source[2]  # a word of several pieces on each side
    expected = cross[ts:te, :, :, ss:se].sum(-1).mean(0)
    np.testing.assert_allclose(got[1, :, :, 2], expected, atol=2e-5)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-3)
    encoder = np.asarray(merged.encoder_self_attention)
    np.testing.assert_allclose(encoder.sum(-1), 1.0, atol=1e-3)
    assert merged_first.top_k == [first.top_k[s] for s, _ in target]


def test_attention_words_writes_a_merged_trace(hf_dirs, tmp_path):
    out = tmp_path / "t.json"
    args = ["attention", str(hf_dirs["marian"]), TEXTS[0], "--words", "--json", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert Trace.load(out).source_tokens[:3] == ["a", "small", "dog"]
