"""Sampling: draw each next token from the model's distribution instead of taking its best.

The distribution is the model's softmax reshaped by three settings, applied in this order (as
Hugging Face's and fairseq's samplers do):

    temperature τ:  p(y) ∝ exp(log p(y) / τ)        τ < 1 sharpens, τ > 1 flattens (Ackley 1985)
    top-k:          keep the k most probable tokens (Fan et al. 2018, §5.4)
    top-p:          keep the smallest set whose probability reaches p (Holtzman et al. 2020, §3.1)

then renormalized. `sampling_log_probs` is that reshaping on its own, so that a trace can show the
distribution a token was drawn from (it recomputes it from the replayed log-probabilities).

Shapes: R decode rows, V target vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sampling:
    """The sampling settings: SearchSettings' sampling fields (Sampling.of), as the sampler
    reads them; SearchSettings range-checks the same fields."""

    temperature: float = 1.0
    top_k: int | None = None  # None: every token stays a candidate
    top_p: float = 1.0
    seed: int | None = None  # None: torch's global random state

    def __post_init__(self) -> None:
        check_sampling(self.temperature, self.top_k, self.top_p)

    @classmethod
    def of(cls, settings) -> Sampling:
        """The sampling fields of a SearchSettings, the type the sampler reads."""
        return cls(settings.temperature, settings.top_k, settings.top_p, settings.seed)

    def generator(self, device: torch.device) -> torch.Generator | None:
        """A generator seeded with `seed` (same seed, same inputs: same samples), or None."""
        if self.seed is None:
            return None
        generator = torch.Generator(device=device)
        generator.manual_seed(self.seed)
        return generator


def check_sampling(temperature: float, top_k: int | None, top_p: float) -> None:
    """ValueError naming the setting, for values that leave no distribution to sample from."""
    if not temperature > 0.0 or temperature == float("inf"):  # NaN fails the first test too
        raise ValueError(
            f"temperature must be above 0, got {temperature}: dividing the log-probabilities "
            "by 0 or less leaves no distribution (use greedy search for the most probable token)"
        )
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1 (or unset), got {top_k}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def sampling_log_probs(log_probs: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """log_probs (R, V) of the model -> (R, V) log-probabilities sampled from; -inf where a
    token was cut by top-k or top-p."""
    # In float64, where a p of 5e-324 is not 0. The best token's score is set to 0 first, and
    # kept at 0 (0 / τ, which a GPU that flushes a τ of 5e-324 to 0 would make NaN): the others
    # stay finite or -inf for any τ > 0, even one so small that log p / τ alone would overflow
    # every entry to -inf (then NaN)
    best = log_probs.max(dim=-1, keepdim=True).values  # (R, 1)
    shifted = (log_probs - best).double()  # (R, V), <= 0
    scaled = torch.where(shifted == 0, 0.0, shifted / sampling.temperature)
    scores = scaled.log_softmax(-1)  # (R, V)
    if sampling.top_k is not None and sampling.top_k < scores.size(-1):
        kth = scores.topk(sampling.top_k, dim=-1).values[:, -1:]  # (R, 1)
        scores = scores.masked_fill(scores < kth, -torch.inf)
    if sampling.top_p < 1.0:
        ordered, order = scores.sort(dim=-1, descending=True)  # (R, V)
        probs = ordered.softmax(-1)
        before = probs.cumsum(-1) - probs  # (R, V) the mass ranked above each token
        sorted_cut = before >= sampling.top_p  # a token stays while the mass above it is < p
        sorted_cut[:, 0] = False  # and the most probable one always, however small p is
        cut = torch.zeros_like(sorted_cut).scatter(-1, order, sorted_cut)  # back to vocab order
        scores = scores.masked_fill(cut, -torch.inf)
    return scores.log_softmax(-1).to(log_probs.dtype)


def draw(
    log_probs: torch.Tensor, sampling: Sampling, generator: torch.Generator | None
) -> torch.Tensor:
    """One token per row (R,) drawn from sampling_log_probs(log_probs)."""
    probs = sampling_log_probs(log_probs, sampling).exp()  # (R, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)
