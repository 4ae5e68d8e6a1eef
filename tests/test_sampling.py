"""Sampling draws from the model's softmax as temperature, top-k and top-p reshape it."""

import math

import pytest
import torch

from heedful.config import ConfigError, GenerationConfig, ModelConfig
from heedful.models.build import build_model
from heedful.search.decoding import sample_search
from heedful.search.sampling import Sampling, check_sampling, sampling_log_probs

BOS, EOS = 1, 2
VOCAB = 12


def tiny_model(arch: str = "transformer"):
    torch.manual_seed(0)
    config = ModelConfig(arch=arch, d_model=16, num_heads=2, d_ff=32, hidden_size=16, dropout=0.0)
    return build_model(config, 10, VOCAB).eval()


def first_step_log_probs(model, src: torch.Tensor) -> torch.Tensor:
    """The model's log-probabilities of the first output token (V,), by teacher forcing."""
    with torch.no_grad():
        return model(src, torch.tensor([[BOS]])).logits[0, 0].log_softmax(-1).double()


def chi_square_limit(df: int, z: float = 3.09) -> float:
    """The chi-square quantile at 1 - 0.001 (z = 3.09), by Wilson and Hilferty (1931)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def first_tokens(model, src, sampling: Sampling, n: int) -> torch.Tensor:
    """How often each token was drawn first, in n one-token samples (V,)."""
    [hyps] = sample_search(model, src, BOS, EOS, sampling, n, max_len_ratio=0.0, max_len_offset=1)
    drawn = torch.tensor([h.produced(EOS)[0] for h in hyps])
    return torch.bincount(drawn, minlength=VOCAB).double()


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
@pytest.mark.parametrize(
    "sampling",
    [Sampling(seed=1), Sampling(temperature=0.5, seed=2), Sampling(temperature=2.0, seed=3)],
    ids=["t1", "t0.5", "t2"],
)
def test_samples_follow_the_softmax(arch, sampling):
    """Pearson's chi-square between the counts and softmax(log p / τ), fixed seed."""
    model, src, n = tiny_model(arch), torch.tensor([[4, 5, 6, 7]]), 4000
    counts = first_tokens(model, src, sampling, n)
    expected = (first_step_log_probs(model, src) / sampling.temperature).softmax(-1) * n
    keep = expected > 5  # the test's usual rule: pool the rare cells
    observed = torch.cat([counts[keep], counts[~keep].sum(0, keepdim=True)])
    wanted = torch.cat([expected[keep], expected[~keep].sum(0, keepdim=True)])
    statistic = float(((observed - wanted) ** 2 / wanted.clamp(min=1e-9)).sum())
    assert statistic < chi_square_limit(len(observed) - 1)


def test_top_k_and_top_p_draw_only_from_what_they_keep():
    model, src = tiny_model(), torch.tensor([[4, 5, 6, 7]])
    probs = first_step_log_probs(model, src).exp()
    counts = first_tokens(model, src, Sampling(top_k=3, seed=0), 500)
    assert set(counts.nonzero().view(-1).tolist()) <= set(probs.topk(3).indices.tolist())
    ordered = probs.sort(descending=True)
    nucleus = int((ordered.values.cumsum(0) < 0.5).sum()) + 1  # fewest tokens holding 0.5
    counts = first_tokens(model, src, Sampling(top_p=0.5, seed=0), 500)
    assert set(counts.nonzero().view(-1).tolist()) <= set(ordered.indices[:nucleus].tolist())


def test_the_reshaped_distribution_by_hand():
    log_probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    same = sampling_log_probs(log_probs, Sampling())
    assert torch.allclose(same, log_probs, atol=1e-6)
    top2 = sampling_log_probs(log_probs, Sampling(top_k=2)).exp()
    assert torch.allclose(top2, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    nucleus = sampling_log_probs(log_probs, Sampling(top_p=0.8)).exp()  # 0.5 + 0.3 reach 0.8
    assert torch.allclose(nucleus, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    assert sampling_log_probs(log_probs, Sampling(top_p=0.1)).exp()[0, 0] == 1.0  # best stays
    sharp = sampling_log_probs(log_probs, Sampling(temperature=0.5)).exp()
    squared = torch.tensor([[0.25, 0.09, 0.0225, 0.0025]])
    assert torch.allclose(sharp, squared / squared.sum())


def test_a_seed_repeats_the_samples_and_another_seed_does_not():
    model, src = tiny_model(), torch.tensor([[4, 5, 6, 7], [8, 9, 4, 0]])

    def tokens(seed):
        found = sample_search(model, src, BOS, EOS, Sampling(temperature=3.0, seed=seed), 4)
        return [[h.tokens for h in hyps] for hyps in found]

    assert tokens(7) == tokens(7)
    assert tokens(7) != tokens(8)


def test_sample_scores_are_the_model_log_probabilities():
    model, src = tiny_model("rnn"), torch.tensor([[4, 5, 6, 7]])
    [hyps] = sample_search(model, src, BOS, EOS, Sampling(top_k=4, seed=5), 3)
    for hyp in hyps:
        tgt_in = torch.tensor([hyp.decoder_input(BOS, EOS)])
        with torch.no_grad():
            log_probs = model(src, tgt_in).logits[0].log_softmax(-1)
        produced = hyp.produced(EOS)
        score = log_probs[torch.arange(len(produced)), produced].sum()
        assert abs(float(score) - hyp.score) < 1e-4


# Bad input: each setting that leaves nothing to draw from is refused, named
BAD_SETTINGS = [
    ({"temperature": 0.0}, "temperature"),
    ({"temperature": -1.0}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_p": -0.1}, "top_p"),
    ({"top_k": 0}, "top_k"),
    ({"top_k": -3}, "top_k"),
]


@pytest.mark.parametrize(("settings", "name"), BAD_SETTINGS, ids=lambda x: str(x))
def test_bad_sampling_settings_are_named_errors(settings, name):
    with pytest.raises(ValueError, match=name):
        Sampling(**settings)
    with pytest.raises(ConfigError, match=f"generation.{name}"):
        GenerationConfig(**settings)


def test_good_edges_pass():
    check_sampling(1e-3, 1, 1.0)
    GenerationConfig(temperature=0.01, top_p=1.0, top_k=1, seed=0, num_samples=3, sample=True)
    with pytest.raises(ConfigError, match="generation.num_samples"):
        GenerationConfig(num_samples=0)


@pytest.mark.parametrize("temperature", [5e-324, 1e-30, 100.0])
def test_extreme_temperatures_still_give_a_distribution(temperature):
    """The server's fuzzer sent 5e-324: log p / τ overflowed every entry to -inf (then NaN)."""
    log_probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    probs = sampling_log_probs(log_probs, Sampling(temperature=temperature)).exp()
    assert torch.isfinite(probs).all() and float(probs.sum()) == pytest.approx(1.0)
    if temperature < 1:
        assert probs[0].tolist() == [1.0, 0.0, 0.0, 0.0]


def test_a_forced_row_and_a_tiny_top_p_keep_the_one_token():
    """The fuzzer's other find: one finite entry (a forced prefix step) and p = 6e-67, which
    float32 rounds to 0, cut every token."""
    log_probs = torch.full((1, 6), -torch.inf)
    log_probs[0, 3] = -12.0
    for sampling in [Sampling(top_p=5.9e-67), Sampling(temperature=42.5, top_k=2, top_p=0.5)]:
        assert sampling_log_probs(log_probs, sampling).exp()[0].tolist() == [0, 0, 0, 1, 0, 0]
