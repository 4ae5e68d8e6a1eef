"""Beam search, written once against the models' encode / init_state / decode_step.

One loop (search_beams) runs every beam search: each step extends every beam of every sentence
by one token, a Choice picks which extensions stay alive and which end, the finished
hypotheses worth keeping are kept, and a sentence leaves the batch once its n-best are certain.
Plain beam search's Choice (Beams) keeps a sentence's K best extensions; diverse.py's splits the
K beams into groups that choose in turn.

Shapes: B sentences, K beams per sentence, V target vocabulary, N hypotheses; a decode step sees
R = B·K rows, sentence-major (sentence b owns rows b·K .. b·K + K - 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from heedful.models.base import Seq2SeqModel
from heedful.search.decoding import Hypothesis, max_output_lengths
from heedful.search.prefix import force, prefix_tensor
from heedful.search.topk import row_topk


def gnmt_length_penalty(length, alpha: float):
    """lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, §7); |Y| counts </s>. alpha = 0 gives 1.

    Beam search ranks finished hypotheses by log P(Y) / lp(Y): without it every extra token can
    only lower a log-probability, so the search favours short outputs.
    """
    return ((5.0 + length) / 6.0) ** alpha


@dataclass
class Ends:
    """Hypotheses named by where they end, each field (B, N): the step, the decode row at that
    step they extend and the token chosen there. Their history is read back from the _History.
    Public for the Choices of other modules (diverse.py), which make and keep them."""

    score: torch.Tensor  # raw sum of log-probs; -inf marks an empty slot
    step: torch.Tensor
    row: torch.Tensor
    token: torch.Tensor

    def take(self, index: torch.Tensor) -> Ends:
        """Pick along the hypothesis axis: index (B, N')."""
        return Ends(*(f.gather(1, index) for f in self.fields()))

    def keep(self, sentences: torch.Tensor) -> Ends:
        """Pick along the sentence axis: sentences (B',), or a mask (B,)."""
        return Ends(*(f[sentences] for f in self.fields()))

    def part(self, start: int, count: int) -> Ends:
        """The hypotheses start .. start + count - 1 of every sentence (B, count); all of them
        are these Ends themselves (one group: no slices made at every step)."""
        if start == 0 and count == self.score.size(1):
            return self
        return Ends(*(f[:, start : start + count] for f in self.fields()))

    def cat(self, *others: Ends) -> Ends:
        """These hypotheses, then the others', along the hypothesis axis (no others: these)."""
        if not others:
            return self
        return Ends(*(torch.cat(group, 1) for group in zip(*(e.fields() for e in (self, *others)))))

    def normalized(self, alpha: float) -> torch.Tensor:
        """score / lp (B, N): how beam search ranks finished hypotheses."""
        return self.score / gnmt_length_penalty(self.step + 1, alpha)  # (B, N)

    def fields(self) -> tuple[torch.Tensor, ...]:
        return self.score, self.step, self.row, self.token


@dataclass
class _History:
    """What each step saw, per decode row: the token fed in and the row of the previous step it
    continues (a backpointer), so that a hypothesis's tokens are read back once, at the end."""

    fed: list[torch.Tensor]
    parent: list[torch.Tensor]

    def record(self, fed: torch.Tensor, parent: torch.Tensor) -> None:
        self.fed.append(fed)
        self.parent.append(parent)

    def backtrack(self, ends: Ends) -> torch.Tensor:
        """Follow the backpointers of M hypotheses (fields (M,)) to step 0, all at once.

        Returns tokens (M, T), T = 1 + the latest end step; positions past a hypothesis's own
        end are left as zeros.
        """
        m, steps = ends.step.numel(), int(ends.step.max()) + 1
        tokens = ends.token.new_zeros(m, steps)  # (M, T)
        tokens[torch.arange(m, device=tokens.device), ends.step] = ends.token
        row = ends.row.clone()
        for s in range(steps - 1, 0, -1):
            here = (ends.step >= s).nonzero().squeeze(1)  # the hypotheses alive at step s
            at = row[here]
            tokens[here, s - 1] = self.fed[s][at]
            row[here] = self.parent[s][at]
        return tokens


def extend(
    scores: torch.Tensor,
    log_probs: torch.Tensor,
    step: int,
    penalty: torch.Tensor | None = None,
    rows: torch.Tensor | None = None,
) -> Ends:
    """The 2K best one-token extensions of each sentence's K beams, best first (B, 2K).

    scores (B, K) of the beams, log_probs (B·K, V) of their next token. Without a penalty, each
    beam's own best are taken first (_extend_each_beam_first). penalty (B, V), when given, is
    taken from each extension by its token for the choice only (best first then means by
    score - penalty), the Ends keeping the raw log-probability: a diversity term (diverse.py);
    then one topk runs over (B, K·V). rows (B, 1): the decode row of each sentence's first beam
    [default: b · K, the sentence's K beams being all its rows].
    """
    if penalty is None:
        return _extend_each_beam_first(scores, log_probs, step, rows)
    b, k = scores.shape
    v = log_probs.size(-1)
    total = (scores.reshape(-1, 1) + log_probs).view(b, k * v)  # (B, K·V)
    _, flat = (total - penalty.repeat(1, k)).topk(min(2 * k, k * v), dim=1)  # (B, 2K)
    score = total.gather(1, flat)  # raw, whatever ranked them
    beam_rows = _first_rows(k, rows, flat) + flat // v  # (B, 2K)
    return Ends(score, torch.full_like(flat, step), beam_rows, flat % v)


def _first_rows(k: int, rows: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """The decode row of each sentence's first beam (B, 1): rows, or b · K (B = len(like))."""
    return torch.arange(like.size(0), device=like.device).unsqueeze(1) * k if rows is None else rows


def _extend_each_beam_first(scores, log_probs, step: int, rows) -> Ends:
    """extend() without a penalty, in two rounds: each beam's own 2K best tokens (B·K, 2K),
    then the 2K best of those K·2K per sentence (B, 2K).

    The same extensions: a sentence's 2K best of score + log p can hold at most 2K of any one
    beam, and within a beam the order is log p's (its score is one number). What it saves is
    the sum scores + log p over the whole vocabulary, a (B, K·V) tensor written and read again
    at every step (K·V = 40,000 floats a sentence at beam 5 with an 8k vocabulary).
    """
    b, k = scores.shape
    n = min(2 * k, log_probs.size(-1))
    top, token = row_topk(log_probs, n)  # (B·K, n) each beam's best, best first
    total = (scores.reshape(-1, 1) + top).view(b, k * n)  # (B, K·n)
    best, flat = total.topk(min(2 * k, k * n), dim=1)  # (B, 2K)
    tokens = token.view(b, k * n).gather(1, flat)  # (B, 2K)
    return Ends(best, torch.full_like(flat, step), _first_rows(k, rows, flat) + flat // n, tokens)


def split(candidates: Ends, eos_id: int, k: int) -> tuple[Ends, Ends]:
    """Candidates (B, 2K) -> newly finished (B, 2K; -inf where none) and the K alive (B, K).

    As in fairseq and Hugging Face, a </s> counts only when it ranks among the K best candidates,
    so beam_size=1 makes exactly greedy's choices. Taking 2K candidates leaves K that are not </s>
    (each beam offers one </s> at most).
    """
    is_eos = candidates.token == eos_id
    rank = torch.arange(is_eos.size(1), device=is_eos.device)  # (2K,)
    ended = is_eos & (rank < k) & candidates.score.isfinite()
    finished = Ends(candidates.score.masked_fill(~ended, -torch.inf), *candidates.fields()[1:])
    order = torch.sort(is_eos.to(torch.int8), dim=1, stable=True).indices[:, :k]  # (B, K)
    return finished, candidates.take(order)  # non-</s> first, still best first


def best_finished(pool: Ends, finished: Ends, k: int, alpha: float) -> Ends:
    """The K best finished hypotheses so far, by score / lp, best first (B, K)."""
    both = pool.cat(finished)  # (B, 3K)
    return both.take(both.normalized(alpha).topk(k, dim=1).indices)


class Choice(Protocol):
    """What makes a beam search: a sentence's K beams, in `groups` groups of W = K / groups
    (1 for plain beam search), and how a step turns the extensions of each group's beams into
    the W that go on and the hypotheses that end. The loop (search_beams) does the rest, group
    by group where it matters: each group starts from one live beam, keeps its own W best
    finished hypotheses and answers for W of the n-best (_outputs)."""

    k: int  # beams per sentence: its decode rows, group g's being g·W .. g·W + W - 1
    groups: int

    def choose(self, scores: torch.Tensor, log_probs: torch.Tensor, step: int) -> tuple[Ends, Ends]:
        """scores (B, K) of the beams and log_probs (B·K, V) of their next token -> the newly
        finished hypotheses (B, G·M: each group's M in turn, -inf where none) and the K beams
        that go on (B, K, group by group)."""
        ...


@dataclass(frozen=True)
class Beams:
    """Plain beam search's Choice: the K best extensions of a sentence's K beams go on."""

    k: int
    eos_id: int
    groups: int = 1

    def choose(self, scores: torch.Tensor, log_probs: torch.Tensor, step: int) -> tuple[Ends, Ends]:
        return split(extend(scores, log_probs, step), self.eos_id, self.k)


def _start(batch: int, k: int, groups: int, device) -> tuple[Ends, torch.Tensor]:
    """An empty pool of finished hypotheses (B, K) and the scores (B, K) of the beams: one live
    beam per group to start (per sentence, for plain beam search), since the others would only
    repeat it."""
    empty = torch.full((batch, k), -torch.inf, device=device)  # (B, K)
    zeros = torch.zeros((batch, k), dtype=torch.long, device=device)  # (B, K)
    scores = empty.clone()
    scores[:, :: k // groups] = 0.0
    return Ends(empty, zeros, zeros, zeros), scores


def _keep(pool: Ends, finished: Ends, groups: int, alpha: float) -> Ends:
    """Each group's W best finished hypotheses so far (B, K), by score / lp: from those kept
    (B, K) and the newly finished (B, G·M), each group's own."""
    w, m = pool.score.size(1) // groups, finished.score.size(1) // groups
    kept = [
        best_finished(pool.part(g * w, w), finished.part(g * m, m), w, alpha) for g in range(groups)
    ]
    return kept[0].cat(*kept[1:])


def _is_done(pool: Ends, alive: Ends, limits, step: int, alpha: float, n_best: int):
    """Which sentences are finished after `step`, and which of those reached their limit (B,).

    Optimal stopping (Huang et al. 2017, "When to finish?"): log-probs are <= 0, so an alive
    hypothesis can only lose score; lp is monotonic in length, so the best it can still reach is
    its score over lp at one end of the lengths left to it, [step + 2, limit]. Once n_best
    finished hypotheses are kept and the best alive one cannot beat the n_best-th of them, the
    n_best returned cannot change: with n_best = 1 the search stops as soon as its answer is
    certain, not when K are (Multi30k test2016, beam 5: 10% fewer decode rows, same outputs).
    """
    at_limit = step + 1 >= limits
    best_alive = alive.score.max(dim=1).values  # (B,)
    shortest = best_alive / gnmt_length_penalty(step + 2, alpha)
    longest = best_alive / gnmt_length_penalty(limits, alpha)
    # (B,) -inf until n_best are kept; the pool need not be in order (each group keeps its own)
    worst_kept = pool.normalized(alpha).topk(n_best, dim=1).values[:, -1]
    hopeless = worst_kept.isfinite() & (torch.maximum(shortest, longest) <= worst_kept)
    return at_limit | hopeless | ~best_alive.isfinite(), at_limit


def _outputs(pool: Ends, alive: Ends, at_limit, n_best: int, alpha: float, groups: int):
    """The n_best hypotheses of finished sentences (B, n_best) and whether each ended in </s>.

    Each group answers for W = K / groups places (_answers); of all the answers, finished ones
    come first, by score / lp, then those cut at the length limit, by score (all have the same
    length). Empty places have score -inf.
    """
    w = pool.score.size(1) // groups
    parts = [
        _answers(pool.part(g * w, w), alive.part(g * w, w), at_limit, alpha) for g in range(groups)
    ]
    answers = parts[0][0].cat(*(a for a, _ in parts[1:]))  # (B, K)
    ended = torch.cat([e for _, e in parts], 1)  # (B, K)
    by_rank = _best_first(torch.where(ended, answers.normalized(alpha), answers.score))
    # 0 ended, 1 cut at the limit, 2 an empty place: sorted by kind, then by rank within it
    kind = torch.where(answers.score.isfinite(), (~ended).to(torch.int8), 2)  # (B, K)
    order = by_rank.gather(1, torch.sort(kind.gather(1, by_rank), dim=1, stable=True).indices)
    return answers.take(order[:, :n_best]), ended.gather(1, order[:, :n_best])


def _answers(pool: Ends, alive: Ends, at_limit, alpha: float) -> tuple[Ends, torch.Tensor]:
    """A group's W answers (B, W) and whether each ended in </s>: its finished hypotheses by
    score / lp, then, at the length limit, its alive ones by score in the places left."""
    w = pool.score.size(1)
    pool = pool.take(_best_first(pool.normalized(alpha)))
    alive = alive.take(_best_first(alive.score))
    both = pool.cat(alive)  # (B, 2W)
    ended = torch.zeros_like(both.score, dtype=torch.bool)
    ended[:, :w] = True
    usable = both.score.isfinite() & (ended | at_limit.unsqueeze(1))  # (B, 2W)
    order = torch.sort((~usable).to(torch.int8), dim=1, stable=True).indices[:, :w]  # (B, W)
    picked = both.take(order)
    picked.score = picked.score.masked_fill(~usable.gather(1, order), -torch.inf)
    return picked, ended.gather(1, order)


def _best_first(scores: torch.Tensor) -> torch.Tensor:
    """The order (B, N) of scores (B, N) from the best, ties kept in place: none of plain beam
    search's hypotheses move (they come in that order), several groups' are merged."""
    return torch.sort(scores, dim=1, descending=True, stable=True).indices


def _beam_rows(sentences: torch.Tensor, k: int) -> torch.Tensor:
    """Sentence indices (B',) -> the indices of their decode rows (B'·K,)."""
    return (sentences.unsqueeze(1) * k + torch.arange(k, device=sentences.device)).view(-1)


def check_beam_arguments(beam_size: int, n_best: int) -> None:
    """ValueError naming the argument, for a beam of no beams or more outputs than beams."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    if not 1 <= n_best <= beam_size:
        raise ValueError(
            f"n_best must be between 1 and beam_size ({beam_size}), got {n_best}: beam search "
            "keeps only beam_size hypotheses, so it cannot return more"
        )


@torch.no_grad()
def beam_search(
    model: Seq2SeqModel,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    beam_size: int = 5,
    n_best: int = 1,
    length_penalty: float = 1.0,
    max_len_ratio: float = 2.0,
    max_len_offset: int = 10,
    prefix: list[list[int]] | None = None,
) -> list[list[Hypothesis]]:
    """Beam search over a batch: every sentence's beams decode together as one (B·K) batch.

    src (B, S) padded source ids. Returns, per sentence, up to n_best hypotheses, best first:
    those that ended in </s> ranked by score / lp with lp the GNMT length penalty
    ((5 + |Y|) / 6) ** length_penalty (0 ranks by raw log-probability), then, only if fewer than
    n_best ended, unfinished ones cut at the length limit (ratio · source length + offset).
    Hypothesis.score stays the raw sum of log-probs.

    A sentence stops once it keeps n_best finished hypotheses and its best alive one cannot
    beat the n_best-th of them even at the most favourable length (so stopping never changes
    the result), or at its length limit. Stopped sentences leave the batch. prefix: as greedy's.
    """
    check_beam_arguments(beam_size, n_best)
    lengths = (max_len_ratio, max_len_offset)
    choice = Beams(beam_size, eos_id)
    return search_beams(model, src, bos_id, choice, n_best, length_penalty, lengths, prefix)


def search_beams(
    model: Seq2SeqModel,
    src: torch.Tensor,
    bos_id: int,
    choice: Choice,
    n_best: int,
    length_penalty: float,
    ratio_offset: tuple[float, int],
    prefix: list[list[int]] | None,
) -> list[list[Hypothesis]]:
    """The loop of every beam search (beam_search's arguments; `choice` says how a step
    chooses, Beams or diverse.py's Groups): decode every beam one step, let the choice pick,
    keep, stop the sentences whose n_best are certain, and follow the beams that go on."""
    batch, k, device = src.size(0), choice.k, src.device
    if batch == 0:
        return []
    limits = max_output_lengths(model.source_lengths(src), *ratio_offset)  # (B,)
    forced = prefix_tensor(prefix, device, limits)  # (B, P) or None, within the limits
    memory = model.encode(src)
    state = model.init_state(memory)
    tile = torch.arange(batch, device=device).repeat_interleave(k)  # (B·K,) each sentence K times
    sentences = torch.arange(batch, device=device)  # (B,) which input sentence each row block is
    pool, scores = _start(batch, k, choice.groups, device)  # (B, K) each
    last = torch.full((batch * k,), bos_id, dtype=torch.long, device=device)  # (B·K,)
    history, parents, results = _History([], []), tile, []  # step 0's parents are not followed
    for step in range(int(limits.max())):
        if step == 0:  # a sentence's K beams all read <s>: one row each, then K copies
            log_probs, state, _ = model.decode_step(memory, state, last[::k], need_weights=False)
            log_probs, state = log_probs.index_select(0, tile), state.index_select(tile)
            memory = memory.index_select(tile)
        else:
            log_probs, state, _ = model.decode_step(memory, state, last, need_weights=False)
        log_probs = force(log_probs, forced, step, sentences, k)
        history.record(last, parents)
        finished, alive = choice.choose(scores, log_probs, step)
        pool = _keep(pool, finished, choice.groups, length_penalty)
        done, at_limit = _is_done(pool, alive, limits, step, length_penalty, n_best)
        same_sources = not bool(done.any())  # no sentence leaves: beams move within their own
        if not same_sources:
            ends = pool.keep(done), alive.keep(done), at_limit[done], n_best, length_penalty
            results.append((sentences[done], *_outputs(*ends, choice.groups)))
            if bool(done.all()):
                break
            active = (~done).nonzero().squeeze(1)  # (B',) finished sentences leave the batch
            sentences, limits = sentences[active], limits[active]
            pool, alive = pool.keep(active), alive.keep(active)
            memory = memory.index_select(_beam_rows(active, k))
        parents, last, scores = alive.row.reshape(-1), alive.token.reshape(-1), alive.score
        # each row now continues the beam it extends
        state = state.index_select(parents, same_sources)
    return _collect(results, history, batch)


def _collect(results, history: _History, batch: int) -> list[list[Hypothesis]]:
    """Read every returned hypothesis's history back in one pass, then group by sentence."""
    sentence = torch.cat([s.unsqueeze(1).expand_as(e) for s, _, e in results]).view(-1)  # (M,)
    ended = torch.cat([e for _, _, e in results]).view(-1)  # (M,)
    ends = Ends(*(torch.cat(f).view(-1) for f in zip(*(p.fields() for _, p, _ in results))))
    usable = ends.score.isfinite()  # (M,) empty places dropped
    sentence, ended, ends = sentence[usable], ended[usable], ends.keep(usable)
    tokens = history.backtrack(ends).tolist()  # (M, T)
    out: list[list[Hypothesis]] = [[] for _ in range(batch)]
    for i, (b, n) in enumerate(zip(sentence.tolist(), (ends.step + 1).tolist())):
        out[b].append(Hypothesis.of(tokens[i][:n], bool(ended[i]), float(ends.score[i])))
    return out
