"""Typed configuration: frozen dataclasses, loaded from YAML, with dotted command-line overrides.

Unknown keys and wrong types are errors that name the key, because a typo in a config that is
silently ignored costs a user a whole training run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from heedful.config.corpora import CorpusConfig, check_corpora
from heedful.config.file import ConfigError, apply_overrides, from_dict, parse_yaml
from heedful.config.file import check_choice as _choice
from heedful.config.file import check_fraction as _fraction
from heedful.config.file import check_positive as _positive
from heedful.config.file import check_within as _within
from heedful.config.search import (  # noqa: F401 (their old home: callers import them here)
    MAX_BEAMS,
    MAX_OUTPUT_OFFSET,
    GenerationConfig,
    SearchSettings,
    beams_for,
)
from heedful.config.vision import (
    check_cache,
    check_encoder,
    check_given_image,
    check_task_keys,
    unused_image_keys,
)
from heedful.layers.scores import RNN_ATTENTIONS, SCORES

ARCHS = ("transformer", "rnn")

MAX_LINE_BYTES = 16 * 2**20  # data.max_line_bytes, and data/lines.py's default for every reader
# train.snapshot_sentences and train.snapshot_validations at most: with each trace at most
# 1 MiB (visualize/snapshots.py), a run's snapshots.json stays under 4 × 50 MiB
MAX_SNAPSHOT_SENTENCES, MAX_SNAPSHOT_VALIDATIONS = 4, 50

# The keys only one family reads; the other family's keys are errors (see ModelConfig.check_given).
FAMILY_KEYS = {
    "transformer": (
        "attention_dropout", "tie_embeddings", "num_heads", "encoder_layers", "decoder_layers",
        "d_ff", "norm", "positional", "max_positions", "num_kv_heads",
    ),
    "rnn": ("rnn_cell", "hidden_size", "rnn_layers", "bidirectional", "attention", "input_feeding",
            "local_window", "copy"),
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
    # grouped-query attention (Ainslie et al. 2023): key/value heads, each shared by num_heads /
    # num_kv_heads query heads (1: multi-query); must divide num_heads; None: one per head
    num_kv_heads: int | None = None
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
    attention: str = "bahdanau"  # none | a score of scores.py: bahdanau | luong-general | ...
    local_window: int = 10  # D of luong-local-m/-p: attend to [p_t - D, p_t + D] (§3.2: D = 10)
    input_feeding: bool = False  # Luong 2015 §3.3: feed [h_t; c_t] summary into the next step
    # See et al. 2017's pointer-generator: mix the softmax with the attention over the source
    # positions holding each token (copying), weighted by a learned p_gen; needs attention and
    # one vocabulary for both sides (data.joint_vocab)
    copy: bool = False
    # Images (config/vision.py): text reads ids; cnn | vit | torchvision:<name> read size × size
    # pictures into a grid of regions the decoder attends over (models/vision.py)
    encoder: str = "text"
    image_size: int = 224
    patch_size: int = 16  # vit: P × P pixels per patch
    cnn_channels: int = 32  # cnn: the first block's channels, doubled by each block after it
    cnn_blocks: int = 3  # cnn: conv blocks, each halving the image
    cnn_coords: bool = False  # cnn: x, y coordinate channels beside the pixels (CoordConv)
    cnn_layers: int = 0  # cnn: Transformer encoder layers over the grid's cells
    encoder_weights: str | None = None  # torchvision: a local weights file (else random init)
    freeze_encoder: bool = False  # cnn, torchvision: train all but the trunk (models/frozen.py)
    attention_penalty: float = 0.0  # λ of Show, Attend and Tell's doubly stochastic regulariser

    def __post_init__(self) -> None:
        _choice("model.arch", self.arch, ARCHS)
        _choice("model.norm", self.norm, ("post", "pre"))
        _choice("model.positional", self.positional, ("sinusoidal", "learned"))
        _choice("model.rnn_cell", self.rnn_cell, ("gru", "lstm"))
        _choice("model.attention", self.attention, RNN_ATTENTIONS)
        check_encoder(self)
        sizes = ("d_model", "num_heads", "encoder_layers", "decoder_layers", "d_ff",
                 "max_positions", "hidden_size", "rnn_layers", "local_window")  # fmt: skip
        for name in sizes:
            _positive(f"model.{name}", getattr(self, name))
        for name in ("dropout", "attention_dropout"):
            _fraction(f"model.{name}", getattr(self, name))
        if self.arch == "transformer" and self.d_model % self.num_heads:
            raise ConfigError(
                f"model.d_model ({self.d_model}) must be divisible by model.num_heads "
                f"({self.num_heads})"
            )
        if self.num_kv_heads is not None and (
            self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads
        ):
            raise ConfigError(
                f"model.num_kv_heads ({self.num_kv_heads}) must divide model.num_heads "
                f"({self.num_heads}): each key/value head serves a group of query heads"
            )
        if self.arch == "rnn" and self.copy and self.attention == "none":
            raise ConfigError(
                "model.copy: the pointer-generator copies with attention; choose "
                "a model.attention other than none"
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
        check_given_image(self, given, defaults, prefix)
        if "local_window" in given and not self.is_local() and self.local_window != 10:
            raise ConfigError(f"{prefix}local_window: only luong-local-m / -p attention uses it")

    def is_local(self) -> bool:
        """Whether the attention is one of Luong's local ones (§3.2), with a window D."""
        return self.attention in SCORES and SCORES[self.attention].local is not None

    def used(self) -> dict:
        """The keys this model's family reads, as plain data (what a model directory stores)."""
        unused = {k for arch, keys in FAMILY_KEYS.items() if arch != self.arch for k in keys}
        if not self.is_local():  # only local attention has a window
            unused.add("local_window")
        unused |= unused_image_keys(self)  # all of them for text: its directories stay the same
        if not self.copy:  # model directories written before it stay byte for byte the same
            unused.add("copy")
        if self.num_kv_heads is None:  # likewise: only grouped-query models list it
            unused.add("num_kv_heads")
        return {k: v for k, v in to_dict(self).items() if k not in unused}


