"""SearchSettings: the one type of the search settings, from a config's `generation:` section,
a model directory's generation.json, the CLI's flags and an HTTP request's fields to the search
(search/dispatch.py) and into the trace (visualize/trace.py). GenerationConfig is its older name.

Torch-free, beside config/__init__.py, so that the CLI and the server can read and check settings
without loading a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from heedful.config.file import ConfigError

MAX_BEAMS = 256  # the largest num_beams a config or model directory may ask for
MAX_OUTPUT_OFFSET = 10_000  # the largest max_len_offset: output tokens beyond the ratio's
# Ranges whose low end is excluded: a temperature or top-p of 0 leaves nothing to draw from
ABOVE_LOW = ("temperature", "top_p")
SAMPLING = ("temperature", "top_k", "top_p", "seed")  # what shapes the draws of sample


@dataclass(frozen=True)
class SearchSettings:
    """How to search: the defaults a model is saved with (generation.json), or one call's."""

    num_beams: int = 5  # 1 is greedy search
    length_penalty: float = 1.0  # GNMT alpha: ranking by score / ((5 + |Y|) / 6) ** alpha
    max_len_ratio: float = 1.5  # output limit = ratio · source length + offset
    max_len_offset: int = 10
    n_best: int = 1  # outputs per input (with sample: at most this many samples)
    sample: bool = False  # draw every token from the softmax instead of searching (sampling.py)
    temperature: float = 1.0  # above 0: below 1 sharpens the distribution, above 1 flattens it
    top_k: int | None = None  # draw among the k most probable tokens only (None: all)
    top_p: float = 1.0  # nucleus: the fewest tokens holding this much probability, in (0, 1]
    seed: int | None = None  # same seed, same batch: same samples (None: torch's random state)
    num_samples: int = 1  # outputs drawn per input

    def __post_init__(self) -> None:
        ranges = {
            "num_beams": (1, MAX_BEAMS),
            # a beam keeps num_beams hypotheses, so it cannot return more; samples are drawn
            "n_best": (1, MAX_BEAMS if self.sample else self.num_beams),
            "length_penalty": (0.0, 10.0),  # GNMT's alpha; Wu et al. 2016 found 0.6-0.7 best
            "max_len_ratio": (0.0, 100.0),
            "max_len_offset": (0, MAX_OUTPUT_OFFSET),
            "temperature": (0.0, 100.0),  # 0 itself excluded (ABOVE_LOW), as for top_p
            "top_p": (0.0, 1.0),
            "top_k": (1, 2**31),  # None: every token a candidate
            "seed": (0, 2**63 - 1),  # what torch.Generator.manual_seed takes
            "num_samples": (1, MAX_BEAMS),
        }
        for name, (low, high) in ranges.items():
            value, above = getattr(self, name), name in ABOVE_LOW
            if value is not None and not (
                low <= value <= high and math.isfinite(value) and not (above and value == low)
            ):  # False for NaN; the range first, as isfinite overflows on an int like 10**400
                span = f"above {low} and at most {high}" if above else f"from {low} to {high}"
                if name == "n_best" and not self.sample:
                    span += " (need 1 <= n_best <= num_beams: a beam keeps num_beams outputs)"
                raise ConfigError(f"field generation.{name} must be {span}, got {value!r}")

    def but(self, **overrides) -> SearchSettings:
        """These settings with the overrides that are not None (None: keep this one), checked
        again as a whole; a name that is no setting is a TypeError naming it."""
        names = {f.name for f in fields(self)}
        for name in overrides:
            if name not in names:
                raise TypeError(f"{name!r} is not a search setting; the settings are {names}")
        given = {name: value for name, value in overrides.items() if value is not None}
        return replace(self, **given) if given else self

    def max_output_length(self, source_length: int) -> int:
        """The output limit for a source of `source_length` tokens, </s> not counted:
        ratio · S + offset, at least 1 (decoding.max_output_lengths is the same per batch)."""
        return max(1, int(float(source_length) * self.max_len_ratio + self.max_len_offset))

    def sampling(self) -> dict:
        """The sampling settings away from their defaults, by name: what a trace records of
        the draws (temperature 1, every token, top_p 1 and no seed need no mention)."""
        if not self.sample:
            return {}
        given = {name: getattr(self, name) for name in sorted(SAMPLING)}
        default = SearchSettings()
        return {name: v for name, v in given.items() if v != getattr(default, name)}

    def record(self, prefix: str | None = None, forced: int = 0) -> dict:
        """The trace's `search` (docs/trace-schema.md): num_beams and length_penalty, then the
        prefix and its forced steps, and the sampling settings, when there are some."""
        out: dict = {"num_beams": self.num_beams, "length_penalty": self.length_penalty}
        out |= {"prefix": prefix, "forced": forced} if prefix else {}
        return out | ({"sample": self.sampling()} if self.sample else {})


GenerationConfig = SearchSettings  # the name config/__init__.py, model directories and callers know


def beams_for(num_beams: int, n_best: int) -> int:
    """The beam to search with: n outputs need a beam of at least n."""
    return max(num_beams, n_best)


def call_settings(
    defaults: SearchSettings, settings: SearchSettings | None = None, **overrides
) -> SearchSettings:
    """The settings of one call: `settings` when given, else the model's defaults with one
    output (a call asks for its n_best), then the overrides that are not None."""
    base = replace(defaults, n_best=1) if settings is None else settings
    return base.but(**overrides)  # one check of them all: num_beams and n_best together
