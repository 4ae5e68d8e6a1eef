"""Diverse beam search (search/diverse.py; Vijayakumar et al. 2018): against a slow reference
written from the paper, its two limits (one group is beam search; no penalty is independent
beam searches), n-best that part at their first token, and the method reached from Python,
the CLI and HTTP, and refused by CTranslate2 by name."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from server.helpers import client, error, ok
from test_decoding import BEAM_MODELS, BOS, EOS, beam_model, padded_sources, short_sources

from heedful.cli import main
from heedful.config import ConfigError
from heedful.inference.engine import Unsupported
from heedful.inference.runtime import load_translator
from heedful.inference.translator import Translator
from heedful.search.beam import beam_search, gnmt_length_penalty
from heedful.search.diverse import diverse_beam_search
from heedful.visualize.trace import build_trace

MODEL = Path(__file__).resolve().parent / "golden" / "models" / "transformer"
LIMIT = dict(max_len_ratio=1.0, max_len_offset=4)


def search(model, src, k, groups, penalty, n_best, alpha=1.0, **lengths):
    return diverse_beam_search(model, src, BOS, EOS, k, groups, penalty, n_best, alpha,
                               **(lengths or LIMIT))  # fmt: skip


def outputs(hyps):
    return [(h.tokens, h.finished) for h in hyps]


@pytest.mark.parametrize("name", BEAM_MODELS)
def test_one_group_is_beam_search(name):
    """G = 1: the same hypotheses and the same scores, whatever the penalty (no group comes
    before the only one)."""
    model, src = beam_model(name), padded_sources()
    for penalty, alpha in [(0.0, 1.0), (5.0, 0.0), (100.0, 3.0)]:
        plain = beam_search(model, src, BOS, EOS, 4, 4, alpha, **LIMIT)
        assert search(model, src, 4, 1, penalty, 4, alpha) == plain


@pytest.mark.parametrize("groups", [2, 3])
@pytest.mark.parametrize("name", BEAM_MODELS)
def test_no_penalty_makes_the_groups_independent_beam_searches(name, groups):
    """λ = 0: each group is beam search of W = K / G beams, so the answer is beam search
    of W's, each hypothesis G times (one per group)."""
    model, src = beam_model(name), padded_sources()
    diverse = search(model, src, 2 * groups, groups, 0.0, 2 * groups)
    plain = beam_search(model, src, BOS, EOS, 2, 2, 1.0, **LIMIT)
    for d, p in zip(diverse, plain, strict=True):
        repeated = [h for h in p for _ in range(groups)]
        assert outputs(d) == outputs(repeated)
        assert max(abs(a.score - b.score) for a, b in zip(d, repeated, strict=True)) < 1e-4


@pytest.mark.parametrize("name", BEAM_MODELS)
def test_as_many_groups_as_beams_and_a_large_penalty_part_the_n_best_at_their_first_token(name):
    """G = K, λ large: group g avoids every token the groups before it chose at step 0 (15
    target tokens allow 5 groups their 2 choices each), and answers with one hypothesis, so
    no two of the n-best start alike; beam search's do."""
    model, src = beam_model(name), padded_sources()
    firsts = [[h.produced(EOS)[0] for h in hyps] for hyps in search(model, src, 5, 5, 100.0, 5)]
    assert all(len(set(tokens)) == len(tokens) == 5 for tokens in firsts), firsts
    plain = beam_search(model, src, BOS, EOS, 5, 5, 1.0, **LIMIT)
    assert any(len({h.produced(EOS)[0] for h in hyps}) < 5 for hyps in plain)


# ---------------------------------------------------------------------------------------------
# Against the paper, one sentence and one group at a time
# ---------------------------------------------------------------------------------------------


def next_log_probs(model, src_row, prefixes) -> list[list[float]]:
    """log P(· | prefix) of each prefix, by teacher forcing: no state, no cache, no batch
    but the prefixes'."""
    tgt_in = torch.tensor([[BOS, *tokens] for tokens in prefixes])
    with torch.no_grad():
        logits = model(src_row.expand(len(prefixes), -1), tgt_in).logits[:, -1]
    return logits.double().log_softmax(-1).tolist()


def gaps(ranked) -> list[float]:
    """How far apart each two neighbours of a ranking (key, tokens, score) best first are,
    where they are different sequences (two groups may hold the same one: either is it)."""
    return [a[0] - b[0] for a, b in zip(ranked, ranked[1:]) if a[1] != b[1]]


