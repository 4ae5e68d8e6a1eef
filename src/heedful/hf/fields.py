"""config.json and generation_config.json of a Hugging Face directory, checked key by key.

transformers reads these files loosely: a string where a size belongs is a traceback deep in
its dataclasses, an id past the vocabulary loads and fails on every request (bad_words_ids,
forced_bos_token_id index the model's scores), a negative id wraps around to the last token.
Here each key heedful or transformers reads is checked before either uses it, as heedful's
own config.json is (checkpoint.read_model_config): whole numbers are ints (not bools, strings or
floats), numbers are finite, every token id lies in [0, target vocabulary size). Unknown keys
pass (models add their own). What the search needs comes back as one Specials.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heedful.config import MAX_BEAMS
from heedful.io import CheckpointError, read_json

MAX_JSON_BYTES = 1 << 20
MAX_SIZE = 2**31 - 1
SIZE, COUNT, NUMBER, FLAG, TEXT = "size", "count", "number", "flag", "text"
# keys of the five architectures' configs (configuration_marian.py, _bart, _mbart, _m2m_100,
# _t5) and what each must be; None allowed only for those in OPTIONAL
CONFIG_KEYS = {
    **dict.fromkeys(("vocab_size", "d_model", "encoder_layers", "decoder_layers",
                     "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim",
                     "decoder_ffn_dim", "max_position_embeddings", "num_layers", "num_heads",
                     "d_kv", "d_ff", "relative_attention_num_buckets",
                     "relative_attention_max_distance", "decoder_vocab_size",
                     "num_decoder_layers"), SIZE),
    **dict.fromkeys(("dropout", "attention_dropout", "activation_dropout", "init_std",
                     "dropout_rate", "layer_norm_epsilon", "initializer_factor",
                     "encoder_layerdrop", "decoder_layerdrop", "classifier_dropout"), NUMBER),
    **dict.fromkeys(("is_encoder_decoder", "tie_word_embeddings", "scale_embedding",
                     "share_encoder_decoder_embeddings", "use_cache"), FLAG),
    **dict.fromkeys(("activation_function", "feed_forward_proj", "dense_act_fn"), TEXT),
}  # fmt: skip
GENERATION_KEYS = {
    **dict.fromkeys(("num_beams", "max_length", "max_new_tokens", "num_return_sequences"), SIZE),
    **dict.fromkeys(("min_length", "no_repeat_ngram_size", "top_k", "num_beam_groups"), COUNT),
    **dict.fromkeys(("length_penalty", "temperature", "top_p", "repetition_penalty"), NUMBER),
    **dict.fromkeys(("do_sample", "use_cache", "output_attentions"), FLAG),
}  # fmt: skip
OPTIONAL = {"decoder_vocab_size", "num_decoder_layers", "classifier_dropout", *GENERATION_KEYS}
# token ids; eos_token_id and forced_eos_token_id may be lists (generation stops on any)
IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
       "forced_bos_token_id", "forced_eos_token_id", "sep_token_id")  # fmt: skip
ID_LISTS = ("eos_token_id", "forced_eos_token_id")


@dataclass(frozen=True)
class Specials:
    """The model ids the search reads: pad (None: the tokenizer's), the tokens that end a
    translation (the first is what our </s> reads as input), the decoder start, the token
    forced first, the tokens banned one by one (bad_words_ids of length 1), the beam size."""

    pad: int | None
    eos: tuple[int, ...]
    start: int | None
    forced_bos: int | None
    banned: tuple[int, ...]
    num_beams: int


def _whole(value: Any) -> bool:
    return type(value) is int  # bool is a subclass of int: True is not a size


def _check_value(path: Path, key: str, value: Any, kind: str) -> None:
    if value is None and key in OPTIONAL:
        return
    ok = {
        SIZE: _whole(value) and 1 <= value <= MAX_SIZE,
        COUNT: _whole(value) and 0 <= value <= MAX_SIZE,
        NUMBER: type(value) in (int, float) and math.isfinite(value),
        FLAG: type(value) is bool,
        TEXT: isinstance(value, str),
    }[kind]
    if not ok:
        wanted = {
            SIZE: f"a whole number from 1 to {MAX_SIZE}",
            COUNT: f"a whole number from 0 to {MAX_SIZE}",
            NUMBER: "a finite number",
            FLAG: "true or false",
            TEXT: "a string",
        }[kind]
        raise CheckpointError(f"{path}: {key} must be {wanted}, got {value!r}")


def _check_finite(path: Path, value: Any, key: str = "") -> None:
    """Python's json reads NaN and Infinity, which are not JSON; nowhere in these files."""
    if isinstance(value, float) and not math.isfinite(value):
        raise CheckpointError(f"{path}: {key or 'a value'} is {value!r}; not a finite number")
    if isinstance(value, (dict, list)):
        for name, inner in value.items() if isinstance(value, dict) else enumerate(value):
            _check_finite(path, inner, f"{key}.{name}" if key else str(name))


def _ids(path: Path, key: str, value: Any, size: int) -> tuple[int, ...]:
    """The ids under `key` (none for null), each a whole number below `size`."""
    if value is None:
        return ()
    values = value if key in ID_LISTS and isinstance(value, list) and value else [value]
    for i in values:
        if not _whole(i):
            raise CheckpointError(
                f"{path}: {key} must be a token id (a whole number), got {value!r}"
            )
        if not 0 <= i < size:
            name = key.removesuffix("_token_id").replace("_", " ")
            raise CheckpointError(
                f"{path}: {key}: the {name} token id {i} is outside the model's vocabulary of "
                f"{size} (ids 0 to {size - 1})"
            )
    return tuple(dict.fromkeys(values))


def _bad_words(path: Path, value: Any, size: int) -> tuple[int, ...]:
    """bad_words_ids: a list of non-empty lists of ids; the single-token ones (the search bans
    those; longer sequences are not applied, as before)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(w, list) and w for w in value):
        raise CheckpointError(
            f"{path}: bad_words_ids must be a list of lists of token ids, e.g. [[49]], got "
            f"{value!r}"
        )
    for words in value:
        for i in words:
            _ids(path, "bad_words_ids", i, size)
    return tuple(sorted({words[0] for words in value if len(words) == 1}))


def read_checked(path: Path, keys: dict[str, str]) -> dict:
    """A config file as a dict, its keys of `keys` and every value checked (missing: {})."""
    if not path.exists() and not path.is_symlink():
        return {}
    data = read_json(path, MAX_JSON_BYTES)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: must be a JSON object, got {type(data).__name__}")
    _check_finite(path, data)
    for key, kind in keys.items():
        if key in data:
            _check_value(path, key, data[key], kind)
    return data


def _either(first: dict, second: dict, key: str):
    return first.get(key) if first.get(key) is not None else second.get(key)


def target_size(config: dict) -> int:
    """The decoder's vocabulary: Marian's separate_vocabs gives it decoder_vocab_size."""
    return config.get("decoder_vocab_size") or config["vocab_size"]


def check_configs(directory: Path) -> tuple[dict, Specials]:
    """(config.json as a dict, the Specials), every key checked. Generation settings come
    from generation_config.json where there is one, else from config.json, as transformers
    takes them (GenerationConfig.from_pretrained, else from_model_config)."""
    config_path = directory / "config.json"
    config = read_checked(config_path, CONFIG_KEYS)
    if "vocab_size" not in config:
        raise CheckpointError(f"{config_path}: no vocab_size")
    size = target_size(config)
    for key in IDS:
        _ids(config_path, key, config.get(key), size)
    _bad_words(config_path, config.get("bad_words_ids"), size)
    gen_path = directory / "generation_config.json"
    generation = read_checked(gen_path, GENERATION_KEYS)
    if not generation:
        gen_path, generation = config_path, config
    for key in IDS:
        _ids(gen_path, key, generation.get(key), size)
    beams = generation.get("num_beams") or 1
    if beams > MAX_BEAMS:
        raise CheckpointError(f"{gen_path}: num_beams must be from 1 to {MAX_BEAMS}, got {beams}")
    eos = _ids(gen_path, "eos_token_id", generation.get("eos_token_id"), size)
    model_eos = _ids(config_path, "eos_token_id", config.get("eos_token_id"), size)
    eos = eos or model_eos
    if not eos:
        raise CheckpointError(
            f"{config_path}: no eos_token_id; heedful's search needs the token that ends a "
            "translation"
        )
    first = next((i for i in model_eos if i in eos), eos[0])  # config.json's, where it is one
    specials = Specials(
        pad=_either(config, generation, "pad_token_id"),
        eos=(first, *(i for i in eos if i != first)),
        start=_either(generation, config, "decoder_start_token_id"),
        forced_bos=generation.get("forced_bos_token_id"),
        banned=_bad_words(gen_path, generation.get("bad_words_ids"), size),
        num_beams=beams,
    )
    return config, specials
