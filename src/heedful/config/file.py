"""Plain data (parsed YAML) to typed, frozen dataclasses, with the key path in every error.

The machinery under config/__init__.py: it knows dataclasses and type hints, not which settings
exist.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from typing import Any

import yaml


class ConfigError(ValueError):
    """A config key is unknown, has the wrong type or an invalid value; the message names it."""


def check_choice(key: str, value: str, options: tuple[str, ...]) -> None:
    if value not in options:
        raise ConfigError(f"{key}: {value!r} is not one of {', '.join(options)}")


def check_positive(key: str, value: float | None, allow_zero: bool = False) -> None:
    """value > 0 (or >= 0); None passes, for the optional limits where None means "no limit"."""
    if value is not None and (value < 0 or (value == 0 and not allow_zero)):
        raise ConfigError(f"{key}: must be {'>= 0' if allow_zero else '> 0'}, got {value}")


def check_within(key: str, value: int, low: int, high: int) -> None:
    """low <= value <= high: a count with a floor and a ceiling."""
    if not low <= value <= high:
        raise ConfigError(f"{key}: must be from {low} to {high}, got {value}")


def check_fraction(key: str, value: float) -> None:
    """value in [0, 1): dropout, label smoothing and Adam's betas all break down at 1."""
    if not 0.0 <= value < 1.0:
        raise ConfigError(f"{key}: must be in [0, 1), got {value}")


def _yaml_boolean(value: bool) -> str:
    """Why a string key got a boolean: YAML 1.1 (PyYAML's) reads the bare words yes/no/on/off
    as true and false, so `src_lang: no`, Norwegian, arrives as False. The word for the
    example is a guess: "no" for false (a language code), "yes" for true."""
    if value:
        return 'got true (YAML reads yes/no/on/off as booleans: quote it, "yes")'
    return 'got false (YAML reads no/yes/on/off as booleans: quote it, "no")'


def _convert(value: Any, hint: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if all(hasattr(option, "KIND") for option in options):  # sections told apart by kind
            return _variant(value, options, key)
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
    if origin is tuple and typing.get_args(hint)[1:] == (Ellipsis,):  # tuple[X, ...]: a list
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__} {value!r:.40}")
        item = typing.get_args(hint)[0]
        return tuple(_convert(v, item, f"{key}[{i}]") for i, v in enumerate(value))
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
    if hint is str and isinstance(value, bool):
        raise ConfigError(f"{key}: expected str, {_yaml_boolean(value)}")
    if hint in (int, float, str) and (not isinstance(value, hint) or isinstance(value, bool)):
        raise ConfigError(f"{key}: expected {hint.__name__}, got {type(value).__name__} {value!r}")
    return value


def _kind_matches(pattern: str, kind: str) -> bool:
    """`kind` is `pattern`, or, for a pattern ending in `:<name>`, starts with what precedes
    the name (torchvision:<name> matches torchvision:resnet18)."""
    if pattern.endswith(":<name>"):
        return kind.startswith(pattern.removesuffix("<name>"))
    return kind == pattern


def _variant(value: Any, options: tuple, key: str) -> Any:
    """A mapping whose `kind` picks one of several dataclasses, each with a class attribute
    KIND (model.encoder: text, cnn, vit, torchvision:<name>); no kind: the first. A key that
    only another kind reads is an error naming who reads it, unless it holds its default
    there (a config switched to another kind with --set may still list the first one's)."""
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
    kind = value.get("kind", options[0].KIND)
    if not isinstance(kind, str):
        raise ConfigError(f"{key}.kind: expected str, got {type(kind).__name__} {kind!r:.40}")
    chosen = next((option for option in options if _kind_matches(option.KIND, kind)), None)
    if chosen is None:
        kinds = ", ".join(option.KIND for option in options)
        raise ConfigError(f"{key}.kind: {kind!r:.60} is not one of {kinds}")
    own = {f.name for f in dataclasses.fields(chosen)}
    absent = getattr(chosen, "ABSENT", {})  # the kind may say why it has no such key
    kept = {}
    for name, given in sorted(value.items(), key=lambda item: item[0] not in absent):
        readers = [option for option in options if name in _defaults(option)]
        if name in own or not readers:  # not anyone's: from_dict names it as unknown
            kept[name] = given
        elif any(_defaults(option)[name] != given for option in readers):
            why = absent.get(name)
            who = " / ".join(option.KIND for option in readers)
            raise ConfigError(
                f"{key}.{name}: {f'{why}; ' if why else ''}only {key}.kind {who} uses it, "
                f"this one is {kind}; remove the key"
            )
    return from_dict(chosen, kept, prefix=f"{key}.")


def _defaults(cls: type) -> dict:
    """{field: its default} of a dataclass (the fields with one)."""
    return {
        f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING
    }


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
        config.check_given(data, prefix)
    return config


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads 1e-3 (no dot) as a string; users, and YAML 1.2, mean a number."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def parse_yaml(text: str) -> Any:
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
            node[leaf] = parse_yaml(raw)
        except yaml.YAMLError as error:
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise ConfigError(
                f"override {item!r}: {path.strip()}: the value {raw!r} is not valid YAML "
                f"({problem}); quote a string, write a list as [a, b]"
            ) from None
    return data
