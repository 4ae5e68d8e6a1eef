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

import codecs
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from heedful.config import ConfigError, GenerationConfig, ModelConfig, from_dict
from heedful.data.tokenizers import SPECIALS

FORMAT = "heedful-model"
FORMAT_VERSION = 1
CTRANSLATE2_DIR = "ctranslate2"  # an export's CTranslate2 model (export.py)
# Limits on what a model directory may ask of the machine that loads it, far above any real
# model: each is checked before memory is allocated.
MAX_JSON_BYTES = 1 << 20  # config.json and generation.json (a few hundred bytes when written)
MAX_SIZE = 2**31 - 1  # any size or count in config.json
MAX_COMPUTED_BYTES = 256 << 20  # buffers computed on loading (the sinusoidal table)


class CheckpointError(ValueError):
    """A model directory or checkpoint is missing, incomplete or not in our format."""


# ---------------------------------------------------------------------------------------------
# Atomic writes: a crash at any moment leaves either the old file or the new one, never half.
# ---------------------------------------------------------------------------------------------


def _create_unique(parent: Path, prefix: str, suffix: str, create: Callable[[Path], Any]):
    """(path, create(path)) for a new random name prefix + hex + suffix in `parent`.

    Not tempfile.mkstemp / mkdtemp: those make files 0600 and directories 0700, readable by
    their owner alone, and a model directory must be as readable as any file its user writes
    (a server running as another user reads it). os.open(path, ..., 0o666) and
    os.mkdir(path, 0o777) leave the permissions to the umask, as open() does.
    """
    for _ in range(100):
        path = parent / f"{prefix}{secrets.token_hex(4)}{suffix}"
        try:
            return path, create(path)
        except FileExistsError:  # O_EXCL / mkdir: the name was taken; draw another
            continue
    raise FileExistsError(f"{parent}: no free name {prefix}*{suffix} after 100 tries")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    tmp, fd = _create_unique(
        path.parent, f".{path.name}.", ".tmp", lambda name: os.open(name, flags, 0o666)
    )
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def readable_as_created(path: Path) -> None:
    """Give a file the permissions open() would have: safetensors (0.8) writes files 0600."""
    os.chmod(path, 0o666 & ~_umask())


