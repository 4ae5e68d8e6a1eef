"""Luong et al. 2015's local attention (§3.2) against a float64 reference written from the
paper's equations, one query and one source position at a time."""

from __future__ import annotations

import math

import pytest
import torch

from heedful.config import ConfigError, DecoderConfig, ModelConfig
from heedful.layers.attention import padding_mask
from heedful.layers.rnn_attention import LuongLocalAttention, local_weights
from heedful.models.build import build_model
from heedful.search.beam import beam_search
from heedful.search.decoding import greedy_search

BOS, EOS = 1, 2


@torch.no_grad()
def reference(attn: LuongLocalAttention, query, keys, values, lengths, positions):
    """Eq. 7-10 by hand, in float64: p_t, the window [p_t - D, p_t + D] within the sentence,
    a softmax of h_tᵀ W_a h̄_s over it, the Gaussian of σ = D / 2 for local-p; c_t = Σ a h̄."""
    w_a = attn.w_a.weight.double()
    b_size, t_size, _ = query.shape
    weights = torch.zeros(b_size, t_size, keys.size(1), dtype=torch.float64)
    for b in range(b_size):
        length = lengths[b]
        for t in range(t_size):
            h_t = query[b, t].double()
            if attn.local == "m":
                p_t = float(min(positions[b][t], length - 1))
            else:
                hidden = torch.tanh(attn.w_p.weight.double() @ h_t)
                p_t = length / (1 + math.exp(-float(attn.v_p.weight.double()[0] @ hidden)))
            window = [s for s in range(length) if abs(s - p_t) <= attn.window]
            scores = {s: float(h_t @ (w_a @ keys[b, s].double())) for s in window}
            top = max(scores.values())
            total = sum(math.exp(v - top) for v in scores.values())
            sigma = attn.window / 2
            for s in window:
                align = math.exp(scores[s] - top) / total
                gauss = math.exp(-((s - p_t) ** 2) / (2 * sigma**2)) if attn.local == "p" else 1
                weights[b, t, s] = align * gauss
    return weights @ values.double(), weights


@pytest.mark.parametrize("kind", ["m", "p"])
@pytest.mark.parametrize("window", [1, 2, 5])
def test_local_attention_matches_the_float64_reference(kind, window):
    torch.manual_seed(window)
    attn = LuongLocalAttention(kind, 6, 6, window).double()
    query, keys = torch.randn(3, 9, 6).double(), torch.randn(3, 11, 6).double()
    values = torch.randn(3, 11, 4).double()
    tokens = torch.ones(3, 11, dtype=torch.long)
    tokens[1, 7:], tokens[2, 3:] = 0, 0  # lengths 11, 7, 3: padding never attended
    lengths = [11, 7, 3]
    positions = torch.arange(9).expand(3, 9) + torch.tensor([[0], [2], [5]])  # later steps
    context, weights = attn(query, keys, values, padding_mask(tokens, 0), positions)
    want_context, want_weights = reference(attn, query, keys, values, lengths, positions.tolist())
    torch.testing.assert_close(weights, want_weights, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(context, want_context, rtol=1e-10, atol=1e-12)


def test_local_m_rows_sum_to_one_and_local_p_rows_to_at_most_one():
    torch.manual_seed(0)
    query, keys, values = torch.randn(2, 5, 8), torch.randn(2, 12, 8), torch.randn(2, 12, 8)
    _, m = LuongLocalAttention("m", 8, 8, 3)(query, keys, values)
    _, p = LuongLocalAttention("p", 8, 8, 3)(query, keys, values)
    torch.testing.assert_close(m.sum(-1), torch.ones(2, 5))
    assert bool((p.sum(-1) <= 1 + 1e-6).all()) and bool((p >= 0).all())
    assert bool((m[:, 0, 4:] == 0).all())  # step 0 of local-m sees s = 0 .. D only


def test_the_gaussian_by_hand():
    """One flat score row: local-p's weights are the window's uniform share times the
    Gaussian exp(-(s - p_t)² / (2 (D/2)²))."""
    scores, centers = torch.zeros(1, 7, dtype=torch.float64), torch.tensor([3.0]).double()
    weights = local_weights(scores, centers, 2, None, gaussian=True)[0]
    gauss = [math.exp(-((s - 3) ** 2) / 2) for s in range(7)]  # σ = 1
    want = [g / 5 if abs(s - 3) <= 2 else 0.0 for s, g in enumerate(gauss)]
    torch.testing.assert_close(weights, torch.tensor(want, dtype=torch.float64))


@pytest.mark.parametrize("attention", ["luong-local-m", "luong-local-p"])
@pytest.mark.parametrize("input_feeding", [False, True])
def test_search_step_by_step_equals_teacher_forcing(attention, input_feeding):
    """decode_step must know which step it is at (local-m centres on it): greedy and beam
    choices and scores are what one teacher-forced pass over the output says."""
    torch.manual_seed(1)
    config = ModelConfig(
        arch="rnn",
        d_model=16,
        hidden_size=32,
        dropout=0.0,
        decoder=DecoderConfig(attention=attention, local_window=2, input_feeding=input_feeding),
    )
    model = build_model(config, 20, 15).eval()
    src = torch.randint(4, 20, (3, 9))
    src[1, 5:] = 0
    hyps = greedy_search(model, src, BOS, EOS, max_len_ratio=0.0, max_len_offset=8)
    beams = beam_search(model, src, BOS, EOS, 1, 1, 0.0, 0.0, 8)
    for i, (hyp, [beam]) in enumerate(zip(hyps, beams)):
        source = src[i : i + 1, : int((src[i] != 0).sum())]
        with torch.no_grad():
            out = model(source, torch.tensor([hyp.decoder_input(BOS, EOS)]), need_weights=True)
        produced = hyp.produced(EOS)
        assert out.logits.argmax(-1)[0].tolist() == produced == beam.produced(EOS)
        log_probs = out.logits.log_softmax(-1)[0, range(len(produced)), produced]
        assert hyp.score == pytest.approx(float(log_probs.sum()), abs=1e-4)
        assert out.attention.centers.shape == (1, len(produced))


def test_the_window_is_a_config_key_of_rnn_models():
    local = DecoderConfig(attention="luong-local-p", local_window=3)
    assert ModelConfig(arch="rnn", decoder=local).decoder.local_window == 3
    with pytest.raises(ConfigError, match="model.decoder.local_window"):
        ModelConfig(arch="rnn", decoder=DecoderConfig(attention="luong-local-p", local_window=0))
    with pytest.raises(ValueError, match="'m' or 'p'"):
        LuongLocalAttention("q", 4, 4)


def test_a_window_without_local_attention_is_refused():
    """Flat, as an earlier heedful wrote it, or nested; a model directory lists the window
    of local attention only."""
    from heedful.config import read_model

    with pytest.raises(ConfigError, match="model.local_window: only luong-local"):
        read_model({"arch": "rnn", "local_window": 3})
    with pytest.raises(ConfigError, match="model.decoder.local_window: only luong-local"):
        read_model({"arch": "rnn", "decoder": {"local_window": 3}})
    read_model({"arch": "rnn", "attention": "luong-local-m", "local_window": 3})
    assert "local_window" not in ModelConfig(arch="rnn").used()["decoder"]
    local = ModelConfig(arch="rnn", decoder=DecoderConfig(attention="luong-local-p"))
    assert local.used()["decoder"]["local_window"] == 10