def reference(model, src_row, k, groups, penalty, limit, alpha, n_best):
    """Diverse beam search for one sentence as the paper states it, on Python lists, to the limit
    (no early stop). At each step the groups choose in turn: group g's 2W best candidates by
    log P - λ · (times groups before it chose the token at this step); a </s> among its W best
    ends a hypothesis, the W best others go on; what it chose counts for the groups after it.
    Each group answers with its W best finished hypotheses by score / lp, then its alive ones
    by score; the n-best are the answers, finished first.

    Returns the n-best [(tokens, score, finished)] and the smallest gap between two numbers
    whose order decided something (a candidate's rank, a hypothesis's place): below
    float32's rounding, either order is right."""
    w, margins = k // groups, [math.inf]
    alive = [[((), 0.0)] for _ in range(groups)]  # per group: (tokens, log P)
    ended = [[] for _ in range(groups)]
    for _ in range(limit):
        chosen = Counter()
        for g in range(groups):
            rows = next_log_probs(model, src_row, [t for t, _ in alive[g]])
            candidates = sorted(
                ((s + lp - penalty * chosen[v], t + (v,), s + lp)
                 for (t, s), row in zip(alive[g], rows) for v, lp in enumerate(row)),
                reverse=True,
            )[: 2 * w + 1]  # fmt: skip
            margins += gaps(candidates)
            top = candidates[: 2 * w]
            ends = [(t, s) for r, (_, t, s) in enumerate(top) if t[-1] == EOS and r < w]
            alive[g] = [(t, s) for _, t, s in top if t[-1] != EOS][:w]
            ended[g] += ends
            chosen.update(t[-1] for t, _ in ends + alive[g])
    finished, cut = [], []
    for g in range(groups):  # each group's answers: its W best finished, then alive ones
        ranked = sorted(((s / gnmt_length_penalty(len(t), alpha), t, s) for t, s in ended[g]),
                        reverse=True)[: w + 1]  # fmt: skip
        margins += gaps(ranked)
        finished += ranked[:w]
        cut += sorted(((s, t, s) for t, s in alive[g]), reverse=True)[: w - len(ranked[:w])]
    finished, cut = sorted(finished, reverse=True), sorted(cut, reverse=True)
    margins += gaps(finished[: n_best + 1]) + gaps(cut[: n_best + 1])
    n_best_list = [(list(t[:-1]), s, True) for _, t, s in finished]
    n_best_list += [(list(t), s, False) for _, t, s in cut]
    return n_best_list[:n_best], min(margins)


SEARCHES = [  # (K, G, λ, length penalty)
    (4, 2, 0.5, 1.0),
    (3, 3, 2.0, 0.0),
    (6, 3, 1.0, 3.0),
]


@pytest.mark.parametrize(("k", "groups", "penalty", "alpha"), SEARCHES)
@pytest.mark.parametrize("name", BEAM_MODELS)
def test_diverse_beam_search_matches_the_papers_algorithm_where_its_choices_are_clear(
    name, k, groups, penalty, alpha
):
    """The reference never stops early and shares nothing with the batched search (no beam.py
    code, no cache, no reordering), so equal answers also show that stopping and leaving the
    batch change nothing. A sentence is compared where no choice was within 1e-5 nats: float32
    holds these log-probabilities (above -20) to 2e-6, and the tiny random models do make
    choices within 1e-4 (their RNNs repeat themselves: 'a a a' against 'a a </s>')."""
    model, src, limit = beam_model(name), short_sources(), 7
    found = search(
        model, src, k, groups, penalty, k, alpha, max_len_ratio=0.0, max_len_offset=limit
    )
    compared = 0
    for i, hyps in enumerate(found):
        src_row = src[i : i + 1, : int((src[i] != 0).sum())]
        expected, margin = reference(model, src_row, k, groups, penalty, limit, alpha, k)
        if margin < 1e-5:
            continue
        compared += 1
        assert outputs(hyps) == [(t, f) for t, _, f in expected]
        assert max(abs(h.score - s) for h, (_, s, _) in zip(hyps, expected)) < 1e-4
    assert compared >= len(found) - 1, f"only {compared} of {len(found)} sentences were clear"


# ---------------------------------------------------------------------------------------------
# Through Python, the CLI and HTTP
# ---------------------------------------------------------------------------------------------

DIVERSE = dict(num_beams=4, n_best=4, num_beam_groups=4, diversity_penalty=50.0)


