"""The flat keys model and data had before their sections (issue 27, item 6), read once, here.

Until the sections, `model` and `data` were flat: model.attention, model.cnn_blocks,
data.src_tokenizer. Configs, `--set` overrides, run directories (config.yaml) and model
directories (config.json) written that way keep working: where a config is read (load_config,
read_model_config), each flat key moves to its place in the sections, and the rest of heedful
sees only the sections. A key given both ways in one file (or in the overrides) is an error
naming both; an override beats the file whichever way either spells the key. Errors speak the
dialect of what was read: a key given flat is named flat, and a config that gives no section
hears only flat names (config/file.py and the sections' checks name the nested paths).
"""

from __future__ import annotations

import re
from typing import Any

from heedful.config.file import ConfigError, apply_overrides, from_dict
from heedful.config.model import ModelConfig

# flat key: (its part, its name there)
MODEL_KEYS = {
    "encoder": ("encoder", "kind"),
    "encoder_layers": ("encoder", "layers"),
    "bidirectional": ("encoder", "bidirectional"),
    "image_size": ("encoder", "image_size"),
    "patch_size": ("encoder", "patch_size"),
    "cnn_channels": ("encoder", "channels"),
    "cnn_blocks": ("encoder", "blocks"),
    "cnn_coords": ("encoder", "coords"),
    "cnn_layers": ("encoder", "layers"),
    "encoder_weights": ("encoder", "weights"),
    "freeze_encoder": ("encoder", "freeze"),
    "decoder_layers": ("decoder", "layers"),
    "tie_embeddings": ("decoder", "tie_embeddings"),
    "attention": ("decoder", "attention"),
    "local_window": ("decoder", "local_window"),
    "input_feeding": ("decoder", "input_feeding"),
    "copy": ("decoder", "copy"),
    "attention_penalty": ("decoder", "attention_penalty"),
}
DATA_KEYS = {
    "src_tokenizer": ("source", "tokenizer"),
    "images": ("source", "images"),
    "feature_cache": ("source", "feature_cache"),
}
SECTIONS = {"model": MODEL_KEYS, "data": DATA_KEYS}
# model.encoder.layers was two flat keys, each read by some kinds, the other one an error unless
# at its default; and an image model never read bidirectional, which was accepted with any value
ANY = object()
BY_KIND = {
    "encoder_layers": (("text", "vit"), 2),
    "cnn_layers": (("cnn",), 0),
    "bidirectional": (("text",), ANY),
}


def kind_of(model: Any) -> str | None:
    """The encoder kind a model section names, flat (encoder: cnn) or nested (encoder: {kind:
    cnn}); None when it names none."""
    encoder = model.get("encoder") if isinstance(model, dict) else None
    if isinstance(encoder, dict):
        encoder = encoder.get("kind")
    return encoder if isinstance(encoder, str) else None


def _family(kind: str) -> str:
    """text, cnn, vit or torchvision (any other kind: text, for its error comes later)."""
    family = kind.split(":")[0]
    return family if family in ("cnn", "vit", "torchvision") else "text"


def _kept(key: str, value: Any, kind: str) -> bool:
    """Whether flat `key` is read by a model of `kind`; one that is not, holding its default,
    is dropped; otherwise an error."""
    kinds, default = BY_KIND.get(key, ((_family(kind),), None))
    if _family(kind) in kinds:
        return True
    if default is ANY or value == default:
        return False
    raise ConfigError(
        f"model.{key}: only model.encoder.kind {' / '.join(kinds)} uses it, this model is "
        f"model.encoder.kind {kind}; remove the key"
    )


