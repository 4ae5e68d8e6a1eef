"""Greedy search: what it returns, and that it is what the model would say step by step."""

import torch

from heedful.config import ModelConfig
from heedful.decoding import greedy_search
from heedful.models.build import build_model

BOS, EOS = 1, 2


def models():
    torch.manual_seed(0)
    yield build_model(ModelConfig(d_model=32, num_heads=4, d_ff=64, dropout=0.0), 20, 15).eval()
    yield build_model(
        ModelConfig(arch="rnn", d_model=16, hidden_size=32, dropout=0.0), 20, 15
    ).eval()


def test_greedy_shapes_weights_and_consistency_with_teacher_forcing():
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
            layers = 2 if hasattr(model, "decoder_layers") else 1
            heads = 4 if layers == 2 else 1
            assert hyp.cross_attention.shape == (steps, layers, heads, src_len)
            torch.testing.assert_close(
                hyp.cross_attention.sum(-1), torch.ones(steps, layers, heads)
            )
            # Feeding the produced output back with teacher forcing reproduces every choice.
            produced = hyp.tokens + ([EOS] if hyp.finished else [])
            tgt_in = torch.tensor([[BOS] + produced[:-1]])
            with torch.no_grad():
                out = model(src[i : i + 1, :src_len], tgt_in, need_weights=True)
            assert out.logits.argmax(-1)[0].tolist() == produced
            torch.testing.assert_close(
                out.attention.cross[0].permute(2, 0, 1, 3),
                hyp.cross_attention,
                atol=1e-5,
                rtol=1e-4,
            )
            score = out.logits.log_softmax(-1)[0, torch.arange(steps), produced].sum()
            assert abs(float(score) - hyp.score) < 1e-4


def test_greedy_stops_at_the_length_limit_and_without_weights():
    src = torch.randint(4, 20, (2, 5))
    for model in models():
        hyps = greedy_search(
            model, src, BOS, EOS, max_len_ratio=0.0, max_len_offset=3, need_weights=False
        )
        for hyp in hyps:
            assert hyp.cross_attention is None
            assert len(hyp.tokens) + hyp.finished <= 3