def texts(translation) -> list[str]:
    return [translation.text] + [a.text for a in translation.alternatives or []]


def test_the_translator_searches_in_groups_and_the_trace_says_so():
    translator = Translator.load(MODEL)
    [diverse] = translator.translate(["abcdefg"], **DIVERSE)
    [plain] = translator.translate(["abcdefg"], num_beams=4, n_best=4)
    src = translator.source.batch(["abcdefg"], translator.device)
    [hyps] = diverse_beam_search(translator.model, src, BOS, EOS, 4, 4, 50.0, 4, 1.0, 1.5, 4)
    assert texts(diverse) == [translator.tgt_tokenizer.decode(h.tokens) for h in hyps]
    assert len({t[:1] for t in texts(diverse)}) == 4 > len({t[:1] for t in texts(plain)})
    [prefixed] = translator.translate(["abcdefg"], prefixes=["ge"], **DIVERSE)
    assert all(t.startswith("ge") for t in texts(prefixed))
    trace = build_trace(translator, "abcdefg", settings=translator.generation.but(**DIVERSE))
    assert trace.search == {"num_beams": 4, "length_penalty": 1.0, "num_beam_groups": 4,
                            "diversity_penalty": 50.0}  # fmt: skip
    assert [h.text for h in trace.hypotheses] == texts(diverse)
    with pytest.raises(ConfigError, match="num_beam_groups must divide generation.num_beams"):
        translator.translate(["abc"], num_beams=4, num_beam_groups=3)


def test_the_cli_flags_search_in_groups():
    translator = Translator.load(MODEL)
    expected = ["\t".join(texts(t)) for t in translator.translate(["abcdefg", "bad"], **DIVERSE)]
    flags = ["--beam", "4", "--n-best", "4", "--num-beam-groups", "4", "--diversity-penalty", "50"]
    result = CliRunner().invoke(main, ["translate", str(MODEL), *flags], input="abcdefg\nbad\n")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == expected
    flags = ["--beam", "4", "--num-beam-groups", "3"]
    result = CliRunner().invoke(main, ["translate", str(MODEL), *flags], input="abc\n")
    assert result.exit_code == 1 and "num_beam_groups must divide" in result.output


def test_the_http_fields_make_the_alternatives_diverse():
    translator = Translator.load(MODEL)
    [expected] = translator.translate(["abcdefg"], **DIVERSE)
    body = {"q": "abcdefg", "source": "src", "target": "tgt", "alternatives": 3, "num_beams": 4}
    with client(MODEL) as app:
        plain = ok(app.post("/translate", json=body))
        diverse = ok(app.post("/translate", json={**body, "num_beam_groups": 4,
                                                   "diversity_penalty": 50.0}))  # fmt: skip
        error(app.post("/translate", json={**body, "num_beam_groups": 3}), 400,
              "num_beam_groups must divide generation.num_beams")  # fmt: skip
        error(app.post("/translate", json={**body, "diversity_penalty": -1}), 400,
              "diversity_penalty must be from 0.0 and at most 100.0")  # fmt: skip
    assert [diverse["translatedText"], *diverse["alternatives"]] == texts(expected)
    firsts = [{t[:1] for t in [b["translatedText"], *b["alternatives"]]} for b in (plain, diverse)]
    assert len(firsts[0]) < len(firsts[1]) == 4


def test_ctranslate2_refuses_groups_by_name_through_python_cli_and_http():
    """CTranslate2's capabilities list the settings of its beam search (engine.SEARCH): the
    groups are not among them, so the one check refuses them, with no line of their own."""
    ct2 = load_translator(MODEL, engine="ctranslate2")
    refused = "sample=True and num_beam_groups and prefixes need the torch engine, not ct"
    with pytest.raises(Unsupported, match=refused):  # what it lacks, named together
        ct2.translate(["abc"], num_beams=4, num_beam_groups=2)
    command = ["translate", str(MODEL), "--engine", "ctranslate2", "--beam", "4"]
    result = CliRunner().invoke(main, [*command, "--num-beam-groups", "2"], input="abc\n")
    assert result.exit_code == 2, result.output
    assert "--sample and --num-beam-groups and --prefix need the torch engine" in result.output
    with client(MODEL, engine="ctranslate2") as app:
        body = {"q": "abc", "source": "src", "target": "tgt", "num_beam_groups": 2}
        error(app.post("/translate", json=body), 400, "sample and num_beam_groups and prefix need")
