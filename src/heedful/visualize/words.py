"""Subword pieces merged into words, for an attention matrix a person reads word by word.

Pieces are labelled as the tokenizer writes them (▁ SentencePiece's word start, Ġ byte-level
BPE's); a piece that starts with one of those marks, a special token (</s>, <unk>) or a language
code (en_XX, __de__) begins a new word, and so does the piece after a special token. Merging
follows Clark et al. 2019 ("What does BERT look at?", §2): attention TO a word is the SUM over
its pieces (the keys: what the word received in all), attention FROM a word the MEAN over its
pieces (the queries: each piece's distribution weighs the same). Each row stays a distribution
over the keys, so the merged trace is a valid one (weights in [0, 1], rows summing to 1). Summing
the queries instead would give rows that add up to the number of pieces.

merge_words(trace) returns a new trace: the same schema, word labels (pieces joined, the marks
dropped: "▁sm" + "all" -> "small"), cross-attention (T', L, H, S'), encoder self (L, H, S', S')
and decoder self (L, H, T', T'); each word's candidates are those of its first piece, when the
model chose how the word begins. The calculation panels' internals, per piece, are dropped.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from heedful.visualize.trace import DECIMALS, Trace

WORD_START = ("▁", "Ġ")
SPECIAL = re.compile(r"^(<[^<>\s]+>|__[A-Za-z_]+__|[a-z]{2,3}_[A-Z][A-Za-z]{1,3})$")


def word_spans(pieces: list[str]) -> list[tuple[int, int]]:
    """[start, end) of each word in a list of pieces."""
    spans: list[tuple[int, int]] = []
    after_special = True
    for i, piece in enumerate(pieces):
        special = bool(SPECIAL.match(piece))
        if not spans or special or after_special or piece.startswith(WORD_START):
            spans.append((i, i + 1))
        else:
            spans[-1] = (spans[-1][0], i + 1)
        after_special = special
    return spans


def word_labels(pieces: list[str], spans) -> list[str]:
    """A word's pieces joined, its word-start mark dropped (a lone mark stays as it is)."""
    words = []
    for start, end in spans:
        text = "".join(pieces[start:end])
        stripped = text[1:] if text.startswith(WORD_START) and len(text) > 1 else text
        words.append(stripped)
    return words


def _merge(weights, query_spans, key_spans) -> list:
    """(..., Q, K) -> (..., Q', K'): the mean over a query word's rows, the sum over a key
    word's columns, rounded as traces are."""
    a = np.asarray(weights, dtype=np.float64)
    rows = np.stack([a[..., s:e, :].mean(axis=-2) for s, e in query_spans], axis=-2)
    merged = np.stack([rows[..., s:e].sum(axis=-1) for s, e in key_spans], axis=-1)
    return np.clip(merged.round(DECIMALS), 0.0, 1.0).tolist()


def merge_words(trace: Trace) -> Trace:
    """The trace with pieces merged into words (module docstring); Transformer traces only."""
    if trace.model.get("arch") != "transformer":
        raise ValueError("words are merged for Transformer traces; an RNN's states are per piece")
    source = word_spans(trace.source_tokens)
    hypotheses = []
    for h in trace.hypotheses:
        target = word_spans(h.tokens)
        cross = None
        if h.cross_attention is not None:  # [T][L][H][S] -> per layer and head (L, H, T, S)
            per_head = np.moveaxis(np.asarray(h.cross_attention), 0, 2)
            cross = np.moveaxis(np.asarray(_merge(per_head, target, source)), 2, 0).tolist()
        decoder = h.decoder_self_attention
        hypotheses.append(
            replace(
                h,
                tokens=word_labels(h.tokens, target),
                cross_attention=cross,
                decoder_self_attention=None if decoder is None else _merge(decoder, target, target),
                top_k=[h.top_k[start] for start, _ in target],
                internals=None,
            )
        )
    encoder = trace.encoder_self_attention
    return replace(
        trace,
        source_tokens=word_labels(trace.source_tokens, source),
        encoder_self_attention=None if encoder is None else _merge(encoder, source, source),
        hypotheses=hypotheses,
        internals=None,
    )