@dataclass(frozen=True)
class DataConfig:
    # Parallel text: two line-aligned files, one TSV (source TAB target) or one JSON Lines
    # file (one object per line, as summarization corpora come) per split.
    # Relative paths are read from the directory heedful runs in.
    train_src: str | None = None
    train_tgt: str | None = None
    train_tsv: str | None = None
    train_jsonl: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    valid_tsv: str | None = None
    valid_jsonl: str | None = None
    jsonl_src_field: str = "document"  # the JSON Lines field read as the source
    jsonl_tgt_field: str = "summary"  # and the one read as the target
    src_lang: str = "en"
    tgt_lang: str = "de"
    tokenizer: str = "sentencepiece"  # sentencepiece | char
    vocab_size: int = 8000  # SentencePiece pieces (per side unless joint)
    sp_model_type: str = "unigram"  # unigram | bpe
    joint_vocab: bool = True  # one vocabulary for both languages
    max_length: int = 100  # pairs longer than this (in tokens) on either side are dropped
    valid_max_sentences: int | None = None  # score only the first N validation pairs (of each
    # of data.corpora), or images
    # Reuse trained tokenizers (files as a model directory holds them: tokenizer.src and
    # tokenizer.tgt) instead of training new ones, e.g. to compare models on one vocabulary.
    # Both or neither (an image model, whose source is pixels: tgt_tokenizer alone); the
    # tokenizer, vocab_size, sp_model_type and joint_vocab keys are then not used.
    src_tokenizer: str | None = None
    tgt_tokenizer: str | None = None
    # SentencePiece is trained on at most this many sentences (per side, or of both sides for
    # a joint vocabulary), a uniform sample of the training text (reservoir sampling, seeded).
    tokenizer_sample: int = 1_000_000
    # Large corpora: a directory of token ids binarized once into memory-mapped shards
    # (`heedful prepare CONFIG` writes it; training reads it, preparing it first when it is
    # missing or the files above changed). None: read and tokenize the corpus in memory.
    prepared: str | None = None
    shard_tokens: int = 50_000_000  # at most this many token ids (both sides) per shard
    max_line_bytes: int = MAX_LINE_BYTES  # a longer line of a data file is an error, not memory
    # One model, several directions (Johnson et al. 2017): a list of corpora, each a mapping
    # of its language pair (source, target) and its files (train_src/_tgt/_tsv/_jsonl,
    # valid_...), in place of the train_/valid_ keys and src_lang/tgt_lang above. Each source
    # is read after its pair's target token (<2de>), one symbol of the source vocabulary.
    corpora: tuple[CorpusConfig, ...] = ()
    # Image captioning (model.encoder other than text): a folder of images and the captions
    # files that name them, flickr (image<TAB>caption lines, results.csv) or coco (JSON)
    images: str | None = None
    captions: str | None = None  # training captions
    valid_captions: str | None = None
    captions_format: str = "flickr"
    feature_cache: str | None = None  # a folder; with model.freeze_encoder: the trunk's output

    def pairs(self) -> tuple[tuple[str, str], ...]:
        """The language pairs trained on: one per corpus, or (src_lang, tgt_lang)."""
        if self.corpora:
            return tuple((c.source, c.target) for c in self.corpora)
        return ((self.src_lang, self.tgt_lang),)

    def check_given(self, given: set[str], prefix: str = "data.") -> None:
        if "corpora" in given and not self.corpora:  # the default, but written on purpose
            raise ConfigError(
                f"{prefix}corpora: an empty list; give at least one corpus, or "
                "leave the key out for one pair"
            )

    def __post_init__(self) -> None:
        check_corpora(self)
        _choice("data.tokenizer", self.tokenizer, ("sentencepiece", "char"))
        _choice("data.sp_model_type", self.sp_model_type, ("unigram", "bpe"))
        _choice("data.captions_format", self.captions_format, ("flickr", "coco"))
        for name in ("jsonl_src_field", "jsonl_tgt_field"):
            if not getattr(self, name):
                raise ConfigError(f"data.{name}: must name a field, got an empty string")
        _positive("data.vocab_size", self.vocab_size)
        _positive("data.max_length", self.max_length)
        _positive("data.valid_max_sentences", self.valid_max_sentences)
        _positive("data.tokenizer_sample", self.tokenizer_sample)
        _positive("data.shard_tokens", self.shard_tokens)
        _positive("data.max_line_bytes", self.max_line_bytes)


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 1
    batch_tokens: int = 4096  # target tokens per batch (batches are length-bucketed)
    max_steps: int = 3000
    max_epochs: int | None = None
    max_time: float | None = None  # wall-clock seconds, validations included; then a final one
    accumulate: int = 1  # batches per optimizer step (gradient accumulation)
    # bfloat16 autocast for the forward pass; None: on when training on a GPU that has it
    bf16: bool | None = None
    lr: float = 1e-3  # peak learning rate, reached at the end of warm-up
    warmup_steps: int = 200
    schedule: str = "inverse_sqrt"  # inverse_sqrt (Noam) | constant | linear (to 0 at budget end)
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
    # processes that collate batches ahead of the training step (torch DataLoader workers);
    # 0 collates in the training process. The batches are the same either way.
    data_workers: int = 0
    # torchrun: the processes other than rank 0 print nothing; true writes what they would
    # have printed to rank-N.log in the run directory
    rank_logs: bool = False
    # The attention filter from random to meaningful (training/snapshots.py): trace this many
    # fixed validation inputs (the first; at most 4) before the first step and at every
    # validation into RUN_DIR/snapshots.json, which `heedful attention RUN_DIR --html F` shows
    # with a training-step slider; 0: off. Bounded: each trace at most 1 MiB (its internals
    # left out beyond that, the whole trace beyond that again) and at most
    # snapshot_validations (2 to 50) kept, the first and the latest always, the others
    # thinned evenly: 2 × 20 take at most 40 MiB, 4 × 50 at most 200 MiB.
    snapshot_sentences: int = 0
    snapshot_validations: int = 20

    def __post_init__(self) -> None:
        _choice("train.schedule", self.schedule, ("inverse_sqrt", "constant", "linear"))
        _choice("train.optimizer", self.optimizer, ("adam", "adamw"))
        _choice("train.early_stopping_metric", self.early_stopping_metric, ("bleu", "chrf", "loss"))
        if not 0 <= self.seed < 2**63:  # torch.manual_seed takes no more
            raise ConfigError(f"train.seed: must be in [0, 2**63), got {self.seed}")
        positive = ("batch_tokens", "max_steps", "max_epochs", "max_time", "lr", "eval_every",
                    "log_every", "accumulate", "keep_best", "patience", "threads")  # fmt: skip
        for name in positive:
            _positive(f"train.{name}", getattr(self, name))
        for name in ("warmup_steps", "weight_decay", "clip_norm", "data_workers"):
            _positive(f"train.{name}", getattr(self, name), allow_zero=True)
        _fraction("train.label_smoothing", self.label_smoothing)
        for i, beta in enumerate(self.betas):
            _fraction(f"train.betas[{i}]", beta)
        _within("train.snapshot_sentences", self.snapshot_sentences, 0, MAX_SNAPSHOT_SENTENCES)
        _within(
            "train.snapshot_validations", self.snapshot_validations, 2, MAX_SNAPSHOT_VALIDATIONS
        )


