"""What every task of `heedful train` (experiment.py) reads the same way: the tokenizer files a
config names, and the checkpoint a run resumes from, checked against the config."""

from __future__ import annotations

from pathlib import Path

from heedful.checkpoint.model_dir import CheckpointError, LoadedModel, load_model_dir
from heedful.config import Config, ConfigError


def given_tokenizer(key: str, path: str):
    """The tokenizer file a config key names (data.source.tokenizer, data.tgt_tokenizer)."""
    from heedful.data.tokenizers import load_tokenizer

    try:
        return load_tokenizer(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{key}: cannot load a tokenizer from {path}: {e}") from e


def same_tokenizer(a, b) -> bool:
    """The same pieces, and for SentencePiece the same model bytes."""
    pieces = [a.id_to_token(i) for i in range(len(a))] == [b.id_to_token(i) for i in range(len(b))]
    return pieces and getattr(a, "model_proto", None) == getattr(b, "model_proto", None)


def resumed(latest: Path, config: Config) -> LoadedModel:
    """The checkpoint `latest`, which must hold the model the config describes."""
    loaded = load_model_dir(latest)
    if loaded.model_config != config.model:
        raise CheckpointError(
            f"{latest}: its model config differs from the config given; use --force to start over"
        )
    return loaded
