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
from heedful.config.file import ConfigError, apply_overrides, from_dict, parse_yaml  # noqa: F401
from heedful.config.file import check_choice as _choice
from heedful.config.file import check_fraction as _fraction
from heedful.config.file import check_positive as _positive
from heedful.config.file import check_within as _within
from heedful.config.flat import read_config, read_model  # noqa: F401
from heedful.config.model import (  # noqa: F401 (the model section's parts, importable here)
    ARCHS,
    DecoderConfig,
    ModelConfig,
    TextEncoderConfig,
)
from heedful.config.search import (  # noqa: F401 (their old home: callers import them here)
    MAX_BEAMS,
    MAX_OUTPUT_OFFSET,
    GenerationConfig,
    SearchSettings,
    beams_for,
)
from heedful.config.vision import (  # noqa: F401
    BackboneEncoderConfig,
    CNNEncoderConfig,
    ViTEncoderConfig,
    check_cache,
    check_task_keys,
)

MAX_LINE_BYTES = 16 * 2**20  # data.max_line_bytes, and data/lines.py's default for every reader
# train.snapshot_sentences and train.snapshot_validations at most: with each trace at most
# 1 MiB (visualize/snapshots.py), a run's snapshots.json stays under 4 × 50 MiB
MAX_SNAPSHOT_SENTENCES, MAX_SNAPSHOT_VALIDATIONS = 4, 50


@dataclass(frozen=True)
class SourceConfig:
    """data.source: what the input side is read with, beside the files of the pairs (which
    hold both sides, and stay in data). A text model reads its source with a tokenizer (trained
    on the corpus unless given); an image model reads pictures from a folder, which captions
    files name, maybe through a cache of its frozen trunk's output."""

    # Text: a trained tokenizer file (tokenizer.src of a model directory) instead of training
    # one, e.g. to compare models on one vocabulary; with data.tgt_tokenizer, both or neither
    tokenizer: str | None = None
    images: str | None = None  # pictures: the folder the captions files name images in
    # pictures, with model.encoder.freeze: a folder keeping the frozen trunk's output
    feature_cache: str | None = None


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
    # Reuse a trained target tokenizer (tokenizer.tgt of a model directory) instead of training
    # one; a text model takes data.source.tokenizer with it (an image model, whose source is
    # pixels, this one alone); the tokenizer, vocab_size, sp_model_type and joint_vocab keys
    # are then not used.
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
    # Image captioning (model.encoder.kind other than text): the captions files that name the
    # pictures of data.source.images, flickr (image<TAB>caption lines, results.csv) or coco
    captions: str | None = None  # training captions
    valid_captions: str | None = None
    captions_format: str = "flickr"
    source: SourceConfig = field(default_factory=SourceConfig)  # what reads the input side

    def pairs(self) -> tuple[tuple[str, str], ...]:
        """The language pairs trained on: one per corpus, or (src_lang, tgt_lang)."""
        if self.corpora:
            return tuple((c.source, c.target) for c in self.corpora)
        return ((self.src_lang, self.tgt_lang),)

    def check_given(self, given: dict, prefix: str = "data.") -> None:
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
    # the output layer's products when it and the loss go in slices (training in float32,
    # training/output_loss.py): float32 | bfloat16 (float32 sums; the softmax and the loss in
    # float32) | auto: bfloat16 on a CPU with bfloat16 units (AVX512-BF16, AMX), else float32
    output_products: str = "float32"
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
    # each batch in this many pieces on a CPU, a forward and backward each, side by side on the
    # threads: they wait for each other once a step, not at every operator, which keeps most of
    # a second core beside another busy process (training/streams.py). The weights do not
    # depend on how many threads ran the pieces. None: 2 where the model allows (all its
    # dropout heedful's, no attention dropout or batch norm); 1: the whole batch on every thread
    pieces: int | None = None
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
        _choice("train.output_products", self.output_products, ("float32", "bfloat16", "auto"))
        _choice("train.early_stopping_metric", self.early_stopping_metric, ("bleu", "chrf", "loss"))
        if not 0 <= self.seed < 2**63:  # torch.manual_seed takes no more
            raise ConfigError(f"train.seed: must be in [0, 2**63), got {self.seed}")
        # each > 0 where given: the limits and intervals in steps or seconds, then the sizes
        limits = ("max_steps", "max_epochs", "max_time", "eval_every", "log_every", "patience")
        sizes = ("batch_tokens", "lr", "accumulate", "keep_best", "threads", "pieces")
        for name in (*limits, *sizes):
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
        check_cache(self.data.source.feature_cache, self.model)  # a frozen trunk's
        if self.train.snapshot_sentences and self.data.source.feature_cache is not None:
            raise ConfigError(
                "train.snapshot_sentences: with data.source.feature_cache the model trains on "
                "cached cells, not pictures, and there is no picture to trace; set it to 0"
            )
        check_task_keys(self.data, self.model, self.train, DataConfig())  # text or captions
        self._check_one_vocabulary()

    def _check_one_vocabulary(self) -> None:
        """What needs one vocabulary for both sides has it: the pointer-generator adds
        attention on source ids to the same output ids, and shared embeddings read a source
        id and a target id from one table."""
        data, model = self.data, self.model
        given = data.source.tokenizer is not None  # then joint_vocab is not used
        shared = data.source.tokenizer == data.tgt_tokenizer if given else data.joint_vocab
        if shared:
            return
        fix = (
            "name one tokenizer file as both data.source.tokenizer and data.tgt_tokenizer"
            if given
            else "set data.joint_vocab: true"
        )
        if model.arch == "rnn" and model.decoder.copy:
            raise ConfigError(
                "model.decoder.copy needs one vocabulary for both sides, so that a source id "
                f"is the same output id: {fix}"
            )
        text = model.encoder.kind == "text"
        if text and model.arch == "transformer" and model.encoder.share_embeddings:
            raise ConfigError(
                "model.encoder.share_embeddings needs one vocabulary for both sides, so that "
                f"a source id and a target id name the same piece: {fix}"
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
    if isinstance(config, Config):  # the model section lists only the keys its model reads
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
    try:  # today's flat keys and the sections alike (config/flat.py)
        return read_config(data, list(overrides), cls)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}" if path else str(error)) from None


def save_config(config: Any, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False), encoding="utf-8")
