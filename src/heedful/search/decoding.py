"""Search, written once against the models' encode / init_state / decode_step.

Greedy search, sampling (sampling.py) and beam search; each can be given a prefix the outputs
must start with (prefix.py). All return, for every sentence, the tokens produced and their
log-probability. They do not record attention: the weights behind an output come from one
teacher-forced pass over it (Translator.replay), which computes the same numbers the search saw,
since each step sees the same prefix, for every layer and head and for any search.

Shapes: B sentences, K beam size, V target vocabulary, S source length, L layers, H heads;
a decode step sees R = B·K rows, sentence-major (sentence b owns rows b·K .. b·K + K - 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from heedful.models.base import Seq2SeqModel
from heedful.search.prefix import force, prefix_tensor
from heedful.search.sampling import Sampling, draw


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
        best_score, last = log_probs.max(dim=-1) if choose is None else choose(log_probs)  # (R,)
        active = ~done[rows]  # (R,)
        scores[rows] += torch.where(active, best_score, torch.zeros_like(best_score))
        lengths[rows] += active.long()
        tokens[rows, step] = last
        done[rows] |= (last == eos_id) | (step + 1 >= limits[rows])
        if bool(done.all()):
            break
        if choose is None:
            memory, state, rows, last, forced = _compact(memory, state, rows, last, forced, done)
    produced = tokens.tolist()
    return [
        _hypothesis(row[: int(n)], row[int(n) - 1] == eos_id, float(score))
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


def _hypothesis(produced: list[int], finished: bool, score: float) -> Hypothesis:
    """produced: every chosen token, </s> included when finished."""
    return Hypothesis(produced[:-1] if finished else produced, score, finished)


# ---------------------------------------------------------------------------------------------
# Beam search
# ---------------------------------------------------------------------------------------------


def gnmt_length_penalty(length, alpha: float):
    """lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, §7); |Y| counts </s>. alpha = 0 gives 1.

    Beam search ranks finished hypotheses by log P(Y) / lp(Y): without it every extra token can
    only lower a log-probability, so the search favours short outputs.
    """
    return ((5.0 + length) / 6.0) ** alpha


@dataclass
class _Ends:
    """Hypotheses named by where they end, each field (B, N): the step, the decode row at that
    step they extend and the token chosen there. Their history is read back from the _Trace."""

    score: torch.Tensor  # raw sum of log-probs; -inf marks an empty slot
    step: torch.Tensor
    row: torch.Tensor
    token: torch.Tensor

    def take(self, index: torch.Tensor) -> _Ends:
        """Pick along the hypothesis axis: index (B, N')."""
        return _Ends(*(f.gather(1, index) for f in self._fields()))

    def keep(self, sentences: torch.Tensor) -> _Ends:
        return _Ends(*(f[sentences] for f in self._fields()))

    def cat(self, other: _Ends) -> _Ends:
        return _Ends(*(torch.cat(pair, 1) for pair in zip(self._fields(), other._fields())))

    def normalized(self, alpha: float) -> torch.Tensor:
        return self.score / gnmt_length_penalty(self.step + 1, alpha)  # (B, N)

    def _fields(self):
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

    def backtrack(self, ends: _Ends) -> torch.Tensor:
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


def _extend(scores: torch.Tensor, log_probs: torch.Tensor, step: int) -> _Ends:
    """The 2K best one-token extensions of each sentence's K beams, best first (B, 2K).

    scores (B, K) of the beams, log_probs (B·K, V) of their next token: one topk over (B, K·V).
    """
    b, k = scores.shape
    v = log_probs.size(-1)
    total = (scores.reshape(-1, 1) + log_probs).view(b, k * v)  # (B, K·V)
    score, flat = total.topk(min(2 * k, k * v), dim=1)  # (B, 2K)
    sentence_rows = torch.arange(b, device=scores.device).unsqueeze(1) * k  # (B, 1)
    return _Ends(score, torch.full_like(flat, step), sentence_rows + flat // v, flat % v)


def _split(candidates: _Ends, eos_id: int, k: int) -> tuple[_Ends, _Ends]:
    """Candidates (B, 2K) -> newly finished (B, 2K; -inf where none) and the K alive (B, K).

    As in fairseq and Hugging Face, a </s> counts only when it ranks among the K best candidates,
    so beam_size=1 makes exactly greedy's choices. Taking 2K candidates leaves K that are not </s>
    (each beam offers one </s> at most).
    """
    is_eos = candidates.token == eos_id
    rank = torch.arange(is_eos.size(1), device=is_eos.device)  # (2K,)
    ended = is_eos & (rank < k) & candidates.score.isfinite()
    finished = _Ends(candidates.score.masked_fill(~ended, -torch.inf), *candidates._fields()[1:])
    order = torch.sort(is_eos.to(torch.int8), dim=1, stable=True).indices[:, :k]  # (B, K)
    return finished, candidates.take(order)  # non-</s> first, still best first


def _best_finished(pool: _Ends, finished: _Ends, k: int, alpha: float) -> _Ends:
    """The K best finished hypotheses so far, by score / lp, best first (B, K)."""
    both = pool.cat(finished)  # (B, 3K)
    return both.take(both.normalized(alpha).topk(k, dim=1).indices)


def _is_done(pool: _Ends, alive: _Ends, limits, step: int, alpha: float, n_best: int):
    """Which sentences are finished after `step`, and which of those reached their limit (B,).

    Optimal stopping (Huang et al. 2017, "When to finish?"): log-probs are <= 0, so an alive
    hypothesis can only lose score; lp is monotonic in length, so the best it can still reach is
    its score over lp at one end of the lengths left to it, [step + 2, limit]. Once n_best
    finished hypotheses are kept and the best alive one cannot beat the n_best-th of them, the
    n_best returned cannot change: with n_best = 1 the search stops as soon as its answer is
    certain, not when K are (Multi30k test2016, beam 5: 10% fewer decode rows, same outputs).
    """
    at_limit = step + 1 >= limits
    best_alive = alive.score[:, 0]  # (B,)
    shortest = best_alive / gnmt_length_penalty(step + 2, alpha)
    longest = best_alive / gnmt_length_penalty(limits, alpha)
    worst_kept = pool.normalized(alpha)[:, n_best - 1]  # (B,) -inf until n_best are kept
    hopeless = worst_kept.isfinite() & (torch.maximum(shortest, longest) <= worst_kept)
    return at_limit | hopeless | ~best_alive.isfinite(), at_limit


def _outputs(pool: _Ends, alive: _Ends, at_limit, n_best: int) -> tuple[_Ends, torch.Tensor]:
    """The n_best hypotheses of finished sentences (B, n_best) and whether each ended in </s>.

    Finished ones come first, by score / lp; alive ones at the length limit fill any places left,
    by score (all have the same length). Empty places have score -inf.
    """
    both = pool.cat(alive)  # (B, 2K)
    ended = torch.zeros_like(both.score, dtype=torch.bool)
    ended[:, : pool.score.size(1)] = True
    usable = both.score.isfinite() & (ended | at_limit.unsqueeze(1))  # (B, 2K)
    order = torch.sort((~usable).to(torch.int8), dim=1, stable=True).indices[:, :n_best]
    picked = both.take(order)
    picked.score = picked.score.masked_fill(~usable.gather(1, order), -torch.inf)
    return picked, ended.gather(1, order)


def _beam_rows(sentences: torch.Tensor, k: int) -> torch.Tensor:
    """Sentence indices (B',) -> the indices of their decode rows (B'·K,)."""
    return (sentences.unsqueeze(1) * k + torch.arange(k, device=sentences.device)).view(-1)


def _check_beam_arguments(beam_size: int, n_best: int) -> None:
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
    _check_beam_arguments(beam_size, n_best)
    batch, k, device = src.size(0), beam_size, src.device
    if batch == 0:
        return []
    limits = max_output_lengths(model.source_lengths(src), max_len_ratio, max_len_offset)  # (B,)
    forced = prefix_tensor(prefix, device, limits)  # (B, P) or None, within the limits
    memory = model.encode(src)
    tile = torch.arange(batch, device=device).repeat_interleave(k)  # (B·K,) each sentence K times
    memory, state = memory.index_select(tile), model.init_state(memory).index_select(tile)
    sentences = torch.arange(batch, device=device)  # (B,) which input sentence each row block is
    pool, scores = _start(batch, k, device)  # finished hypotheses (none), beams' scores (B, K)
    last = torch.full((batch * k,), bos_id, dtype=torch.long, device=device)  # (B·K,)
    history, parents, results = _History([], []), tile, []  # step 0's parents are not followed
    for step in range(int(limits.max())):
        log_probs, state, _ = model.decode_step(memory, state, last, need_weights=False)
        log_probs = force(log_probs, forced, step, sentences, k)
        history.record(last, parents)
        finished, alive = _split(_extend(scores, log_probs, step), eos_id, k)
        pool = _best_finished(pool, finished, k, length_penalty)
        done, at_limit = _is_done(pool, alive, limits, step, length_penalty, n_best)
        same_sources = not bool(done.any())  # no sentence leaves: beams move within their own
        if not same_sources:
            picked, ended = _outputs(pool.keep(done), alive.keep(done), at_limit[done], n_best)
            results.append((sentences[done], picked, ended))
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


def _start(batch: int, k: int, device) -> tuple[_Ends, torch.Tensor]:
    """An empty pool of finished hypotheses (B, K) and the scores (B, K) of the beams: one live
    beam per sentence to start, since the others would only repeat it."""
    empty = torch.full((batch, k), -torch.inf, device=device)  # (B, K)
    zeros = torch.zeros((batch, k), dtype=torch.long, device=device)  # (B, K)
    scores = empty.clone()
    scores[:, 0] = 0.0
    return _Ends(empty, zeros, zeros, zeros), scores


def _collect(results, history: _History, batch: int) -> list[list[Hypothesis]]:
    """Read every returned hypothesis's history back in one pass, then group by sentence."""
    sentence = torch.cat([s.unsqueeze(1).expand_as(e) for s, _, e in results]).view(-1)  # (M,)
    ended = torch.cat([e for _, _, e in results]).view(-1)  # (M,)
    ends = _Ends(*(torch.cat(f).view(-1) for f in zip(*(p._fields() for _, p, _ in results))))
    usable = ends.score.isfinite()  # (M,) empty places dropped
    sentence, ended, ends = sentence[usable], ended[usable], ends.keep(usable)
    tokens = history.backtrack(ends).tolist()  # (M, T)
    out: list[list[Hypothesis]] = [[] for _ in range(batch)]
    for i, (b, n) in enumerate(zip(sentence.tolist(), (ends.step + 1).tolist())):
        out[b].append(_hypothesis(tokens[i][:n], bool(ended[i]), float(ends.score[i])))
    return out
