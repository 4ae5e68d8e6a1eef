"""SearchSettings: the one type of the search settings, from a config's `generation:` section,
a model directory's generation.json, the CLI's flags and an HTTP request's fields to the search
(search/dispatch.py) and into the trace (visualize/trace.py). GenerationConfig is its older name.

Torch-free, beside config/__init__.py, so that the CLI and the server can read and check settings
without loading a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

from heedful.config.file import ConfigError

MAX_BEAMS = 256  # the largest num_beams a config or model directory may ask for
MAX_OUTPUT_OFFSET = 10_000  # the largest max_len_offset: output tokens beyond the ratio's


@dataclass(frozen=True)
class Setting:
    """What the surfaces need of one search setting, declared on its field (setting()): the CLI
    makes its flag from it (cli/options.py), the server its request field and that field's
    part of the OpenAPI document (server/schema.py), engine.py the refusals' words, and
    SearchSettings checks the range itself; so a new setting declared here has its flag, its
    field and its check.

    bounds: (low, high), both ints or both floats (the setting's type), checked on every
        SearchSettings and shown by the flag's help and the field's schema; None for a switch.
    above: the low end is excluded (a temperature or top-p of 0 leaves nothing to draw from).
    help: the CLI flag's help; None: no flag (the setting is a config's and generation.json's).
    flag: the flag's spelling when it is not --the-name-with-dashes.
    http: the HTTP field's description; None: no field of the setting's own name.
    draws: it shapes sample's draws only: ignored without sample (by the engines' check and
        by HTTP, where a query string may carry it), refused by the CLI without --sample, and
        recorded in the trace under search.sample.
    """

    bounds: tuple | None = None
    above: bool = False
    help: str | None = None
    flag: str | None = None
    http: str | None = None
    draws: bool = False


def setting(default, bounds: tuple | None = None, **declared):
    """A SearchSettings field: its default, and its Setting in the field's metadata."""
    return field(default=default, metadata={"setting": Setting(bounds, **declared)})


