"""Typed configuration: frozen dataclasses, loaded from YAML, with dotted command-line overrides.

Unknown keys and wrong types are errors that name the key, because a typo in a config that is
silently ignored costs a user a whole training run.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A config key is unknown, has the wrong type or an invalid value; the message names it."""


def _choice(key: str, value: str, options: tuple[str, ...]) -> None:
    if value not in options:
        raise ConfigError(f"{key}: {value!r} is not one of {', '.join(options)}")


def _positive(key: str, value: float | None, allow_zero: bool = False) -> None:
    """value > 0 (or >= 0); None passes, for the optional limits where None means "no limit"."""
    if value is not None and (value < 0 or (value == 0 and not allow_zero)):
        raise ConfigError(f"{key}: must be {'>= 0' if allow_zero else '> 0'}, got {value}")


def _fraction(key: str, value: float) -> None:
    """value in [0, 1): dropout, label smoothing and Adam's betas all break down at 1."""
    if not 0.0 <= value < 1.0:
        raise ConfigError(f"{key}: must be in [0, 1), got {value}")


ARCHS = ("transformer", "rnn")
RNN_ATTENTIONS = ("none", "bahdanau", "luong-dot", "luong-general", "luong-concat")

# The keys only one family reads; the other family's keys are errors (see ModelConfig.check_given).
FAMILY_KEYS = {
    "transformer": (
        "attention_dropout", "tie_embeddings", "num_heads", "encoder_layers", "decoder_layers",
        "d_ff", "norm", "positional", "max_positions",
    ),
    "rnn": ("rnn_cell", "hidden_size", "rnn_layers", "bidirectional", "attention", "input_feeding"),
}  # fmt: skip


@dataclass(frozen=True)
class ModelConfig:
    arch: str = "transformer"  # transformer | rnn
    d_model: int = 128  # embedding size (and the Transformer's width)
    dropout: float = 0.1
    attention_dropout: float = 0.0  # dropout on attention weights (Transformer; slow on CPU)
    tie_embeddings: bool = False  # share target embedding and output projection
    # Transformer
    num_heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    d_ff: int = 512
    norm: str = "post"  # post (as in the paper) | pre (more stable for deep stacks)
    positional: str = "sinusoidal"  # sinusoidal | learned
    max_positions: int = 512
    # RNN encoder-decoder
    rnn_cell: str = "gru"  # gru | lstm
    hidden_size: int = 256
    rnn_layers: int = 1
    bidirectional: bool = True  # each direction gets hidden_size / 2
    attention: str = "bahdanau"  # none | bahdanau | luong-dot | luong-general | luong-concat
    input_feeding: bool = False  # Luong 2015 §3.3: feed [h_t; c_t] summary into the next step

    def __post_init__(self) -> None:
        _choice("model.arch", self.arch, ARCHS)
        _choice("model.norm", self.norm, ("post", "pre"))
        _choice("model.positional", self.positional, ("sinusoidal", "learned"))
        _choice("model.rnn_cell", self.rnn_cell, ("gru", "lstm"))
        _choice("model.attention", self.attention, RNN_ATTENTIONS)
        sizes = ("d_model", "num_heads", "encoder_layers", "decoder_layers", "d_ff",
                 "max_positions", "hidden_size", "rnn_layers")  # fmt: skip
        for name in sizes:
            _positive(f"model.{name}", getattr(self, name))
        for name in ("dropout", "attention_dropout"):
            _fraction(f"model.{name}", getattr(self, name))
        if self.arch == "transformer" and self.d_model % self.num_heads:
            raise ConfigError(
                f"model.d_model ({self.d_model}) must be divisible by model.num_heads "
                f"({self.num_heads})"
            )
        if self.arch == "rnn" and self.bidirectional and self.hidden_size % 2:
            raise ConfigError(
                f"model.hidden_size ({self.hidden_size}) must be even with model.bidirectional"
            )

    def check_given(self, given: set[str], prefix: str = "model.") -> None:
        """A key that only the other family reads is an error, since it would silently do
        nothing (`tie_embeddings` on an RNN). One that holds its default passes: model
        directories and runs written before this check list every key."""
        defaults = ModelConfig()
        for arch, keys in FAMILY_KEYS.items():
            if arch == self.arch:
                continue
            for key in sorted(given & set(keys)):
                if getattr(self, key) != getattr(defaults, key):
                    raise ConfigError(
                        f"{prefix}{key}: only arch {arch} uses it, this model is "
                        f"{prefix}arch {self.arch}; remove the key"
                    )

    def used(self) -> dict:
        """The keys this model's family reads, as plain data (what a model directory stores)."""
        unused = {k for arch, keys in FAMILY_KEYS.items() if arch != self.arch for k in keys}
        return {k: v for k, v in to_dict(self).items() if k not in unused}