def _nest_section(section: Any, name: str, kind: str) -> tuple[Any, dict]:
    """A section (model or data) with its flat keys moved into their parts, and {nested path:
    flat path} of the keys moved."""
    table = SECTIONS[name]
    if not isinstance(section, dict):
        return section, {}
    parts = {part for part, _ in table.values()}  # model.encoder: a kind, or a section
    flat = [
        k for k, v in section.items() if k in table and not (k in parts and isinstance(v, dict))
    ]
    nested = {k: dict(v) if isinstance(v, dict) else v for k, v in section.items() if k not in flat}
    spelled = {}
    for key in flat:
        value, (part, leaf) = section[key], table[key]
        if not _kept(key, value, kind):
            continue
        target = nested.setdefault(part, {})
        if not isinstance(target, dict):
            raise ConfigError(f"{name}.{part}: expected a mapping, got {type(target).__name__}")
        if leaf in target:
            raise ConfigError(
                f"{name}.{key} and {name}.{part}.{leaf}: one key given twice, flat (as an "
                f"earlier heedful wrote it) and nested; keep {name}.{part}.{leaf}"
            )
        target[leaf] = value
        spelled[f"{name}.{part}.{leaf}"] = f"{name}.{key}"
    return nested, spelled


def _nest(data: Any, kind: str) -> tuple[Any, dict]:
    """A whole config's data with the model and data sections nested (_nest_section)."""
    if not isinstance(data, dict):
        return data, {}
    nested, spelled = dict(data), {}
    for name in SECTIONS:
        if name in data:
            nested[name], moved = _nest_section(data[name], name, kind)
            spelled |= moved
    return nested, spelled


def _part_keys(data: Any) -> set[str]:
    """The paths (model.decoder.attention) of the keys config data gives in the parts."""
    data = data if isinstance(data, dict) else {}
    keys = set()
    for name, table in SECTIONS.items():
        section = data.get(name) if isinstance(data.get(name), dict) else {}
        for part in {part for part, _ in table.values()}:
            if isinstance(section.get(part), dict):
                keys |= {f"{name}.{part}.{key}" for key in section[part]}
    return keys


def _every_spelling(kind: str, names=SECTIONS) -> dict:
    """{nested path: flat path} of every flat key, for errors about a config written flat."""
    spelled = {}
    for name in names:
        for key, (part, leaf) in SECTIONS[name].items():
            if key not in BY_KIND or _family(kind) in BY_KIND[key][0]:
                spelled[f"{name}.{part}.{leaf}"] = f"{name}.{key}"
    return spelled


def respell(message: str, spelled: dict) -> str:
    """`message` with each nested path of `spelled` named as the config spelled it."""
    if not spelled:
        return message
    paths = sorted(spelled, key=len, reverse=True)
    pattern = r"(?<![\w.])(" + "|".join(map(re.escape, paths)) + r")(?!\w|\.\w)"
    return re.sub(pattern, lambda m: spelled[m.group(1)], message)


def _merge(base: Any, over: Any) -> Any:
    """`over` on `base`, mapping by mapping: the overrides on the file."""
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return over
    return {**base, **{k: _merge(base[k], v) if k in base else v for k, v in over.items()}}


def read_config(data: dict, overrides: list[str], cls: type) -> Any:
    """Config data (parsed YAML), flat or nested, with `section.key=value` overrides, flat or
    nested, as a `cls` (Config)."""
    given = apply_overrides({}, overrides)
    kind = kind_of(given.get("model")) or kind_of(data.get("model")) or "text"
    in_parts = _part_keys(data) | _part_keys(given)
    spelled = {} if in_parts else _every_spelling(kind)  # the dialect: flat, or nested
    try:
        data, from_file = _nest(data, kind)
        given, from_overrides = _nest(given, kind)
        spelled |= from_file | from_overrides
        for path in _part_keys(given) - from_overrides.keys():  # an override spelled nested
            spelled.pop(path, None)
        return from_dict(cls, _merge(data, given))
    except ConfigError as error:
        raise ConfigError(respell(str(error), spelled)) from None


def read_model(data: dict) -> ModelConfig:
    """A model section (a model directory's config.json `model`), flat or nested."""
    kind = kind_of(data) or "text"
    spelled = {} if _part_keys({"model": data}) else _every_spelling(kind, ("model",))
    try:
        data, moved = _nest_section(data, "model", kind)
        spelled |= moved
        return from_dict(ModelConfig, data, prefix="model.")
    except ConfigError as error:
        raise ConfigError(respell(str(error), spelled)) from None