@dataclass(frozen=True)
class SearchSettings:
    """How to search: the defaults a model is saved with (generation.json), or one call's.

    Each field declares what its surfaces need (Setting): dataclasses' own field metadata
    rather than a table beside the class, so that a setting is named once, the fields' order
    is the flags' and the request fields' order, and no table can miss a field or name one
    that is not there.
    """

    # 1 is greedy search. HTTP: the server's num_beams, within --max-num-beams (server/schema.py)
    num_beams: int = setting(
        5,
        (1, MAX_BEAMS),
        flag="--beam",
        help="Beam size (1 = greedy) [default: the model's generation.json].",
    )
    # GNMT alpha: ranking by score / ((5 + |Y|) / 6) ** alpha; Wu et al. 2016 found 0.6-0.7 best
    length_penalty: float = setting(1.0, (0.0, 10.0))
    max_len_ratio: float = setting(1.5, (0.0, 100.0))  # output limit = ratio · source length
    max_len_offset: int = setting(10, (0, MAX_OUTPUT_OFFSET))  # + offset
    # outputs per input (with sample: at most this many samples); a beam keeps num_beams
    # hypotheses, so it cannot return more (__post_init__). Its flag is each command's --n-best
    # (cli/options.py: what an output is per), its HTTP field LibreTranslate's alternatives
    n_best: int = setting(1, (1, MAX_BEAMS))
    # draw every token from the softmax instead of searching (search/sampling.py)
    sample: bool = setting(
        False,
        help="Draw each token from the model's distribution instead of searching; --n-best N "
        "draws N outputs per line.",
        http="draw each token from the softmax; alternatives + 1 samples",
    )
    # above 0: below 1 sharpens the distribution, above 1 flattens it
    temperature: float = setting(
        1.0,
        (0.0, 100.0),
        above=True,
        draws=True,
        help="Divide log-probabilities by this: below 1 sharper, above 1 flatter.",
        http="with sample: below 1 sharper",
    )
    # draw among the k most probable tokens only (None: all)
    top_k: int | None = setting(
        None,
        (1, 2**31),
        draws=True,
        help="Draw among the k most probable tokens only.",
        http="with sample",
    )
    # nucleus: the fewest tokens holding this much probability, in (0, 1]
    top_p: float = setting(
        1.0,
        (0.0, 1.0),
        above=True,
        draws=True,
        help="Draw among the fewest tokens holding this much probability.",
        http="with sample: nucleus sampling",
    )
    # same seed, same batch: same samples (None: torch's random state); up to what
    # torch.Generator.manual_seed takes
    seed: int | None = setting(
        None,
        (0, 2**63 - 1),
        draws=True,
        help="Seed of the draws: the same input and seed give the same samples.",
        http="with sample: repeatable",
    )
    num_samples: int = setting(1, (1, MAX_BEAMS), draws=True)  # outputs drawn per input
    # Diverse beam search (search/diverse.py): the beam split into groups that choose in turn,
    # each by score less the diversity penalty; 1 is plain beam search. It divides num_beams.
    num_beam_groups: int = setting(
        1,
        (1, MAX_BEAMS),
        help="Split the beam into this many groups that choose in turn, each avoiding the "
        "tokens the groups before it chose (diverse beam search: diverse --n-best); it "
        "must divide --beam. 1 = plain beam search.",
        http="diverse beam search: the beam in groups of num_beams / num_beam_groups that "
        "avoid each other's tokens; 1: plain beam search",
    )
    # λ of the Hamming diversity term (Vijayakumar et al. 2018); fairseq's default
    # (--diverse-beam-strength), not Hugging Face's 0, with which the groups are G copies of
    # one beam search of num_beams / G: the groups alone would give the same outputs G times
    diversity_penalty: float = setting(
        0.5,
        (0.0, 100.0),
        help="With --num-beam-groups: what a group's choice loses per earlier group that "
        "chose the same token at the same step, in log-probability [default: the model's "
        "generation.json, else 0.5].",
        http="with num_beam_groups: what a group's choice loses per earlier group that chose "
        "the same token at the same step",
    )

    def __post_init__(self) -> None:
        for name, declared in SETTINGS.items():
            if declared.bounds is None:  # a switch
                continue
            low, high = declared.bounds
            if name == "n_best" and not self.sample:  # a beam keeps num_beams hypotheses, so
                high = self.num_beams  # it cannot return more; samples are drawn
            self._check_range(name, low, high, declared.above)
        if self.num_beams % self.num_beam_groups:
            raise ConfigError(
                "field generation.num_beam_groups must divide generation.num_beams (each group "
                f"keeps num_beams / num_beam_groups beams), got {self.num_beam_groups} groups "
                f"of {self.num_beams} beams"
            )

    def _check_range(self, name: str, low, high, above: bool) -> None:
        """ConfigError naming generation.<name> unless low <= its value <= high (low itself
        excluded when `above`); None is no value (top_k, seed: unset)."""
        value = getattr(self, name)
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
        """The settings that shape the draws (DRAWS) away from their defaults, by name: what a
        trace records of them (temperature 1, every token, top_p 1, no seed and one sample
        need no mention)."""
        if not self.sample:
            return {}
        given = {name: getattr(self, name) for name in sorted(DRAWS)}
        default = SearchSettings()
        return {name: v for name, v in given.items() if v != getattr(default, name)}

    def record(self, prefix: str | None = None, forced: int = 0) -> dict:
        """The trace's `search` (docs/trace-schema.md): num_beams and length_penalty, a
        diverse beam search's groups and penalty, then the prefix and its forced steps, and the
        sampling settings, when there are some."""
        out: dict = {"num_beams": self.num_beams, "length_penalty": self.length_penalty}
        if self.num_beam_groups > 1 and not self.sample:
            out |= {n: getattr(self, n) for n in ("num_beam_groups", "diversity_penalty")}
        out |= {"prefix": prefix, "forced": forced} if prefix else {}
        return out | ({"sample": self.sampling()} if self.sample else {})


GenerationConfig = SearchSettings  # the name config/__init__.py, model directories and callers know
# Each setting's declaration, by name, in the fields' order
SETTINGS: dict[str, Setting] = {f.name: f.metadata["setting"] for f in fields(SearchSettings)}
DRAWS = frozenset(name for name, declared in SETTINGS.items() if declared.draws)


def flag(name: str) -> str:
    """The CLI's spelling of a setting: its declared flag, or --the-name-with-dashes."""
    return SETTINGS[name].flag or "--" + name.replace("_", "-")


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