@dataclass(frozen=True)
class DataConfig:
    # Parallel text: either two line-aligned files or one TSV (source TAB target) per split.
    # Relative paths are read from the directory heedful runs in.
    train_src: str | None = None
    train_tgt: str | None = None
    train_tsv: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    valid_tsv: str | None = None
    src_lang: str = "en"
    tgt_lang: str = "de"
    tokenizer: str = "sentencepiece"  # sentencepiece | char
    vocab_size: int = 8000  # SentencePiece pieces (per side unless joint)
    sp_model_type: str = "unigram"  # unigram | bpe
    joint_vocab: bool = True  # one vocabulary for both languages
    max_length: int = 100  # pairs longer than this (in tokens) on either side are dropped
    valid_max_sentences: int | None = None  # score only the first N validation pairs
    # Reuse trained tokenizers (files as a model directory holds them: tokenizer.src and
    # tokenizer.tgt) instead of training new ones, e.g. to compare models on one vocabulary.
    # Both or neither; the tokenizer, vocab_size, sp_model_type and joint_vocab keys are then
    # not used.
    src_tokenizer: str | None = None
    tgt_tokenizer: str | None = None

    def __post_init__(self) -> None:
        _choice("data.tokenizer", self.tokenizer, ("sentencepiece", "char"))
        if (self.src_tokenizer is None) != (self.tgt_tokenizer is None):
            raise ConfigError("data.src_tokenizer and data.tgt_tokenizer: give both or neither")
        _choice("data.sp_model_type", self.sp_model_type, ("unigram", "bpe"))
        _positive("data.vocab_size", self.vocab_size)
        _positive("data.max_length", self.max_length)
        _positive("data.valid_max_sentences", self.valid_max_sentences)


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 1
    batch_tokens: int = 4096  # target tokens per batch (batches are length-bucketed)
    max_steps: int = 3000
    max_epochs: int | None = None
    max_time: float | None = None  # seconds of wall-clock training, then a clean final checkpoint
    accumulate: int = 1  # batches per optimizer step (gradient accumulation)
    # bfloat16 autocast for the forward pass; None: on when training on a GPU that has it
    bf16: bool | None = None
    lr: float = 1e-3  # peak learning rate, reached at the end of warm-up
    warmup_steps: int = 200
    schedule: str = "inverse_sqrt"  # inverse_sqrt (Noam) | constant (after warm-up)
    optimizer: str = "adam"  # adam | adamw
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 1.0  # 0 disables gradient clipping
    eval_every: int = 250  # steps between validations (and checkpoints)
    log_every: int = 10
    early_stopping_metric: str = "bleu"  # bleu | chrf | loss: what "best" means
    patience: int | None = None  # stop after this many validations without improvement
    keep_best: int = 3  # best checkpoints kept (the latest one is always kept too)
    # torch threads; None: one per core we may use, shared among torchrun's local processes
    # (or OMP_NUM_THREADS when set). Fewer than the cores helps when another process is busy.
    threads: int | None = None

    def __post_init__(self) -> None:
        _choice("train.schedule", self.schedule, ("inverse_sqrt", "constant"))
        _choice("train.optimizer", self.optimizer, ("adam", "adamw"))
        _choice("train.early_stopping_metric", self.early_stopping_metric, ("bleu", "chrf", "loss"))
        if not 0 <= self.seed < 2**63:  # torch.manual_seed takes no more
            raise ConfigError(f"train.seed: must be in [0, 2**63), got {self.seed}")
        positive = ("batch_tokens", "max_steps", "max_epochs", "max_time", "lr", "eval_every",
                    "log_every", "accumulate", "keep_best", "patience", "threads")  # fmt: skip
        for name in positive:
            _positive(f"train.{name}", getattr(self, name))
        for name in ("warmup_steps", "weight_decay", "clip_norm"):
            _positive(f"train.{name}", getattr(self, name), allow_zero=True)
        _fraction("train.label_smoothing", self.label_smoothing)
        for i, beta in enumerate(self.betas):
            _fraction(f"train.betas[{i}]", beta)


MAX_BEAMS = 256  # the largest num_beams a config or model directory may ask for
MAX_OUTPUT_OFFSET = 10_000  # the largest max_len_offset: output tokens beyond the ratio's


