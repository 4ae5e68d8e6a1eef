"""Comparing two engines' outputs in a way that holds on every CPU.

Two engines (our float32 search and CTranslate2's, or float32 and int8) compute the same
function with different kernels, so where the float32 model is nearly undecided (two tokens
within rounding of each other) either may win, and which one does depends on the CPU's
instruction set. A disagreement therefore counts only where float32's choice was clear: the
reference model's log-probabilities, computed by teacher forcing, decide whether the first
token where two outputs part was a near-tie.
"""

from __future__ import annotations

import functools

import torch

from heedful.data.batching import collate
from heedful.data.tokenizers import EOS


@functools.cache  # one table per translator, however many outputs are compared
def _vocab(translator) -> dict[str, int]:
    tokenizer = translator.tgt_tokenizer
    return {tokenizer.id_to_token(i): i for i in range(len(tokenizer))}


def _ids(translator, tokens: list[str]) -> list[int]:
    vocab = _vocab(translator)
    return [vocab[t] for t in tokens if t != EOS]


def step_log_probs(translator, source: str, tokens: list[str]) -> torch.Tensor:
    """log P(· | source, tokens[:t]) of `translator`'s float32 model for each t: (T + 1, V)."""
    src = translator.src_tokenizer.encode(source)
    src_b, tgt_in, _ = collate([src], [_ids(translator, tokens)])
    with torch.no_grad():
        return translator.model(src_b, tgt_in).logits.log_softmax(-1)[0].double()


def parting_margin(translator, source: str, ours: list[str], theirs: list[str]) -> float:
    """How clearly the reference model preferred its own token where two outputs first part
    (log P(ours_t) - log P(theirs_t), in nats); 0.0 for equal outputs, inf where one output
    ends (or is cut) where the other goes on and the reference saw no near-tie there."""
    if ours == theirs:
        return 0.0
    shorter = min(len(ours), len(theirs))
    t = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), shorter)
    if t == shorter:  # one was cut at the length limit: no choice was made there
        return float("inf")
    log_probs = step_log_probs(translator, source, ours[:t])[t]
    vocab = _vocab(translator)
    return float(log_probs[vocab[ours[t]]] - log_probs[vocab[theirs[t]]])


def sequence_log_prob(translator, source: str, tokens: list[str]) -> float:
    """log P(tokens | source) under the reference model, </s> included when it ends there."""
    log_probs = step_log_probs(translator, source, tokens)
    ids = _ids(translator, tokens) + ([_vocab(translator)[EOS]] if tokens[-1:] == [EOS] else [])
    return float(sum(log_probs[t, i] for t, i in enumerate(ids)))


def clear_disagreements(translator, sources, ours, theirs, margin: float) -> list[str]:
    """The sources whose greedy outputs part where the reference's margin exceeded `margin`."""
    return [
        source
        for source, a, b in zip(sources, ours, theirs, strict=True)
        if abs(parting_margin(translator, source, a.tokens, b.tokens)) > margin
    ]


def clear_beam_disagreements(translator, sources, ours, theirs, margin: float) -> list[str]:
    """The sources whose beam outputs (ranked by raw log P: length penalty 0) differ by more
    than `margin` in the reference model's log-probability: not a near-tie of two beams."""
    return [
        source
        for source, a, b in zip(sources, ours, theirs, strict=True)
        if a.tokens != b.tokens
        and abs(
            sequence_log_prob(translator, source, a.tokens)
            - sequence_log_prob(translator, source, b.tokens)
        )
        > margin
    ]
