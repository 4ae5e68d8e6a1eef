"""Greedy and beam search: what they return, and that it is what the model would say."""

import itertools
import math
from dataclasses import dataclass

import pytest
import torch

from heedful.config import DecoderConfig, ModelConfig
from heedful.models.build import build_model
from heedful.search.beam import beam_search, extend, gnmt_length_penalty
from heedful.search.decoding import greedy_search

BOS, EOS = 1, 2


def models():
    torch.manual_seed(0)
    yield build_model(ModelConfig(d_model=32, num_heads=4, d_ff=64, dropout=0.0), 20, 15).eval()
    yield build_model(
        ModelConfig(arch="rnn", d_model=16, hidden_size=32, dropout=0.0), 20, 15
    ).eval()


def test_greedy_choices_and_scores_are_what_teacher_forcing_says():
    src = torch.randint(4, 20, (4, 9))
    src[1, 6:] = 0
    src[3, 3:] = 0
    for model in models():
        hyps = greedy_search(model, src, BOS, EOS, max_len_ratio=0.0, max_len_offset=7)
        assert len(hyps) == 4
        for i, hyp in enumerate(hyps):
            src_len = int((src[i] != 0).sum())
            steps = len(hyp.tokens) + (1 if hyp.finished else 0)
            assert 1 <= steps <= 7
            # Feeding the produced output back with teacher forcing reproduces every choice.
            produced = hyp.produced(EOS)
            assert hyp.decoder_input(BOS, EOS) == [BOS] + produced[:-1]
            tgt_in = torch.tensor([hyp.decoder_input(BOS, EOS)])
            with torch.no_grad():
                out = model(src[i : i + 1, :src_len], tgt_in)
            assert out.logits.argmax(-1)[0].tolist() == produced
            score = out.logits.log_softmax(-1)[0, torch.arange(steps), produced].sum()
            assert abs(float(score) - hyp.score) < 1e-4


def test_greedy_stops_at_the_length_limit():
    src = torch.randint(4, 20, (2, 5))
    for model in models():
        hyps = greedy_search(model, src, BOS, EOS, max_len_ratio=0.0, max_len_offset=3)
        for hyp in hyps:
            assert len(hyp.tokens) + hyp.finished <= 3


# ---------------------------------------------------------------------------------------------
# Beam search
# ---------------------------------------------------------------------------------------------

# Tiny random models make nearly flat predictions and (the RNNs) say much the same thing at every
# step. Scaling the output layer up makes them decisive, and a bias on </s> makes some sentences
# end early and others run to the length limit, so that both paths are exercised.
RNN = dict(arch="rnn", d_model=16, hidden_size=32, dropout=0.0)
BEAM_MODELS = {  # name: (config, output scale, </s> bias)
    "transformer": (ModelConfig(d_model=32, num_heads=4, d_ff=64, dropout=0.0), 1.0, 0.0),
    "rnn-bahdanau": (ModelConfig(**RNN), 8.0, 1.0),
    "rnn-luong-feeding": (
        ModelConfig(
            **RNN,
            rnn_cell="lstm",
            decoder=DecoderConfig(attention="luong-general", input_feeding=True),
        ),
        8.0,
        0.75,
    ),
    "rnn-none": (ModelConfig(**RNN, decoder=DecoderConfig(attention="none")), 4.0, 1.75),
}


def beam_model(name, tgt_vocab_size=15, extra_eos_bias=0.0):
    """A tiny random model in eval mode, made decisive (see BEAM_MODELS)."""
    config, scale, eos_bias = BEAM_MODELS[name]
    torch.manual_seed(0)
    model = build_model(config, 20, tgt_vocab_size).eval()
    generator = model.decoder.generator
    with torch.no_grad():
        generator.weight *= scale
        generator.bias *= scale
        generator.bias[EOS] += eos_bias + extra_eos_bias
    return model


def padded_sources(batch=5, length=9):
    torch.manual_seed(1)
    src = torch.randint(4, 20, (batch, length))
    src[1, 6:] = 0
    src[3, 3:] = 0
    src[4, 1:] = 0
    return src