@dataclass(frozen=True)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    generation: SearchSettings = field(default_factory=SearchSettings)  # saved with the model

    def __post_init__(self) -> None:
        check_cache(self.data.feature_cache, self.model)  # data.feature_cache: a frozen trunk
        if self.train.snapshot_sentences and self.data.feature_cache is not None:
            raise ConfigError(
                "train.snapshot_sentences: with data.feature_cache the model trains on cached "
                "cells, not pictures, and there is no picture to trace; set it to 0"
            )
        check_task_keys(self.data, self.model, self.train, DataConfig())  # text or captions
        # the pointer-generator adds attention on source ids to the same output ids
        data = self.data
        given = data.src_tokenizer is not None  # then joint_vocab is not used
        shared = data.src_tokenizer == data.tgt_tokenizer if given else data.joint_vocab
        if self.model.arch == "rnn" and self.model.copy and not shared:
            fix = (
                "name one tokenizer file as both data.src_tokenizer and data.tgt_tokenizer"
                if given
                else "set data.joint_vocab: true"
            )
            raise ConfigError(
                "model.copy needs one vocabulary for both sides, so that a source id is the "
                f"same output id: {fix}"
            )


# ---------------------------------------------------------------------------------------------
# YAML files <-> Config (config/file.py does the typed conversion)
# ---------------------------------------------------------------------------------------------


def to_dict(config: Any) -> dict:
    """Plain, YAML/JSON-ready data (tuples become lists)."""

    def plain(value: Any) -> Any:
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    data = plain(asdict(config))
    if isinstance(config, Config):  # the model section lists only its family's keys
        data["model"] = config.model.used()
        if not config.data.corpora:  # one pair: written as before (an empty list is an error)
            del data["data"]["corpora"]
    return data


def load_config(path: str | Path | None = None, overrides: list[str] = (), cls: type = Config):
    """Read a YAML config (or the defaults when path is None) and apply overrides."""
    data: dict = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            data = parse_yaml(path.read_text(encoding="utf-8")) or {}
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
