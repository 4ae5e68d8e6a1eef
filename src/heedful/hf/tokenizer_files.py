"""A Hugging Face directory's tokenizer files, checked before transformers reads them.

transformers trusts them: tokenizer_class "BertTokenizer" in a Marian directory loads a
tokenizer of another model (every translation comes out empty); a vocab.json with a piece at a
negative or fractional id, two pieces at one id, or no </s> loads too, and tokenizer.json with
"model": null is a traceback. Here the class must be one of the model type's own, a vocabulary
file a map of distinct whole-number ids that holds the special tokens tokenizer_config.json
names, and tokenizer.json an object with its "model".
"""

from __future__ import annotations

from pathlib import Path

from heedful.io import CheckpointError, read_json

MAX_TOKENIZER_BYTES = 1 << 30
# the tokenizer classes of each model_type (transformers' tokenization_auto.py)
TOKENIZER_CLASSES = {
    "marian": ("MarianTokenizer",),
    "bart": ("BartTokenizer", "BartTokenizerFast", "RobertaTokenizer", "RobertaTokenizerFast"),
    "mbart": ("MBartTokenizer", "MBartTokenizerFast", "MBart50Tokenizer",
              "MBart50TokenizerFast"),
    "m2m_100": ("M2M100Tokenizer", "NllbTokenizer", "NllbTokenizerFast"),
    "t5": ("T5Tokenizer", "T5TokenizerFast"),
    "pegasus": ("PegasusTokenizer", "PegasusTokenizerFast"),
}  # fmt: skip
# reads tokenizer.json whatever model wrote it: accepted where there is one
GENERIC = ("PreTrainedTokenizerFast", "TokenizersBackend")
# piece -> id: Marian's, M2M100's, BART's slow one; tokens added beyond the vocabulary
VOCABULARIES = ("vocab.json", "target_vocab.json", "added_tokens.json")
# tokenizers whose vocabulary is vocab.json itself: it must hold their special tokens
SPECIALS_IN_VOCAB = ("marian", "m2m_100")
SPECIALS = ("eos_token", "pad_token", "unk_token")


def _read_object(path: Path, max_bytes: int = MAX_TOKENIZER_BYTES) -> dict | None:
    if not path.exists():
        return None
    data = read_json(path, max_bytes)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: must be a JSON object, got {type(data).__name__}")
    return data


def _token(value) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    return value.get("content") if isinstance(value, dict) else value


def _check_class(directory: Path, model_type: str, settings: dict) -> None:
    name = settings.get("tokenizer_class")
    allowed = TOKENIZER_CLASSES[model_type]
    if name is None or name in allowed:
        return
    if name in GENERIC and (directory / "tokenizer.json").exists():
        return
    raise CheckpointError(
        f"{directory / 'tokenizer_config.json'}: tokenizer_class {name!r} is not a "
        f"{model_type} tokenizer (one of {', '.join(allowed)}); a tokenizer of another model "
        "gives it ids it was not trained on"
    )


def _check_vocabulary(path: Path, model_type: str, settings: dict) -> None:
    vocab = _read_object(path)
    if vocab is None:
        return
    if not vocab:
        raise CheckpointError(f"{path}: an empty vocabulary")
    seen: dict[int, str] = {}
    for piece, i in vocab.items():
        if type(i) is not int or i < 0:
            raise CheckpointError(
                f"{path}: the id of {piece!r} must be a whole number from 0, got {i!r}"
            )
        if i in seen:
            raise CheckpointError(f"{path}: {seen[i]!r} and {piece!r} both have the id {i}")
        seen[i] = piece
    if model_type in SPECIALS_IN_VOCAB and path.name != "added_tokens.json":
        for key in SPECIALS:
            token = _token(settings.get(key))
            if isinstance(token, str) and token not in vocab:
                raise CheckpointError(
                    f"{path}: no {token!r}, the {key} of tokenizer_config.json; the tokenizer "
                    "needs its special tokens in the vocabulary"
                )


def check_tokenizer_files(directory: Path, model_type: str) -> None:
    """The tokenizer's files as the module docstring says, or a CheckpointError naming one."""
    settings = _read_object(directory / "tokenizer_config.json") or {}
    _check_class(directory, model_type, settings)
    for key in SPECIALS:
        if key in settings and not isinstance(_token(settings[key]), (str, type(None))):
            raise CheckpointError(
                f"{directory / 'tokenizer_config.json'}: {key} must be a string, got "
                f"{settings[key]!r}"
            )
    path = directory / "tokenizer.json"
    whole = _read_object(path)
    if whole is not None and not isinstance(whole.get("model"), dict):
        raise CheckpointError(
            f"{path}: the key 'model' must be an object (the tokenizer's "
            f"vocabulary and kind), got {whole.get('model')!r}"
        )
    for name in VOCABULARIES:
        _check_vocabulary(directory / name, model_type, settings)