def teacher_forced(model, src_row, produced):
    """Sum of log-probs of `produced` (</s> included) under teacher forcing."""
    tgt_in = torch.tensor([[BOS] + produced[:-1]])
    with torch.no_grad():
        out = model(src_row, tgt_in)
    return float(out.logits.log_softmax(-1)[0, torch.arange(len(produced)), produced].sum())


def produced(hyp):
    return hyp.produced(EOS)


def reference_beam_search(model, src_row, beam_size, limit, alpha):
    """Textbook beam search for one sentence, on Python lists: prefixes are scored by teacher
    forcing (no states, no index_select, no batching) and it never stops before `limit`.

    Same rules as beam_search: the 2K best candidates of a step; a </s> among the K best of them
    is finished; the K best others stay alive. Returns (the n-best list as (tokens, score,
    finished), best first; every hypothesis that was finished on the way).
    """
    alive, ended = [((), 0.0)], []
    for _ in range(limit):
        tgt_in = torch.tensor([[BOS, *tokens] for tokens, _ in alive])
        with torch.no_grad():
            log_probs = model(src_row.expand(len(alive), -1), tgt_in).logits[:, -1]
        log_probs = log_probs.log_softmax(-1).tolist()
        candidates = sorted(
            ((score + lp, tokens + (v,)) for (tokens, score), row in zip(alive, log_probs)
             for v, lp in enumerate(row)),
            reverse=True,
        )[: 2 * beam_size]  # fmt: skip
        ended += [(t, s) for r, (s, t) in enumerate(candidates) if t[-1] == EOS and r < beam_size]
        alive = [(t, s) for s, t in candidates if t[-1] != EOS][:beam_size]
    kept = sorted(ended, key=lambda h: h[1] / gnmt_length_penalty(len(h[0]), alpha), reverse=True)
    n_best = [(list(t[:-1]), s, True) for t, s in kept[:beam_size]]
    return n_best + [(list(t), s, False) for t, s in alive], {t for t, _ in ended}


class RowCounter:
    """Passes the decoding contract through to a model, noting how many rows each step sees."""

    def __init__(self, model):
        self.model, self.pad_id, self.rows = model, model.pad_id, []

    def source_lengths(self, src):
        return self.model.source_lengths(src)

    def encode(self, src):
        return self.model.encode(src)

    def init_state(self, memory):
        return self.model.init_state(memory)

    def decode_step(self, memory, state, last_tokens, need_weights=True):
        self.rows.append(last_tokens.numel())
        return self.model.decode_step(memory, state, last_tokens, need_weights)


@pytest.mark.parametrize("name", BEAM_MODELS)
def test_beam_of_one_is_greedy(name):
    # With length_penalty=0 a beam of one makes greedy's choice at every step (a </s> counts
    # only when it is the best candidate). With lp > 0 it may look past an early </s>.
    src, endings = padded_sources(), set()
    for extra_eos_bias in (-1.0, 0.0):
        model = beam_model(name, extra_eos_bias=extra_eos_bias)
        greedy = greedy_search(model, src, BOS, EOS, max_len_ratio=1.0, max_len_offset=4)
        beams = beam_search(model, src, BOS, EOS, beam_size=1, length_penalty=0.0,
                            max_len_ratio=1.0, max_len_offset=4)  # fmt: skip
        for g, [b] in zip(greedy, beams):
            assert (b.tokens, b.finished) == (g.tokens, g.finished)
            assert abs(b.score - g.score) < 1e-5
            endings.add(g.finished)
    assert endings == {True, False}


@pytest.mark.parametrize("name", BEAM_MODELS)
def test_batched_beam_search_equals_each_sentence_alone(name):
    model, src = beam_model(name), padded_sources()
    settings = dict(beam_size=4, n_best=3, max_len_ratio=1.0, max_len_offset=3)
    batched = beam_search(model, src, BOS, EOS, **settings)
    for i, hyps in enumerate(batched):
        alone = beam_search(model, src[i : i + 1, : int((src[i] != 0).sum())], BOS, EOS, **settings)
        assert len(hyps) == 3
        assert [h.tokens for h in hyps] == [h.tokens for h in alone[0]]
        assert [h.finished for h in hyps] == [h.finished for h in alone[0]]
        for h, a in zip(hyps, alone[0]):
            assert abs(h.score - a.score) < 1e-4


