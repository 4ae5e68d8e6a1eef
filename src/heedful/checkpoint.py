"""Model directories and training state on disk: safetensors + JSON, atomic writes, no pickle.

A model directory is everything needed to translate raw text:

    config.json          model architecture, vocabulary sizes, languages
    model.safetensors    the weights
    tokenizer.src        source tokenizer (character JSON or SentencePiece model)
    tokenizer.tgt        target tokenizer
    generation.json      default search settings (beam size, length penalty, length limits)

`heedful export` (export.py) writes the same files with `ctranslate2/`, a CTranslate2 model,
in place of model.safetensors.

A training checkpoint is a model directory plus `training_state.safetensors` (optimizer moments,
RNG state) and `training_state.json` (step, data position, scheduler, best scores), so that a
resumed run continues bit for bit. Nothing here ever unpickles: `torch.load` can execute code
hidden in a file, so a planted pickle is refused, never run.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from heedful.config import ModelConfig, from_dict, to_dict

FORMAT = "heedful-model"
FORMAT_VERSION = 1
CTRANSLATE2_DIR = "ctranslate2"  # an export's CTranslate2 model (export.py)


class CheckpointError(ValueError):
    """A model directory or checkpoint is missing, incomplete or not in our format."""


@dataclass(frozen=True)
class GenerationConfig:
    num_beams: int = 5
    length_penalty: float = 1.0  # GNMT alpha: ranking by score / ((5 + |Y|) / 6) ** alpha
    max_len_ratio: float = 1.5  # output limit = ratio · source length + offset
    max_len_offset: int = 10
    n_best: int = 1


# ---------------------------------------------------------------------------------------------
# Atomic writes: a crash at any moment leaves either the old file or the new one, never half.
# ---------------------------------------------------------------------------------------------


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_bytes(path, json.dumps(data, indent=2, ensure_ascii=False).encode("utf-8"))


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise CheckpointError(f"{path.parent}: missing {path.name}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: not valid JSON ({error})") from None


def publish_directory(build: Path, final: Path) -> None:
    """Move a fully written directory into place; an existing `final` is replaced."""
    final = Path(final)
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(build, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(build, final)
    _fsync_dir(final.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def staging_directory(final: Path) -> Path:
    """A fresh hidden directory beside `final` to write into before `publish_directory`."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.tmp-"))


# ---------------------------------------------------------------------------------------------
# Model directories
# ---------------------------------------------------------------------------------------------


def write_model_files(
    directory: Path,
    model: nn.Module,
    model_config: ModelConfig,
    src_tokenizer,
    tgt_tokenizer,
    generation: GenerationConfig,
    languages: tuple[str, str],
) -> None:
    """Write the model directory's files into an existing (staging) directory."""
    from safetensors.torch import save_model

    directory = Path(directory)
    save_model(model, str(directory / "model.safetensors"))  # handles tied (shared) weights
    src_tokenizer.save(directory / "tokenizer.src")
    tgt_tokenizer.save(directory / "tokenizer.tgt")
    atomic_write_json(
        directory / "config.json",
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "model": to_dict(model_config),
            "src_vocab_size": len(src_tokenizer),
            "tgt_vocab_size": len(tgt_tokenizer),
            "src_lang": languages[0],
            "tgt_lang": languages[1],
        },
    )
    atomic_write_json(directory / "generation.json", asdict(generation))


def save_model_dir(
    directory: Path,
    model: nn.Module,
    model_config: ModelConfig,
    src_tokenizer,
    tgt_tokenizer,
    generation: GenerationConfig = GenerationConfig(),
    languages: tuple[str, str] = ("src", "tgt"),
) -> Path:
    """Write a complete model directory atomically (staged, then renamed into place)."""
    build = staging_directory(directory)
    try:
        write_model_files(
            build, model, model_config, src_tokenizer, tgt_tokenizer, generation, languages
        )
        publish_directory(build, directory)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    return Path(directory)


@dataclass
class LoadedModel:
    model: nn.Module
    model_config: ModelConfig
    src_tokenizer: Any
    tgt_tokenizer: Any
    generation: GenerationConfig
    src_lang: str
    tgt_lang: str


def read_model_config(directory: Path) -> tuple[dict, ModelConfig]:
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"model directory not found: {directory}")
    meta = _read_json(directory / "config.json")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{directory / 'config.json'}: not a heedful model config")
    return meta, from_dict(ModelConfig, meta["model"], prefix="model.")


