"""One model, several directions (Johnson et al. 2017): target-language tokens on the source side.

A multilingual model reads `<2de> the source` and writes German; `<2fr> the source`, French.
The token is one symbol of the source vocabulary (tokenizers.split_leading), added to every
training pair's source from its corpus's pair (data.corpora) and to every text translated by
whoever names a target: `Translator.translate(target=...)`, `heedful translate --target`, the
server's router. A model directory records the pairs it was trained on (`pairs` in config.json,
read by model_pairs); one without them is a one-pair model, as every model was before, that
reads no token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from heedful.config.corpora import SPLIT_KEYS, check_language, target_token
from heedful.config.file import ConfigError
from heedful.data.corpus import CorpusError, iter_split, split_source
from heedful.data.tokenizers import TARGET_TOKEN

LanguagePairs = tuple[tuple[str, str], ...]


class LanguageError(ValueError):
    """A language, or pair, that a model (or a server) does not translate; the message names
    the pairs it does."""


def pairs_text(pairs: LanguagePairs) -> str:
    """en→de, en→fr"""
    return ", ".join(f"{src}→{tgt}" for src, tgt in pairs)


class Tagged(str):
    """A text after the target token heedful put before it (tagged): the one kind of text
    whose leading <2xx> Translator.translate passes as it is, with no target named (the
    server's, the CLI's). A user's text that starts with "<2de>" is a plain str: tagged like
    any other, so the model reads <2de> as text, never as the target (issue 26)."""

    __slots__ = ()


def tagged(texts: Sequence[str], target: str) -> list[str]:
    """Each text after the target token and a space; a blank text stays blank (it is
    answered without a search, and a corpus drops it)."""
    token = target_token(target)
    return [Tagged(f"{token} {text}") if text.strip() else text for text in texts]


def read_corpus(data, index: int, split: str) -> list[tuple[str, str]]:
    """The (source, target) pairs of data.corpora[index]'s split, each source tagged with the
    corpus's target token, read as strictly as one corpus is (corpus.iter_split), every error
    naming data.corpora[index] and its key; data.valid_max_sentences counts per corpus. A
    source that already starts with a target token is an error: the model would read two, or
    the one the file wrote instead of its pair's; so is a target (a file of the other side, or
    tagged already), which a joint vocabulary would read as the token. Inside a text, <2de>
    is text like any other (tokenizers.split_leading)."""
    corpus, at = data.corpora[index], f"data.corpora[{index}]"
    view = replace(data, corpora=(), **{key: getattr(corpus, key) for key in SPLIT_KEYS})
    pairs = []
    limit = data.valid_max_sentences if split == "valid" else None  # per corpus: all scored
    for number, (src, tgt) in enumerate(iter_split(view, split, at), start=1):
        if limit is not None and number > limit:
            break
        for side, text in (("source", src), ("target", tgt)):
            clash = TARGET_TOKEN.match(text)  # a joint vocabulary reads it on either side
            if clash:
                raise CorpusError(
                    f"{split_source(corpus, split, at)}: pair {number}: the {side} starts "
                    f"with {clash[0]}, a target token; heedful adds <2{corpus.target}> to the "
                    "source itself"
                )
        pairs.append((src, tgt))
    if not pairs:
        raise CorpusError(
            f"{split_source(corpus, split, at)}: empty, no sentence pairs; the "
            f"{split} split needs at least one line"
        )
    sources = tagged([s for s, _ in pairs], corpus.target)
    return [(s, t) for s, (_, t) in zip(sources, pairs)]


def read_corpora(data, split: str) -> list[tuple[str, str]]:
    """Every corpus's pairs of `split`, in the order of data.corpora."""
    return [pair for i in range(len(data.corpora)) for pair in read_corpus(data, i, split)]


def target_tokens(data) -> tuple[str, ...]:
    """The target tokens a config's source vocabulary needs (none for one pair)."""
    return tuple(dict.fromkeys(target_token(c.target) for c in data.corpora))


def check_symbols(tokenizer, pairs: LanguagePairs, where) -> None:
    """Each pair's target token must be one symbol of the source tokenizer: a tokenizer file
    made without them (data.source.tokenizer) would spell <2de> as pieces, a text like any other."""
    tokens = dict.fromkeys(target_token(t) for _, t in pairs)
    missing = [token for token in tokens if token not in getattr(tokenizer, "symbols", ())]
    if missing:
        raise LanguageError(
            f"{where}: has no symbol {missing[0]}; a multilingual model reads each target "
            "token as one symbol: leave out the tokenizer files to train new ones with them"
        )


def model_pairs(meta: dict, path) -> tuple[LanguagePairs, bool]:
    """(the pairs, whether the model reads a target token) of a model directory's config.json
    fields: `pairs` ([[src, tgt], ...]) for a multilingual model; else src_lang → tgt_lang, as
    directories written before it have, and no token. Wrong fields: ValueError naming them."""
    if "pairs" not in meta:
        return ((meta.get("src_lang", "src"), meta.get("tgt_lang", "tgt")),), False
    listed = meta["pairs"]
    if not isinstance(listed, list) or not listed or len(listed) > 10_000:
        raise ValueError(f"{path}: field pairs must be a list of [source, target] language codes")
    pairs = []
    for i, pair in enumerate(listed):
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(f"{path}: field pairs[{i}] must be [source, target], got {pair!r:.40}")
        try:
            for code, side in zip(pair, ("source", "target")):
                check_language(f"pairs[{i}] ({side})", code)
        except ConfigError as error:
            raise ValueError(f"{path}: field {error}") from None
        if tuple(pair) in pairs:
            raise ValueError(f"{path}: field pairs[{i}]: {pair[0]}→{pair[1]} is listed twice")
        pairs.append(tuple(pair))
    return tuple(pairs), True


def source_texts(texts, pairs: LanguagePairs, tokens: bool, target=None, source=None) -> list[str]:
    """The texts as the model reads them to translate `source` → `target`: after the target
    token for a multilingual model (`tokens`), as they are for a one-pair model. A pair the
    model does not have, or no target for a model that writes several, is a LanguageError."""
    targets = [t for s, t in pairs if source in (None, "auto", s)]
    if target is None:
        if tokens and len(set(t for _, t in pairs)) > 1:
            raise LanguageError(
                f"this model writes several languages ({pairs_text(pairs)}): name the target"
            )
        target = pairs[0][1]
    if target not in targets:
        asked = f"{source}→{target}" if source not in (None, "auto") else f"into {target}"
        raise LanguageError(
            f"this model does not translate {asked}; it translates {pairs_text(pairs)}"
        )
    return tagged(texts, target) if tokens else list(texts)