def short_sources():
    src = padded_sources(6)[:, :5]
    src[:, 0] = torch.arange(4, 10)  # no empty source
    return src


@pytest.mark.parametrize("alpha", [0.0, 1.0, 3.0])
@pytest.mark.parametrize("name", BEAM_MODELS)
def test_beam_search_matches_a_textbook_reference(name, alpha):
    # The reference never stops early, so equal results also show that stopping early (and
    # leaving the batch) never changes the answer.
    model, src = RowCounter(beam_model(name)), short_sources()
    beams = beam_search(model, src, BOS, EOS, beam_size=4, n_best=4, length_penalty=alpha,
                        max_len_ratio=0.0, max_len_offset=8)  # fmt: skip
    first, *rows = model.rows  # step 0 decodes one row a sentence, then each has its K beams
    assert first == len(src) and len(rows) <= 7 and rows == sorted(rows, reverse=True)
    for i, hyps in enumerate(beams):
        src_row = src[i : i + 1, : int((src[i] != 0).sum())]
        expected, _ = reference_beam_search(model.model, src_row, 4, 8, alpha)
        assert [(h.tokens, h.finished) for h in hyps] == [(t, f) for t, _, f in expected[:4]]
        for h, (_, score, _) in zip(hyps, expected):
            assert abs(h.score - score) < 1e-4


@pytest.mark.parametrize("name", ["transformer", "rnn-bahdanau"])
def test_finished_sentences_leave_the_batch(name):
    model, src = RowCounter(beam_model(name)), short_sources()
    # n_best=4: each sentence waits for 4 finished hypotheses, so they stop at different steps
    beam_search(model, src, BOS, EOS, beam_size=4, n_best=4, max_len_ratio=0.0, max_len_offset=8)
    first, *rows = model.rows  # step 0: one row a sentence, since all K beams read <s>
    assert first == 6 and rows[0] == 6 * 4 and all(r % 4 == 0 for r in rows)
    assert rows == sorted(rows, reverse=True) and rows[-1] < rows[0]


@pytest.mark.parametrize("name", BEAM_MODELS)
def test_beam_beats_greedy_whenever_it_finishes_greedys_hypothesis(name):
    # "Beam search (K >= 2, lp = 0) is at least as probable as greedy" is NOT a theorem: the beam
    # can drop greedy's prefix for K better-looking ones that later end worse (see the next test).
    # What holds: if greedy's hypothesis is ever among the beam's finished ones, the best returned
    # is at least as probable. The reference tells us which hypotheses were finished.
    model, src = beam_model(name), padded_sources()
    greedy = greedy_search(model, src, BOS, EOS, max_len_ratio=0.0, max_len_offset=6)
    checked = 0
    for k in (2, 3):
        beams = beam_search(model, src, BOS, EOS, beam_size=k, length_penalty=0.0,
                            max_len_ratio=0.0, max_len_offset=6)  # fmt: skip
        for i, (g, [b]) in enumerate(zip(greedy, beams)):
            src_row = src[i : i + 1, : int((src[i] != 0).sum())]
            _, ended = reference_beam_search(model, src_row, k, 6, 0.0)
            if g.finished and tuple(produced(g)) in ended:
                assert b.finished and b.score >= g.score - 1e-5
                checked += 1
    assert checked >= 3


@dataclass
class Prefixes:
    """TableModel's memory and state: the tokens so far, one row per hypothesis."""

    tokens: torch.Tensor

    def index_select(self, index, same_sources=False):  # nothing read from a source
        return Prefixes(self.tokens[index])


class TableModel:
    """A stand-in model whose next-token probabilities are looked up by prefix, for cases built
    by hand. Ids: 0 pad, 1 <s>, 2 </s>, 3 'a', 4 'b'; probabilities in that order."""

    pad_id = 0

    def __init__(self, table, default):
        self.table, self.default = table, default

    def source_lengths(self, src):
        return (src != self.pad_id).sum(1)

    def encode(self, src):
        return Prefixes(src)

    def init_state(self, memory):
        return Prefixes(memory.tokens[:, :0])

    def decode_step(self, memory, state, last_tokens, need_weights=True):
        tokens = torch.cat([state.tokens, last_tokens[:, None]], 1)  # (R, t)
        probs = [self.table.get(tuple(row[1:]), self.default) for row in tokens.tolist()]
        return torch.tensor(probs).log(), Prefixes(tokens), None