@dataclass(frozen=True)
class GenerationConfig:
    """The default search settings a model is saved with (generation.json)."""

    num_beams: int = 5  # 1 is greedy search
    length_penalty: float = 1.0  # GNMT alpha: ranking by score / ((5 + |Y|) / 6) ** alpha
    max_len_ratio: float = 1.5  # output limit = ratio · source length + offset
    max_len_offset: int = 10
    n_best: int = 1

    def __post_init__(self) -> None:
        ranges = {
            "num_beams": (1, MAX_BEAMS),
            "n_best": (1, self.num_beams),
            "length_penalty": (0.0, 10.0),  # GNMT's alpha; Wu et al. 2016 found 0.6-0.7 best
            "max_len_ratio": (0.0, 100.0),
            "max_len_offset": (0, MAX_OUTPUT_OFFSET),
        }
        for name, (low, high) in ranges.items():
            value = getattr(self, name)
            if not (math.isfinite(value) and low <= value <= high):  # also False for NaN
                raise ConfigError(
                    f"field generation.{name} must be from {low} to {high}, got {value!r}"
                )

    def max_output_length(self, source_length: int) -> int:
        """The output limit for a source of `source_length` tokens, </s> not counted:
        ratio · S + offset, at least 1 (decoding.max_output_lengths is the same per batch)."""
        return max(1, int(float(source_length) * self.max_len_ratio + self.max_len_offset))


def beams_for(num_beams: int, n_best: int) -> int:
    """The beam to search with: n outputs need a beam of at least n."""
    return max(num_beams, n_best)


@dataclass(frozen=True)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)  # saved with the model


# ---------------------------------------------------------------------------------------------
# Plain data <-> dataclasses, with the key path in every error
# ---------------------------------------------------------------------------------------------


def _convert(value: Any, hint: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(value, option, key)
            except ConfigError as error:
                errors.append(str(error))
        raise ConfigError(errors[0] if errors else f"{key}: invalid value {value!r}")
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
        return from_dict(hint, value, prefix=f"{key}.")
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError(f"{key}: expected a list of {len(args)} values, got {value!r}")
        return tuple(_convert(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)  # YAML's 1 is an int; a float key takes it
    if hint is float and isinstance(value, float) and not math.isfinite(value):
        # .inf and .nan are valid YAML, but no setting here means anything when infinite: an
        # infinite learning rate turns every weight into NaN without an error
        raise ConfigError(f"{key}: must be a finite number, got {value}")
    if hint is bool and not isinstance(value, bool):
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if hint in (int, float, str) and (not isinstance(value, hint) or isinstance(value, bool)):
        raise ConfigError(f"{key}: expected {hint.__name__}, got {type(value).__name__} {value!r}")
    return value


def from_dict(cls: type, data: dict, prefix: str = "") -> Any:
    """Build dataclass `cls` from plain data; unknown keys and wrong types raise ConfigError."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"unknown config key {prefix}{unknown[0]} (known keys under "
            f"{prefix.rstrip('.') or 'the top level'}: {', '.join(sorted(names))})"
        )
    kwargs = {name: _convert(value, hints[name], prefix + name) for name, value in data.items()}
    config = cls(**kwargs)
    if hasattr(config, "check_given"):  # keys that are valid alone but not together
        config.check_given(set(data), prefix)
    return config


def to_dict(config: Any) -> dict:
    """Plain, YAML/JSON-ready data (tuples become lists)."""

    def plain(value: Any) -> Any:
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    data = plain(dataclasses.asdict(config))
    if isinstance(config, Config):  # the model section lists only its family's keys
        data["model"] = config.model.used()
    return data


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads 1e-3 (no dot) as a string; users, and YAML 1.2, mean a number."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _parse_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader: no Python objects


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply `section.key=value` strings (values parsed as YAML) to plain config data."""
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like section.key=value")
        path, raw = item.split("=", 1)
        *parents, leaf = path.strip().split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part} is not a section")
        try:
            node[leaf] = _parse_yaml(raw)
        except yaml.YAMLError as error:
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise ConfigError(
                f"override {item!r}: {path.strip()}: the value {raw!r} is not valid YAML "
                f"({problem}); quote a string, write a list as [a, b]"
            ) from None
    return data


def load_config(path: str | Path | None = None, overrides: list[str] = (), cls: type = Config):
    """Read a YAML config (or the defaults when path is None) and apply overrides."""
    data: dict = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            data = _parse_yaml(path.read_text(encoding="utf-8")) or {}
        except UnicodeDecodeError as error:
            raise ConfigError(
                f"{path}: not UTF-8 text ({error.reason} at byte {error.start})"
            ) from None
        except yaml.YAMLError as error:
            raise ConfigError(f"{path}: invalid YAML: {error}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of sections")
    try:
        return from_dict(cls, apply_overrides(data, list(overrides)))
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}" if path else str(error)) from None


def save_config(config: Any, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False), encoding="utf-8")
