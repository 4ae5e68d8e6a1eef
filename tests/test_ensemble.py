"""Ensembles: the members' log-probabilities averaged at every step of every search."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from heedful.data.tokenizers import BOS_ID, EOS_ID
from heedful.inference.translator import Translator, VocabularyMismatch, ensemble, load_ensemble
from heedful.models.ensemble import Ensemble, mean_log_probs
from heedful.search.beam import beam_search
from heedful.search.decoding import greedy_search

MODELS = Path(__file__).resolve().parent / "golden" / "models"
TEXTS = ["abcdef", "hgfe", "abc", "aabbcc"]


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_an_ensemble_of_one_model_is_the_model(arch):
    single = Translator.load(MODELS / arch)
    alone = load_ensemble([MODELS / arch])
    for beams, n_best in [(1, 1), (3, 2)]:
        a = single.translate(TEXTS, num_beams=beams, n_best=n_best, need_weights=True)
        b = alone.translate(TEXTS, num_beams=beams, n_best=n_best, need_weights=True)
        for x, y in zip(a, b):
            assert x.text == y.text and x.tokens == y.tokens
            assert x.score == pytest.approx(y.score, abs=1e-5)
            assert torch.allclose(x.attention, y.attention)
            assert [t.text for t in x.alternatives or []] == [t.text for t in y.alternatives or []]


def test_an_ensemble_averages_the_members_log_probabilities_step_by_step():
    """RNN + Transformer (allowed: their vocabularies are equal): greedy's choices are the
    argmax of the renormalized mean of the two teacher-forced log-probabilities."""
    rnn, transformer = (Translator.load(MODELS / a) for a in ("rnn", "transformer"))
    both = ensemble([rnn, transformer])
    src = torch.tensor([rnn.src_tokenizer.encode("abcdefg")])
    [hyp] = greedy_search(both.model, src, BOS_ID, EOS_ID, 0.0, 9)
    tgt_in = torch.tensor([hyp.decoder_input(BOS_ID, EOS_ID)])
    with torch.no_grad():
        members = [m(src, tgt_in).logits.log_softmax(-1) for m in (rnn.model, transformer.model)]
    mean = (members[0] + members[1]).div(2).log_softmax(-1)[0]  # (T, V)
    produced = hyp.produced(EOS_ID)
    assert mean.argmax(-1).tolist() == produced
    assert hyp.score == pytest.approx(float(mean[range(len(produced)), produced].sum()), abs=1e-4)
    [[beam]] = beam_search(both.model, src, BOS_ID, EOS_ID, 1, 1, 0.0, 0.0, 9)
    assert beam.tokens == hyp.tokens


def test_mean_log_probs_is_a_distribution():
    parts = [torch.randn(3, 7).log_softmax(-1) for _ in range(3)]
    assert torch.allclose(mean_log_probs(parts).exp().sum(-1), torch.ones(3))
    assert torch.allclose(mean_log_probs(parts[:1]), parts[0], atol=1e-6)


def test_each_member_attention_is_kept():
    both = ensemble([Translator.load(MODELS / a) for a in ("rnn", "transformer")])
    src, tgt_in = torch.tensor([[5, 6, 7]]), torch.tensor([[BOS_ID, 7, 6]])
    with torch.no_grad():
        outputs = both.model.member_outputs(src, tgt_in, need_weights=True)
    assert [o.attention.cross.shape[1:3] for o in outputs] == [(1, 1), (2, 2)]  # L, H each


def test_members_of_different_vocabularies_are_refused(tmp_path):
    other = tmp_path / "other"
    shutil.copytree(MODELS / "rnn", other)
    vocab = json.loads((other / "tokenizer.tgt").read_text())
    vocab["vocab"] = vocab["vocab"][::-1]  # the same size, other ids
    (other / "tokenizer.tgt").write_text(json.dumps(vocab))
    with pytest.raises(VocabularyMismatch, match="model 2 .* different tgt vocabulary .*id 4"):
        load_ensemble([MODELS / "rnn", other])


def test_an_empty_ensemble_is_refused():
    with pytest.raises(ValueError, match="at least one model"):
        Ensemble([])