def _umask() -> int:
    """The process's umask: Linux shows it in /proc; elsewhere os.umask sets it to read it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_bytes(path, json.dumps(data, indent=2, ensure_ascii=False).encode("utf-8"))


def _regular_file(path: Path) -> os.stat_result:
    """stat(path) for a regular file; missing, a directory, a link loop or a pipe are named."""
    try:
        info = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            raise CheckpointError(f"{path}: a symbolic link to nothing") from None
        raise CheckpointError(f"{path.parent}: missing {path.name}") from None
    except OSError as error:  # ELOOP (a symbolic link loop), EACCES, ...
        raise CheckpointError(f"{path}: cannot read it ({error.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise CheckpointError(f"{path}: is a directory; it should be a file")
    if not stat.S_ISREG(info.st_mode):  # a FIFO would block the read forever
        raise CheckpointError(f"{path}: not a regular file")
    return info


def _read_file(path: Path, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file; one over max_bytes is refused before it is read."""
    size = _regular_file(path).st_size
    if max_bytes is not None and size > max_bytes:
        raise CheckpointError(
            f"{path}: {size:,} bytes, more than the {max_bytes:,} a heedful {path.name} may "
            "have; not read"
        )
    try:
        return path.read_bytes()
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read it ({error.strerror})") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """json.loads keeps the last of a repeated key silently; which one was meant is unknown."""
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        twice = next(key for key in keys if keys.count(key) > 1)
        raise ValueError(f"the key {twice!r} appears twice in one object")
    return dict(pairs)


def _read_json(path: Path, max_bytes: int | None = None) -> Any:
    """A UTF-8 JSON file (a UTF-8 byte-order mark is allowed): CheckpointError naming it if not."""
    data = _read_file(path, max_bytes)
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or b"\0" in data:
        raise CheckpointError(f"{path}: UTF-16 or binary, not UTF-8 text; save it as UTF-8")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise CheckpointError(
            f"{path}: not UTF-8 (invalid byte 0x{data[error.start]:02x} at byte offset "
            f"{error.start})"
        ) from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise CheckpointError(f"{path}: not valid JSON (nested too deeply)") from None
    except ValueError as error:  # JSONDecodeError, a repeated key, an integer of 4300+ digits
        raise CheckpointError(f"{path}: not valid JSON ({error})") from None


def publish_directory(build: Path, final: Path) -> None:
    """Move a fully written directory into place; an existing `final` is replaced.

    Replacing takes two renames (final → .NAME.old-PID, build → final), so a kill between them
    leaves no `final`: recover_directories puts the kept old copy back.
    """
    final = Path(final)
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        try:
            os.replace(build, final)
        except BaseException:
            os.replace(old, final)  # an error (not a kill) between the renames: undo the first
            raise
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
    build, _ = _create_unique(
        final.parent, f".{final.name}.tmp-", "", lambda name: os.mkdir(name, 0o777)
    )
    return build


# .NAME.tmp-RANDOM (staging_directory) and .NAME.old-PID (publish_directory)
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-[A-Za-z0-9_]+$")


def recover_directories(
    parent: Path, complete: Callable[[Path], bool], needed: Collection[str] = ()
) -> list[str]:
    """Clean up what killed staging_directory → publish_directory runs left in `parent`.

    A kill between publish_directory's two renames leaves NAME missing, with its previous copy
    as .NAME.old-PID and the new one as .NAME.tmp-*: the old copy is moved back. Without one, a
    NAME in `needed` (a link points there) gets the newest staging directory that `complete`
    accepts; other staging directories were never published, so none is. Every other leftover
    (staging directories of cut-off saves, old copies already replaced) is deleted: each can be
    a whole checkpoint. Only call this while no other process writes into `parent` (hold the
    run's lock). Returns one line per action, for the log.
    """
    found: dict[str, list[tuple[str, Path]]] = {}
    for path in sorted(parent.iterdir()) if parent.is_dir() else ():
        match = _LEFTOVER.match(path.name)
        if match and path.is_dir() and not path.is_symlink():
            found.setdefault(match["name"], []).append((match["kind"], path))
    notes = []
    for name, leftovers in found.items():
        final = parent / name
        if not os.path.lexists(final):
            olds = [p for kind, p in leftovers if kind == "old"]
            builds = [p for kind, p in leftovers if kind == "tmp" and name in needed]
            builds = [p for p in builds if complete(p)]
            kept = _newest(olds) or _newest(builds)
            if kept is not None:
                os.replace(kept, final)
                notes.append(f"restored {final} from {kept.name}, left by an interrupted save")
        for _, path in leftovers:
            if path.exists():
                shutil.rmtree(path)
                notes.append(f"removed {path.name}, left by an interrupted save")
    if notes:
        _fsync_dir(parent)
    return notes


def _newest(paths: list[Path]) -> Path | None:
    return max(paths, key=lambda p: p.stat().st_mtime, default=None)


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
    readable_as_created(directory / "model.safetensors")
    src_tokenizer.save(directory / "tokenizer.src")
    tgt_tokenizer.save(directory / "tokenizer.tgt")
    atomic_write_json(
        directory / "config.json",
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "model": model_config.used(),
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
    """config.json checked field by field: (its fields, the ModelConfig). Builds nothing.

    Every problem is a CheckpointError naming the file and the field.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"model directory not found: {directory}")
    path = directory / "config.json"
    meta = _read_json(path, MAX_JSON_BYTES)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a heedful model config")
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
    try:
        config = from_dict(ModelConfig, meta["model"], prefix="model.")
    except ConfigError as error:
        raise CheckpointError(f"{path}: {error}") from None
    for field in fields(config):
        if type(getattr(config, field.name)) is int:
            _check_size(path, f"model.{field.name}", getattr(config, field.name), 1)
    for name in ("src_vocab_size", "tgt_vocab_size"):
        _check_size(path, name, meta.get(name), len(SPECIALS))
    for name in ("src_lang", "tgt_lang"):
        if not isinstance(meta.get(name, ""), str):
            raise CheckpointError(f"{path}: field {name} must be a string, got {meta[name]!r}")
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
    _regular_file(path)