def test_beam_search_can_lose_to_greedy():
    # Greedy: 'a' (0.5) then </s> (0.34): p = 0.17. A beam of 2 keeps 'b a' and 'b b' (0.2 each)
    # over 'a </s>' (0.17, third), and those end at 0.4 · 0.2 = 0.08.
    table = {(): [0, 0, 0.1, 0.5, 0.4], (3,): [0, 0, 0.34, 0.33, 0.33], (4,): [0, 0, 0, 0.5, 0.5]}
    model, src = TableModel(table, default=[0, 0, 0.4, 0.3, 0.3]), torch.tensor([[5, 6]])
    [g] = greedy_search(model, src, BOS, EOS, max_len_ratio=0.0, max_len_offset=3)
    [[b]] = beam_search(model, src, BOS, EOS, beam_size=2, length_penalty=0.0,
                        max_len_ratio=0.0, max_len_offset=3)  # fmt: skip
    assert (g.tokens, g.finished) == ([3], True) and abs(g.score - math.log(0.17)) < 1e-5
    assert b.finished and b.tokens in ([4, 3], [4, 4]) and abs(b.score - math.log(0.08)) < 1e-5


def test_stopping_waits_for_what_the_length_penalty_can_still_reward():
    # </s> first (0.5) is greedy's answer. With alpha = 2, 'a a a </s>' (0.3 · 0.98³) scores
    # log(0.282) / lp(4) = -0.56 against log(0.5) / lp(1) = -0.69. After step 1 the kept '</s>'
    # beats 'a' at its shortest finish (log 0.3 / lp(2) = -0.88), but not at the limit
    # (log 0.3 / lp(5) = -0.43): stopping must look at the longest length left.
    table = {(): [0, 0, 0.5, 0.3, 0.2], (3,): [0, 0, 0.01, 0.98, 0.01]}
    table[(3, 3)] = table[(3,)]
    model, src = TableModel(table, default=[0, 0, 0.98, 0.01, 0.01]), torch.tensor([[5, 6]])
    [[b]] = beam_search(model, src, BOS, EOS, beam_size=1, length_penalty=2.0,
                        max_len_ratio=0.0, max_len_offset=5)  # fmt: skip
    assert b.finished and b.tokens == [3, 3, 3]
    assert abs(b.score - math.log(0.3 * 0.98**3)) < 1e-5
    [[b]] = beam_search(model, src, BOS, EOS, beam_size=1, length_penalty=0.0,
                        max_len_ratio=0.0, max_len_offset=5)  # fmt: skip
    assert b.finished and b.tokens == [] and abs(b.score - math.log(0.5)) < 1e-5


@pytest.mark.parametrize("alpha", [0.0, 1.0, 3.0])
@pytest.mark.parametrize("name", ["transformer", "rnn-luong-feeding"])
def test_beam_search_is_exact_when_the_beam_holds_every_candidate(name, alpha):
    # Target vocabulary {pad, <s>, </s>, 3, 4}, at most 4 tokens: 1 + 4 + 16 + 64 = 85 finished
    # sequences. The last step has 4³ · 5 = 320 candidates: a beam that large keeps every prefix
    # and, since a </s> counts only among the K best candidates of its step, every ending too.
    model, limit = beam_model(name, tgt_vocab_size=5), 4
    src = torch.tensor([[7, 12, 5, 9]])
    outputs = [
        list(body) + [EOS]
        for n in range(limit)
        for body in itertools.product([0, 1, 3, 4], repeat=n)
    ]  # fmt: skip
    tgt_in = torch.tensor([[BOS] + y[:-1] + [3] * (limit - len(y)) for y in outputs])  # (85, 4)
    with torch.no_grad():
        log_probs = model(src.expand(len(outputs), -1), tgt_in).logits.log_softmax(-1)
    scores = [float(log_probs[i, torch.arange(len(y)), y].sum()) for i, y in enumerate(outputs)]
    ranked = sorted(
        zip(outputs, scores), key=lambda p: p[1] / gnmt_length_penalty(len(p[0]), alpha),
        reverse=True,
    )  # fmt: skip
    [hyps] = beam_search(model, src, BOS, EOS, beam_size=320, n_best=5, length_penalty=alpha,
                         max_len_ratio=0.0, max_len_offset=limit)  # fmt: skip
    assert [produced(h) for h in hyps] == [y for y, _ in ranked[:5]]
    for h, (_, score) in zip(hyps, ranked):
        assert h.finished and abs(h.score - score) < 1e-4


