"""data.corpora: one model, several directions (Johnson et al. 2017, Google's multilingual NMT).

Each corpus names its language pair and its files; every source is read after its pair's target
token, <2de>, which tells the one model which language to write. Here: the codes, the token and
the checks of the config section; data/languages.py tags texts and reads the pairs a model
directory records. Like config/__init__.py, this imports nothing of heedful but config/file.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from heedful.config.file import ConfigError

# A language code as data.corpora, a model directory and /languages spell it: two or three
# lowercase letters (ISO 639-1/-3), maybe one subtag (pt-BR, zh-Hans). It becomes the target
# token <2de> (Johnson et al. 2017), one symbol of the source vocabulary: so no space or bracket.
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:-[A-Za-z0-9]{2,8})?")


def target_token(code: str) -> str:
    """The token a multilingual model reads first to write language `code`: <2de>."""
    return f"<2{code}>"


def check_language(key: str, value: object) -> None:
    if value == "":
        raise ConfigError(f"{key}: required, a language code (en, de, pt-BR)")
    if not isinstance(value, str) or LANGUAGE_CODE.fullmatch(value) is None:
        raise ConfigError(f"{key}: {value!r:.40} is not a plain language code (en, de, pt-BR)")


SPLIT_KEYS = tuple(f"{s}_{f}" for s in ("train", "valid") for f in ("src", "tgt", "tsv", "jsonl"))


@dataclass(frozen=True)
class CorpusConfig:
    """One corpus of data.corpora: its language pair and its files, keyed as in data."""

    source: str = ""  # the source language code, e.g. en
    target: str = ""  # the target language code, e.g. de: each source is read after <2de>
    train_src: str | None = None
    train_tgt: str | None = None
    train_tsv: str | None = None
    train_jsonl: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    valid_tsv: str | None = None
    valid_jsonl: str | None = None


def check_corpora(data) -> None:
    """data.corpora: plain language codes, each pair once, and no top-level files beside it."""
    if not data.corpora:
        return
    seen: dict[tuple[str, str], int] = {}
    for i, corpus in enumerate(data.corpora):
        for side in ("source", "target"):
            check_language(f"data.corpora[{i}].{side}", getattr(corpus, side))
        pair = (corpus.source, corpus.target)
        if pair in seen:
            first = f"data.corpora[{seen[pair]}]"
            raise ConfigError(
                f"data.corpora[{i}]: the pair {pair[0]}→{pair[1]} is already "
                f"{first}; join their files into one corpus"
            )
        seen[pair] = i
    for key in SPLIT_KEYS:
        if getattr(data, key) is not None:
            raise ConfigError(
                f"data.{key}: not read with data.corpora, whose entries name "
                "their own files; move it into one of them"
            )
    if data.prepared is not None:
        raise ConfigError(
            "data.prepared: heedful prepare does not read data.corpora yet; "
            "leave data.prepared out to read the corpora in memory"
        )