def load_weights(model: nn.Module, path: Path) -> None:
    """Load safetensors weights into `model`; anything else (a pickle, say) is refused unread."""
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    if not path.is_file() and (path.parent / CTRANSLATE2_DIR).is_dir():
        raise CheckpointError(
            f"{path.parent} is a CTranslate2 export without PyTorch weights: translate it "
            "with --engine ctranslate2, or use the model directory it was exported from"
        )
    if not path.is_file():
        raise CheckpointError(f"{path.parent}: missing {path.name}")
    try:
        missing, unexpected = load_model(model, str(path), strict=False)
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(
            f"{path}: not a valid safetensors file ({error}); refusing to load"
        ) from None
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: weights do not match the model (missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]})"
        )


def load_model_dir(directory: str | Path) -> LoadedModel:
    """Read a model directory back: model in eval mode, tokenizers, generation settings."""
    from heedful.data.tokenizers import load_tokenizer
    from heedful.models.build import build_model

    directory = Path(directory)
    meta, model_config = read_model_config(directory)
    model = build_model(model_config, meta["src_vocab_size"], meta["tgt_vocab_size"])
    load_weights(model, directory / "model.safetensors")
    return LoadedModel(
        model.eval(),
        model_config,
        load_tokenizer(directory / "tokenizer.src"),
        load_tokenizer(directory / "tokenizer.tgt"),
        read_generation(directory),
        meta.get("src_lang", "src"),
        meta.get("tgt_lang", "tgt"),
    )


def read_generation(directory: Path) -> GenerationConfig:
    """The default search settings of a model directory (generation.json)."""
    data = _read_json(Path(directory) / "generation.json")
    return from_dict(GenerationConfig, data, prefix="generation.")


# ---------------------------------------------------------------------------------------------
# Training state: optimizer, scheduler, RNG, data position
# ---------------------------------------------------------------------------------------------


def write_training_state(
    directory: Path, optimizer: torch.optim.Optimizer, scheduler, info: dict
) -> None:
    """Optimizer tensors and the torch RNG into safetensors; everything else into JSON."""
    from safetensors.torch import save_file

    state = optimizer.state_dict()
    tensors, scalars = {"rng.torch": torch.get_rng_state()}, {}
    for param_id, param_state in state["state"].items():
        for name, value in param_state.items():
            if torch.is_tensor(value):
                tensors[f"optimizer.{param_id}.{name}"] = value.contiguous()
            else:
                scalars[f"{param_id}.{name}"] = value
    scheduler_state = {k: v for k, v in scheduler.state_dict().items() if k != "lr_lambdas"}
    save_file(tensors, str(directory / "training_state.safetensors"))
    atomic_write_json(
        directory / "training_state.json",
        {
            **info,
            "optimizer_param_groups": state["param_groups"],
            "optimizer_scalars": scalars,
            "scheduler": scheduler_state,
        },
    )


def read_training_state(directory: Path, optimizer: torch.optim.Optimizer, scheduler) -> dict:
    """Restore optimizer, scheduler and torch RNG; returns the JSON info (step, position...)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    directory = Path(directory)
    info = _read_json(directory / "training_state.json")
    try:
        tensors = load_file(str(directory / "training_state.safetensors"))
    except (SafetensorError, OSError) as error:
        raise CheckpointError(
            f"{directory}: unreadable training_state.safetensors ({error})"
        ) from None
    param_states: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("optimizer."):
            _, param_id, name = key.split(".", 2)
            param_states.setdefault(int(param_id), {})[name] = value
    for key, value in info["optimizer_scalars"].items():
        param_id, name = key.split(".", 1)
        param_states.setdefault(int(param_id), {})[name] = value
    optimizer.load_state_dict(
        {"state": param_states, "param_groups": info["optimizer_param_groups"]}
    )
    scheduler.load_state_dict({**scheduler.state_dict(), **info["scheduler"]})
    torch.set_rng_state(tensors["rng.torch"])
    return info


# ---------------------------------------------------------------------------------------------
# Checkpoint averaging
# ---------------------------------------------------------------------------------------------


def average_checkpoints(directories: list[str | Path], output: str | Path) -> Path:
    """Average the weights of model directories of one architecture (Vaswani et al. 2017, §6.1)."""
    if not directories:
        raise CheckpointError("average needs at least one model directory")
    loaded = [load_model_dir(d) for d in directories]
    first = loaded[0]
    for d, other in zip(directories, loaded):
        if other.model_config != first.model_config:
            raise CheckpointError(
                f"{d}: model config differs from {directories[0]}; cannot average"
            )
    with torch.no_grad():
        params = [dict(m.model.named_parameters()) for m in loaded]
        for name, param in params[0].items():
            param.copy_(torch.stack([p[name].double() for p in params]).mean(0).to(param.dtype))
    return save_model_dir(
        Path(output),
        first.model,
        first.model_config,
        first.src_tokenizer,
        first.tgt_tokenizer,
        first.generation,
        (first.src_lang, first.tgt_lang),
    )