@pytest.mark.parametrize("name", BEAM_MODELS)
def test_beam_hypotheses_are_what_the_model_says_under_teacher_forcing(name):
    model, src = beam_model(name), padded_sources()
    alpha = 1.0
    beams = beam_search(model, src, BOS, EOS, beam_size=4, n_best=4, length_penalty=alpha,
                        max_len_ratio=1.0, max_len_offset=3)  # fmt: skip
    for i, hyps in enumerate(beams):
        src_len = int((src[i] != 0).sum())
        for hyp in hyps:
            score = teacher_forced(model, src[i : i + 1, :src_len], produced(hyp))
            assert abs(score - hyp.score) < 1e-4
        # Best first: finished ones by score / lp, then unfinished ones (cut at the limit) by score.
        finished = [h for h in hyps if h.finished]
        assert all(h.finished for h in hyps[: len(finished)])
        ranks = [h.score / gnmt_length_penalty(len(h.tokens) + 1, alpha) for h in finished]
        assert ranks == sorted(ranks, reverse=True)
        cut = [h.score for h in hyps if not h.finished]
        assert cut == sorted(cut, reverse=True)
    assert any(len({len(h.tokens) for h in hyps if h.finished}) > 1 for hyps in beams)


@pytest.mark.parametrize("name", BEAM_MODELS)
def test_beam_search_respects_the_limit(name):
    model, src = beam_model(name), padded_sources()
    beams = beam_search(model, src, BOS, EOS, beam_size=3, n_best=2, max_len_ratio=0.0,
                        max_len_offset=3)  # fmt: skip
    for hyps in beams:
        assert len(hyps) == 2
        assert all(len(produced(hyp)) <= 3 for hyp in hyps)


def test_beam_search_checks_its_arguments():
    model, src = beam_model("rnn-none"), padded_sources()
    with pytest.raises(ValueError, match="n_best"):
        beam_search(model, src, BOS, EOS, beam_size=2, n_best=3)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, BOS, EOS, beam_size=0, n_best=0)


def test_gnmt_length_penalty():
    assert gnmt_length_penalty(1, 1.0) == 1.0
    assert gnmt_length_penalty(7, 1.0) == 2.0
    assert gnmt_length_penalty(7, 0.5) == math.sqrt(2.0)
    assert gnmt_length_penalty(30, 0.0) == 1.0


@pytest.mark.parametrize("k, v", [(4, 50), (5, 7), (3, 2), (1, 9)])
def test_extend_takes_the_2k_best_of_every_beam_extension(k, v):
    # extend() picks each beam's best tokens first; the answer is the whole sum's 2K best,
    # in float64 so that no two finite candidates tie. Dead beams (-inf) stand in for step 0.
    generator = torch.Generator().manual_seed(k * 100 + v)
    b = 6
    scores = -torch.rand(b, k, generator=generator, dtype=torch.float64) * 5
    scores[::2, 1:] = -torch.inf
    log_probs = torch.randn(b * k, v, generator=generator, dtype=torch.float64).log_softmax(-1)
    rows = torch.arange(b).unsqueeze(1) * k + 100  # where each sentence's beams sit
    for given in (None, rows):
        got = extend(scores, log_probs, step=3, rows=given)
        total = (scores.reshape(-1, 1) + log_probs).view(b, k * v)
        best, flat = total.topk(min(2 * k, k * v), dim=1)
        first = (torch.arange(b).unsqueeze(1) * k) if given is None else given
        finite = best.isfinite()
        assert torch.equal(got.score.isfinite(), finite)
        assert torch.equal(got.score[finite], best[finite])
        assert torch.equal(got.row[finite], (first + flat // v)[finite])
        assert torch.equal(got.token[finite], (flat % v)[finite])
        assert bool((got.step == 3).all())