def check_weights(model: nn.Module, path: Path) -> None:
    """Compare every tensor `model` holds with the safetensors header of `path`: names, shapes
    and dtypes. Reads the header only; given a model built on the meta device, a config.json
    that describes a huge model fails here, naming a tensor, before any memory is allocated.
    """
    from safetensors import SafetensorError, safe_open

    _check_weights_file(path)
    try:
        with safe_open(str(path), framework="pt") as f:  # validates the header and the offsets
            header = {
                name: (f.get_slice(name).get_shape(), f.get_slice(name).get_dtype())
                for name in f.keys()
            }
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(
            f"{path}: not a valid safetensors file ({error}); refusing to load"
        ) from None
    expected = model.state_dict(keep_vars=True)
    aliases: dict[int, list[str]] = {}  # tied weights: save_model writes one name of each
    for name, tensor in expected.items():
        aliases.setdefault(id(tensor), []).append(name)
    for name, tensor in expected.items():  # shapes first: they say which sizes disagree
        want = (list(tensor.shape), _SAFETENSORS_DTYPES.get(tensor.dtype, str(tensor.dtype)))
        if name in header and (list(header[name][0]), header[name][1]) != want:
            shape, dtype = header[name]
            raise CheckpointError(
                f"{path}: tensor {name} is {dtype} {list(shape)} in the file, but config.json "
                f"describes {want[1]} {want[0]}; the weights and config.json do not belong "
                "together"
            )
    missing = [names[0] for names in aliases.values() if not any(n in header for n in names)]
    unexpected = sorted(set(header) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: weights do not match the model config.json describes (missing "
            f"{sorted(missing)[:5]}, unexpected {unexpected[:5]})"
        )


_SAFETENSORS_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def _check_computed_buffers(model: nn.Module, config_path: Path) -> None:
    """Buffers the weights file does not hold (the sinusoidal table) are computed on loading:
    their size comes from config.json alone, so a checked header does not bound it."""
    saved = set(model.state_dict())
    for name, buffer in model.named_buffers():
        size = buffer.numel() * buffer.element_size()
        if name not in saved and size > MAX_COMPUTED_BYTES:
            raise CheckpointError(
                f"{config_path}: the model it describes computes {name} of shape "
                f"{list(buffer.shape)} on loading ({size / 2**30:.1f} GiB, more than "
                f"{MAX_COMPUTED_BYTES >> 20} MiB): check model.max_positions and model.d_model"
            )


def load_weights(model: nn.Module, path: Path) -> None:
    """Load safetensors weights into `model`; anything else (a pickle, say) is refused unread.

    NaN or infinite weights are refused too, naming the tensor: such a model (a diverged
    training run) translates every sentence into garbage without an error.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    _check_weights_file(path)
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
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            count = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(
                f"{path}: tensor {name} holds {count} NaN or infinite values; refusing to load "
                "weights that cannot translate (did training diverge?)"
            )


def load_tokenizers(directory: Path, meta: dict) -> tuple[Any, Any]:
    """tokenizer.src and tokenizer.tgt, each checked against config.json's vocabulary size.

    A tokenizer with more pieces than the model's embedding has rows makes ids the model cannot
    look up; one with fewer spells the model's outputs as the wrong pieces, silently.
    """
    return tuple(
        _load_tokenizer(Path(directory) / f"tokenizer.{side}", f"{side}_vocab_size", meta)
        for side in ("src", "tgt")
    )


def _load_tokenizer(path: Path, size_field: str, meta: dict):
    from heedful.data.tokenizers import load_tokenizer

    _regular_file(path)
    try:
        tokenizer = load_tokenizer(path)
    except (OSError, ValueError) as error:
        message = str(error) if str(path) in str(error) else f"{path}: {error}"
        raise CheckpointError(message) from None
    if len(tokenizer) != meta[size_field]:
        raise CheckpointError(
            f"{path}: the tokenizer has {len(tokenizer)} tokens, but config.json's {size_field} "
            f"(the rows of the model's embedding) is {meta[size_field]}; this tokenizer does not "
            "belong to this model"
        )
    return tokenizer


def load_model_dir(directory: str | Path) -> LoadedModel:
    """Read a model directory back: model in eval mode, tokenizers, generation settings.

    All is checked before memory is spent: config.json field by field; the model it describes,
    built on the meta device (no memory), against the safetensors header, tensor by tensor;
    the tokenizers against the vocabulary sizes. Then the weights load and are checked finite.
    """
    from heedful.models.build import build_model

    directory = Path(directory)
    meta, model_config = read_model_config(directory)
    sizes = (meta["src_vocab_size"], meta["tgt_vocab_size"])
    try:
        with torch.device("meta"):
            skeleton = build_model(model_config, *sizes)
    except (RuntimeError, ValueError) as error:
        raise CheckpointError(
            f"{directory / 'config.json'}: cannot build the model it describes ({error})"
        ) from None
    check_weights(skeleton, directory / "model.safetensors")
    _check_computed_buffers(skeleton, directory / "config.json")
    src_tokenizer, tgt_tokenizer = load_tokenizers(directory, meta)
    generation = read_generation(directory)
    model = build_model(model_config, *sizes)
    load_weights(model, directory / "model.safetensors")
    return LoadedModel(
        model.eval(),
        model_config,
        src_tokenizer,
        tgt_tokenizer,
        generation,
        meta.get("src_lang", "src"),
        meta.get("tgt_lang", "tgt"),
    )


def read_generation(directory: Path) -> GenerationConfig:
    """The default search settings of a model directory (generation.json), range-checked."""
    path = Path(directory) / "generation.json"
    data = _read_json(path, MAX_JSON_BYTES)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: must be an object of search settings")
    try:  # GenerationConfig checks each field's range
        return from_dict(GenerationConfig, data, prefix="generation.")
    except ConfigError as error:
        raise CheckpointError(f"{path}: {error}") from None


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
    readable_as_created(directory / "training_state.safetensors")
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
        for name in ("tokenizer.src", "tokenizer.tgt"):  # rows of one config, other tokens
            if _read_file(Path(d) / name) != _read_file(Path(directories[0]) / name):
                raise CheckpointError(
                    f"{Path(d) / name}: differs from {directories[0]}'s; cannot average "
                    "models with different vocabularies"
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
