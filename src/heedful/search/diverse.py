"""Diverse beam search (Vijayakumar et al. 2018, "Diverse Beam Search: Decoding Diverse
Solutions from Neural Sequence Models", AAAI): a beam's K hypotheses tend to differ only in
their last few tokens, so its n-best say nearly the same thing. Here the K beams of a sentence
are G groups of W = K / G, and at every step the groups choose in turn, group g's extensions
ranked by

    log P(y_1..t) − λ · Σ_{h < g} (how many of group h's choices at step t are y_t)

(the paper's objective with its Hamming diversity: how many times the earlier groups chose
that token at this step). The penalty shapes the choice only: a hypothesis keeps its raw
log-probability, which is what it is ranked by when it ends (score / GNMT length penalty, as
beam search ranks). G = 1 is beam search; λ = 0 makes the groups G independent beam searches
of W beams. A </s> that ends a hypothesis counts as chosen (Hugging Face's group beam search
counts only the beams that go on), so that two groups do not both end the same way.

The search is a Choice of beam.py's loop, so that encoding, prefixes, stopping once the n-best
are certain, the shrinking batch and the reading back of hypotheses are beam search's own.

Shapes: B sentences, K beams per sentence in G groups of W, V target vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from heedful.models.base import Seq2SeqModel
from heedful.search.beam import Ends, check_beam_arguments, extend, search_beams, split
from heedful.search.decoding import Hypothesis


@dataclass(frozen=True)
class Groups:
    """Diverse beam search's Choice (beam.Choice): group g holds a sentence's beams
    g·W .. g·W + W - 1 (decode rows b·K + g·W + ...); in turn, each group's W best extensions
    by score less the diversity term go on, and a </s> among its W best ends a hypothesis
    (beam.split's rule, per group). As for any Choice, the loop has each group start from one
    live beam, keep its own W best finished hypotheses and answer for W of the n-best (with
    W = 1, one each)."""

    k: int
    groups: int
    penalty: float  # λ
    eos_id: int

    def choose(self, scores: torch.Tensor, log_probs: torch.Tensor, step: int) -> tuple[Ends, Ends]:
        b, v, w = scores.size(0), log_probs.size(-1), self.k // self.groups
        log_probs = log_probs.view(b, self.groups, w, v)  # (B, G, W, V)
        first = torch.arange(b, device=scores.device).unsqueeze(1) * self.k  # (B, 1)
        chosen = log_probs.new_zeros(b, v)  # (B, V) times each token was chosen at this step
        finished, alive = [], []
        for g in range(self.groups):
            beams = slice(g * w, (g + 1) * w)
            lp = log_probs[:, g].reshape(b * w, v)  # (B·W, V)
            # ranked by score - λ · (times groups 1..g-1 chose the token): Hamming diversity
            candidates = extend(scores[:, beams], lp, step, self.penalty * chosen, first + g * w)
            ended, going = split(candidates, self.eos_id, w)  # (B, 2W), (B, W)
            for picked in (ended, going):  # a </s> that ends a hypothesis was chosen too
                chosen.scatter_add_(1, picked.token, picked.score.isfinite().to(chosen.dtype))
            finished.append(ended)
            alive.append(going)
        return finished[0].cat(*finished[1:]), alive[0].cat(*alive[1:])  # (B, G·2W), (B, K)


@torch.no_grad()
def diverse_beam_search(
    model: Seq2SeqModel,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    beam_size: int = 6,
    groups: int = 3,
    diversity_penalty: float = 0.5,
    n_best: int = 1,
    length_penalty: float = 1.0,
    max_len_ratio: float = 2.0,
    max_len_offset: int = 10,
    prefix: list[list[int]] | None = None,
) -> list[list[Hypothesis]]:
    """Diverse beam search over a batch: beam_search's arguments and answer (up to n_best
    hypotheses per sentence, best first by score / lp, each score its raw log-probability),
    with the beam of beam_size in `groups` groups that choose in turn, each group's choice
    penalised by diversity_penalty (λ) per earlier group that chose the same token at the
    same step. Each group answers for beam_size / groups of the n_best (beam.py's loop), so
    with as many groups as beams each output comes from its own group."""
    check_beam_arguments(beam_size, n_best)
    if not 1 <= groups <= beam_size or beam_size % groups:
        raise ValueError(
            f"groups must divide beam_size (each group keeps beam_size / groups beams), got "
            f"{groups} groups of {beam_size} beams"
        )
    if not (0.0 <= diversity_penalty and math.isfinite(diversity_penalty)):
        raise ValueError(
            f"diversity_penalty must be finite and at least 0, got {diversity_penalty}"
        )
    choice = Groups(beam_size, groups, diversity_penalty, eos_id)
    lengths = (max_len_ratio, max_len_offset)
    return search_beams(model, src, bos_id, choice, n_best, length_penalty, lengths, prefix)
