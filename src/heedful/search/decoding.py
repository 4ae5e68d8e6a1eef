"""Search, written once against the models' encode / init_state / decode_step.

Greedy search and sampling (sampling.py) here, beam search in beam.py; each can be given a
prefix the outputs must start with (prefix.py). All return, for every sentence, the tokens
produced and their log-probability. They do not record attention: the weights behind an output
come from one teacher-forced pass over it (Translator.replay), which computes the same numbers
the search saw, since each step sees the same prefix, for every layer and head and for any
search.

Shapes: B sentences, V target vocabulary, S source length, L layers, H heads; R decode rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from heedful.models.base import Seq2SeqModel
from heedful.search.prefix import force, prefix_tensor
from heedful.search.sampling import Sampling, draw
from heedful.search.topk import row_max


@dataclass
class Hypothesis:
    """One output sentence.

    tokens: produced ids, without <s> and </s>.
    score: sum of the log-probabilities of the tokens and of </s> (if it was produced); beam search
        ranks by score / gnmt_length_penalty but reports this raw sum.
    finished: whether it ended with </s> (else it was cut at the length limit).
    """

    tokens: list[int]
    score: float
    finished: bool = True

    @classmethod
    def of(cls, produced: list[int], finished: bool, score: float) -> Hypothesis:
        """The hypothesis of every token a search chose, </s> included when it finished."""
        return cls(produced[:-1] if finished else produced, score, finished)

    def produced(self, eos_id: int) -> list[int]:
        """The T ids the model chose, step by step: the tokens, then </s> when it finished."""
        return self.tokens + ([eos_id] if self.finished else [])

    def decoder_input(self, bos_id: int, eos_id: int) -> list[int]:
        """What the decoder read at each of the T steps (teacher forcing): <s>, then the
        produced ids shifted by one."""
        return [bos_id, *self.produced(eos_id)[:-1]]


def max_output_lengths(lengths: torch.Tensor, ratio: float, offset: int) -> torch.Tensor:
    """Per-sentence output limit, ratio · source length + offset, at least 1 (B,), from the
    lengths the model measures (model.source_lengths: 0 for a picture, whose limit is the
    offset)."""
    # in float64, as GenerationConfig.max_output_length computes it for one sentence
    return (lengths.double() * ratio + offset).long().clamp(min=1)


@torch.no_grad()
def greedy_search(
    model: Seq2SeqModel,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    max_len_ratio: float = 2.0,
    max_len_offset: int = 10,
    prefix: list[list[int]] | None = None,
) -> list[Hypothesis]:
    """Pick the most probable token at every step until </s> or the length limit.

    prefix: per sentence, ids the output must start with (forced, their log-probabilities
    counted in the score); the search continues after them.
    """
    return _one_path(model, src, bos_id, eos_id, (max_len_ratio, max_len_offset), prefix, None)


@torch.no_grad()
def sample_search(
    model: Seq2SeqModel,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    sampling: Sampling,
    num_samples: int = 1,
    max_len_ratio: float = 2.0,
    max_len_offset: int = 10,
    prefix: list[list[int]] | None = None,
) -> list[list[Hypothesis]]:
    """Draw each token from the model's distribution as `sampling` reshapes it (sampling.py),
    num_samples independent outputs per sentence. Scores are the model's own log-probabilities
    of the drawn tokens. With sampling.seed set, the same batch gives the same samples."""
    if num_samples < 1:
        raise ValueError(f"num_samples must be at least 1, got {num_samples}")
    tile = torch.arange(src.size(0), device=src.device).repeat_interleave(num_samples)
    tiled_prefix = None if prefix is None else [prefix[int(i)] for i in tile]
    generator = sampling.generator(src.device)

    def choose(log_probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        token = draw(log_probs, sampling, generator)  # (R,)
        return log_probs.gather(1, token.unsqueeze(1)).squeeze(1), token

    lengths = (max_len_ratio, max_len_offset)
    found = _one_path(model, src[tile], bos_id, eos_id, lengths, tiled_prefix, choose)
    return [found[i : i + num_samples] for i in range(0, len(found), num_samples)]


def _one_path(model, src, bos_id, eos_id, ratio_offset, prefix, choose) -> list[Hypothesis]:
    """One hypothesis per sentence, each step's token picked by choose(log_probs (R, V)) ->
    (its log-prob, token) each (R,); None picks the most probable (greedy).

    Greedy search drops finished sentences from the decode batch (_compact), so the steps after
    a short output's </s> no longer pay for it; sampling keeps every row, so that a seeded
    generator draws what it drew before for each sentence.
    """
    batch, device = src.size(0), src.device
    limits = max_output_lengths(model.source_lengths(src), *ratio_offset)  # (B,)
    forced = prefix_tensor(prefix, device, limits)
    memory = model.encode(src)
    state = model.init_state(memory)
    rows = torch.arange(batch, device=device)  # (R,) the sentence each decode row is
    last = torch.full((batch,), bos_id, dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)  # (B,)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)  # steps taken, </s> included
    scores = torch.zeros(batch, device=device)
    steps = int(limits.max())
    tokens = torch.zeros(batch, steps, dtype=torch.long, device=device)  # (B, steps)
    for step in range(steps):
        log_probs, state, _ = model.decode_step(memory, state, last, need_weights=False)
        log_probs = force(log_probs, forced, step)
        best_score, last = row_max(log_probs) if choose is None else choose(log_probs)  # (R,)
        # the rows' sentences' totals, in place: index_add_ and index_copy_ are one operator
        # each where `scores[rows] += ..` is three (a gather, the sum, a scatter): these lines
        # and _compact's took 143-162 µs a step of one sentence, now 118-131 (one thread of
        # the Zen 3 EPYC, a microbenchmark)
        active = ~done[rows]  # (R,)
        scores.index_add_(0, rows, torch.where(active, best_score, 0.0).to(scores.dtype))
        lengths.index_add_(0, rows, active.long())
        tokens.select(1, step).index_copy_(0, rows, last)
        ended = (last == eos_id).logical_or_(limits[rows] <= step + 1)  # (R,)
        done.index_copy_(0, rows, ended.logical_or_(~active))  # done[rows] |= ended
        if bool(done.all()):
            break
        if choose is None and len(rows) > 1:  # one row left is alive (else all are done)
            memory, state, rows, last, forced = _compact(memory, state, rows, last, forced, done)
    produced = tokens.tolist()
    return [
        Hypothesis.of(row[: int(n)], row[int(n) - 1] == eos_id, float(score))
        for row, n, score in zip(produced, lengths, scores)
    ]


def _compact(memory, state, rows, last, forced, done):
    """Drop the decode rows of finished sentences once they are an eighth of the batch or more:
    each drop gathers the caches (O(t) per row), so a few finished rows are carried along.
    A row's numbers do not depend on the others', so the outputs stay the same."""
    keep = (~done[rows]).nonzero().squeeze(1)  # (R',)
    if 8 * (len(rows) - len(keep)) < len(rows):
        return memory, state, rows, last, forced
    forced = None if forced is None else forced.index_select(0, keep)
    state = state.index_select(keep)
    return memory.index_select(keep), state, rows[keep], last[keep], forced
