"""Model directories: everything needed to translate raw text, as safetensors + JSON, no pickle.

    config.json          model architecture, vocabulary sizes, languages
    model.safetensors    the weights
    tokenizer.src        the source side: a text model's tokenizer (character JSON or SentencePiece)
    transform.json         or an image model's ImageTransform (data/sources.py: each kind its slot)
    tokenizer.tgt        target tokenizer
    generation.json      default search settings (beam size, length penalty, length limits)

An image model that an earlier heedful saved has its transform in tokenizer.src (JSON of
"kind": "image"); it loads as it did. `heedful export` (export.py) writes the same files with
`ctranslate2/`, a CTranslate2 model, in place of model.safetensors; a training checkpoint adds
the training state (training/state.py). Directories are written staged and published whole
(io.py), replacing only a model directory (output_dirs.py). The weights are checked and read by
weights.py; nothing ever unpickles (`torch.load` can run code hidden in a file): a planted
pickle is refused.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from heedful.checkpoint.slots import load_side, load_source, reads_images, text_tokenizer
from heedful.checkpoint.status import STATUS_FILE, read_status, write_status
from heedful.checkpoint.weights import check_computed_buffers, check_weights, load_weights
from heedful.config import ConfigError, GenerationConfig, ModelConfig, from_dict, read_model
from heedful.config.flat import kind_of
from heedful.data.languages import check_symbols, model_pairs
from heedful.data.sources import IMAGE_SLOT, TEXT_SLOT, ImageSource, TextSource, as_source
from heedful.data.tokenizers import SPECIALS
from heedful.io import (
    CheckpointError,
    atomic_write_json,
    read_bytes,
    read_json,
    readable_as_created,
    regular_file,
    staged,
)
from heedful.output_dirs import DirectoryKind, check_output, replaceable

FORMAT = "heedful-model"
FORMAT_VERSION = 1
CTRANSLATE2_DIR = "ctranslate2"  # an export's CTranslate2 model (export.py)
# Limits on what a model directory may ask of the machine that loads it, far above any real
# model: each is checked before memory is allocated.
MAX_JSON_BYTES = 1 << 20  # config.json and generation.json (a few hundred bytes when written)
MAX_SIZE = 2**31 - 1  # any size or count in config.json
MODEL_FILES = ("config.json", "model.safetensors", TEXT_SLOT, IMAGE_SLOT, "tokenizer.tgt",
               "generation.json", STATUS_FILE)  # fmt: skip


def heedful_config(directory: Path) -> dict | None:
    """The config.json of a directory heedful wrote (its `format` field says so), or None."""
    try:
        meta = read_json(Path(directory) / "config.json", MAX_JSON_BYTES)
    except CheckpointError:
        return None
    return meta if isinstance(meta, dict) and meta.get("format") == FORMAT else None


def _is_model_directory(directory: Path) -> bool:
    meta = heedful_config(directory)
    return meta is not None and "ctranslate2" not in meta  # an export says how it was made


def _model_file(path: Path) -> bool:
    return path.name in MODEL_FILES and path.is_file() and not path.is_symlink()


# What save_model_dir (and so `heedful average`) may replace: a model directory, but not a
# training checkpoint (its training state is not a model directory's), nor an export
MODEL_DIRECTORY = DirectoryKind("a heedful model directory", _is_model_directory, _model_file)


def write_model_files(
    directory: Path,
    model: nn.Module,
    model_config: ModelConfig,
    source,
    tgt_tokenizer,
    generation: GenerationConfig,
    languages: tuple[str, str],
    pairs: tuple[tuple[str, str], ...] | None = None,
) -> None:
    """Write the model directory's files into an existing (staging) directory. source: a
    Source (data/sources.py), or a text model's source tokenizer; `pairs`, those of a
    multilingual model (data.corpora), which reads a target token first."""
    from safetensors.torch import save_model

    directory, source = Path(directory), as_source(source)
    if any(p.device.type != "cpu" for p in model.parameters()):
        # cuDNN packs an RNN's weights into one buffer, which safetensors takes for tied
        # weights that differ; a CPU copy has one tensor per weight (and ties stay tied)
        model = copy.deepcopy(model).cpu()
    save_model(model, str(directory / "model.safetensors"))  # handles tied (shared) weights
    readable_as_created(directory / "model.safetensors")
    source.save(directory)  # tokenizer.src or transform.json
    tgt_tokenizer.save(directory / "tokenizer.tgt")
    rows = {} if source.vocab_size is None else {"src_vocab_size": source.vocab_size}
    atomic_write_json(
        directory / "config.json",
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "model": model_config.used(),
            **rows,  # an image model's source has no vocabulary
            "tgt_vocab_size": len(tgt_tokenizer),
            "src_lang": languages[0],
            "tgt_lang": languages[1],
            **({"pairs": [list(pair) for pair in pairs]} if pairs else {}),
        },
    )
    atomic_write_json(directory / "generation.json", asdict(generation))


def save_model_dir(
    directory: Path,
    model: nn.Module,
    model_config: ModelConfig,
    source,
    tgt_tokenizer,
    generation: GenerationConfig = GenerationConfig(),
    languages: tuple[str, str] = ("src", "tgt"),
    pairs: tuple[tuple[str, str], ...] | None = None,
    inputs: Iterable[str | Path] = (),
    status: dict | None = None,
) -> Path:
    """Write a complete model directory atomically (staged, then renamed into place).

    source: a Source (data/sources.py) or a text model's source tokenizer. An existing
    `directory` is replaced only if it is a model directory and nothing else, and not one of
    `inputs` (the directories read to make this one) or around or inside them. status: how
    it was trained (checkpoint/status.py's training.json), or None to say nothing.
    """
    with staged(directory, check=replaceable(MODEL_DIRECTORY, inputs)) as build:
        write_model_files(
            build, model, model_config, source, tgt_tokenizer, generation, languages, pairs
        )
        if status is not None:
            write_status(build, status)
    return Path(directory)


@dataclass
class LoadedModel:
    model: nn.Module
    model_config: ModelConfig
    source: TextSource | ImageSource  # data/sources.py: the tokenizer, or the ImageTransform
    tgt_tokenizer: Any
    generation: GenerationConfig
    src_lang: str
    tgt_lang: str
    pairs: tuple[tuple[str, str], ...] = ()  # data/languages.py: every pair it translates
    target_tokens: bool = False  # multilingual: reads <2de> first (Johnson et al. 2017)
    training: dict | None = None  # checkpoint/status.py: how it was trained, when it says

    @property
    def src_tokenizer(self):
        """A text model's source tokenizer; an image model has none (it reads pictures)."""
        return text_tokenizer(self.source)


def source_kind(directory: str | Path) -> str:
    """What a model directory reads, from its config.json alone: "image" for a heedful image
    model, "text" for any other directory, an unreadable one included (loading names it)."""
    meta = heedful_config(Path(directory))
    kind = kind_of(meta.get("model")) if meta is not None else None  # flat or nested
    return "image" if kind not in (None, "text") else "text"


def read_model_config(directory: Path) -> tuple[dict, ModelConfig]:
    """config.json checked field by field: (its fields, the ModelConfig). Builds nothing.

    Every problem is a CheckpointError naming the file and the field.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"model directory not found: {directory}")
    path = directory / "config.json"
    meta = read_json(path, MAX_JSON_BYTES)
    if isinstance(meta, dict) and "model_type" in meta and "format" not in meta:
        raise CheckpointError(
            f"{path}: a Hugging Face model ({meta['model_type']!r}), not a heedful model "
            "directory; heedful.load, translate, attention, explain and serve (torch engine) "
            "open it, this needs a heedful one"
        )
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(
            f"{path}: not a heedful model config, nor a Hugging Face one (it has no model_type)"
        )
    version = meta.get("format_version")
    if type(version) is not int or version != FORMAT_VERSION:
        newer = type(version) is int and version > FORMAT_VERSION
        raise CheckpointError(
            f"{path}: field format_version is {version!r}, but this heedful reads "
            f"format_version {FORMAT_VERSION} only"
            + ("; a newer heedful wrote it: upgrade heedful" if newer else "")
        )
    if not isinstance(meta.get("model"), dict):
        raise CheckpointError(f"{path}: field model must be an object of model settings")
    try:  # the sections, or the flat keys of an earlier heedful (config/flat.py)
        config = read_model(meta["model"])
    except ConfigError as error:
        raise CheckpointError(f"{path}: {error}") from None
    for prefix, part in (("", config), ("encoder.", config.encoder), ("decoder.", config.decoder)):
        for field in fields(part):
            if type(getattr(part, field.name)) is int:
                least = 0 if field.default == 0 else 1  # a CNN's encoder layers (0 by default)
                _check_size(path, f"model.{prefix}{field.name}", getattr(part, field.name), least)
    for name in ("src_vocab_size", "tgt_vocab_size"):  # an image model's source has none
        if name in meta or not (name == "src_vocab_size" and reads_images(config)):
            _check_size(path, name, meta.get(name), len(SPECIALS))
    for name in ("src_lang", "tgt_lang"):
        if not isinstance(meta.get(name, ""), str):
            raise CheckpointError(f"{path}: field {name} must be a string, got {meta[name]!r}")
    try:
        model_pairs(meta, path)
    except ValueError as error:
        raise CheckpointError(str(error)) from None
    return meta, config


def _check_size(path: Path, name: str, value: Any, minimum: int) -> None:
    if type(value) is not int or not minimum <= value <= MAX_SIZE:
        raise CheckpointError(
            f"{path}: field {name} must be a whole number from {minimum} to {MAX_SIZE}, "
            f"got {value!r}"
        )


def _check_weights_file(path: Path) -> None:
    if not os.path.lexists(path) and (path.parent / CTRANSLATE2_DIR).is_dir():
        raise CheckpointError(
            f"{path.parent} is a CTranslate2 export without PyTorch weights: translate it "
            "with --engine ctranslate2, or use the model directory it was exported from"
        )
    regular_file(path)


def load_model_dir(directory: str | Path) -> LoadedModel:
    """Read a model directory back: model in eval mode, its source side, target tokenizer and
    generation settings.

    All is checked before memory is spent: config.json field by field; the model it describes,
    built on the meta device (no memory), against the safetensors header, tensor by tensor;
    the tokenizers against the vocabulary sizes. Then the weights load and are checked finite.
    """
    from heedful.models.build import build_model, build_skeleton

    directory = Path(directory)
    meta, model_config = read_model_config(directory)
    # an image model's source has no vocabulary (an earlier heedful wrote the special tokens'
    # count): build_model reads src_vocab_size for token encoders only
    sizes = (meta.get("src_vocab_size", 0), meta["tgt_vocab_size"])
    try:
        skeleton = build_skeleton(model_config, *sizes)
    except (RuntimeError, ValueError) as error:
        raise CheckpointError(
            f"{directory / 'config.json'}: cannot build the model it describes ({error})"
        ) from None
    _check_weights_file(directory / "model.safetensors")  # an export: say so
    check_weights(skeleton, directory / "model.safetensors")
    check_computed_buffers(skeleton, directory / "config.json")
    source = load_source(directory, meta, model_config)
    tgt_tokenizer = load_side(directory / "tokenizer.tgt", "tgt_vocab_size", meta)
    pairs, tokens = model_pairs(meta, directory / "config.json")
    if source.kind == "text":
        _check_text_source(directory, model_config, source, pairs if tokens else ())
    generation, training = read_generation(directory), read_status(directory)
    model = build_model(model_config, *sizes)
    load_weights(model, directory / "model.safetensors")
    return LoadedModel(
        model.eval(),
        model_config,
        source,
        tgt_tokenizer,
        generation,
        meta.get("src_lang", "src"),
        meta.get("tgt_lang", "tgt"),
        pairs,
        tokens,
        training,
    )


def _check_text_source(directory: Path, config: ModelConfig, source: TextSource, pairs) -> None:
    """The one vocabulary of a copying model and of shared embeddings; a multilingual model's
    target tokens, each one symbol of tokenizer.src."""
    sides = (directory / TEXT_SLOT, directory / "tokenizer.tgt")
    key = None
    if config.decoder.copy:  # the pointer-generator's source ids are its output ids
        key = "model.decoder.copy"
    elif config.arch == "transformer" and config.encoder.share_embeddings:  # one table
        key = "model.encoder.share_embeddings"
    if key and len({path.read_bytes() for path in sides}) > 1:
        raise CheckpointError(
            f"{directory}: {key} needs one vocabulary, but tokenizer.src and tokenizer.tgt differ"
        )
    try:  # a multilingual model reads each target token as one symbol of tokenizer.src
        check_symbols(source.tokenizer, pairs, directory / TEXT_SLOT)
    except ValueError as error:
        raise CheckpointError(str(error)) from None


def read_generation(directory: Path) -> GenerationConfig:
    """The default search settings of a model directory (generation.json), range-checked."""
    path = Path(directory) / "generation.json"
    data = read_json(path, MAX_JSON_BYTES)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: must be an object of search settings")
    try:  # GenerationConfig checks each field's range
        return from_dict(GenerationConfig, data, prefix="generation.")
    except ConfigError as error:
        raise CheckpointError(f"{path}: {error}") from None


# ---------------------------------------------------------------------------------------------
# Checkpoint averaging
# ---------------------------------------------------------------------------------------------


def average_checkpoints(directories: list[str | Path], output: str | Path) -> Path:
    """Average the weights of model directories of one architecture (Vaswani et al. 2017, §6.1)."""
    if not directories:
        raise CheckpointError("average needs at least one model directory")
    check_output(output, MODEL_DIRECTORY, directories)  # before the models load
    loaded = [load_model_dir(d) for d in directories]
    first = loaded[0]
    for d, other in zip(directories, loaded):
        if other.model_config != first.model_config:
            raise CheckpointError(
                f"{d}: model config differs from {directories[0]}; cannot average"
            )
        sides = ("tokenizer.tgt",) + ((TEXT_SLOT,) if first.source.kind == "text" else ())
        for name in sides:  # rows of one config, other tokens
            if read_bytes(Path(d) / name) != read_bytes(Path(directories[0]) / name):
                raise CheckpointError(
                    f"{Path(d) / name}: differs from {directories[0]}'s; cannot average "
                    "models with different vocabularies"
                )
        if first.source.kind == "image" and other.source.transform != first.source.transform:
            raise CheckpointError(
                f"{d}: reads pictures otherwise than {directories[0]} (another image "
                "transform); cannot average"
            )
    with torch.no_grad():
        params = [dict(m.model.named_parameters()) for m in loaded]
        for name, param in params[0].items():
            param.copy_(torch.stack([p[name].double() for p in params]).mean(0).to(param.dtype))
    return save_model_dir(
        Path(output),
        first.model,
        first.model_config,
        first.source,
        first.tgt_tokenizer,
        first.generation,
        (first.src_lang, first.tgt_lang),
        first.pairs if first.target_tokens else None,
        inputs=directories,
    )
