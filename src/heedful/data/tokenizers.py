"""Tokenizers: text <-> ids behind one small interface. Ids 0-3 are the special tokens."""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from collections.abc import Iterable
from itertools import chain
from pathlib import Path
from typing import Protocol

from heedful.config.corpora import LANGUAGE_CODE
from heedful.data import sentencepiece_model as spm_model

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)
# A target token (<2de>, Johnson et al. 2017) that starts a source: one symbol, then the text
TARGET_TOKEN = re.compile(rf"<2{LANGUAGE_CODE.pattern}>")


def split_leading(text: str, symbols) -> tuple[str | None, str]:
    """(the target token `text` starts with, if `symbols` holds it; the text after it and
    its one space). Only the start counts: a source names one target, and "<2de>" inside a
    sentence is text like any other."""
    match = TARGET_TOKEN.match(text)
    if match is None or match[0] not in symbols:
        return None, text
    rest = text[match.end() :]
    return match[0], rest[1:] if rest.startswith(" ") else rest


class Tokenizer(Protocol):
    """What the rest of heedful needs from a tokenizer; CharTokenizer and SentencePieceTokenizer."""

    kind: str

    def __len__(self) -> int: ...
    def encode(self, text: str) -> list[int]: ...
    def tokens(self, text: str) -> list[str]: ...
    def decode(self, ids: Iterable[int]) -> str: ...
    def id_to_token(self, i: int) -> str: ...
    def save(self, path: str | Path) -> None: ...


def _content_ids(ids: Iterable[int]) -> list[int]:
    """The ids before the first </s>, other special tokens left out: what decode spells out."""
    out = []
    for i in map(int, ids):
        if i == EOS_ID:
            break
        if i >= len(SPECIALS):
            out.append(i)
    return out


class CharTokenizer:
    """One token per Unicode character; characters unseen in training map to <unk>.

    Character-level models need no trained subword model and make attention easy to read:
    every heatmap row and column is one letter. `symbols`, target tokens such as <2de>, are
    one token each where a text starts with them (split_leading).
    """

    kind = "char"

    def __init__(self, chars: Iterable[str], symbols: Iterable[str] = ()):
        self.symbols = tuple(symbols)
        self.vocab = [*SPECIALS, *self.symbols] + [c for c in chars if c not in SPECIALS]
        self.index = {token: i for i, token in enumerate(self.vocab)}

    @classmethod
    def train(cls, texts: Iterable[str], min_count: int = 1, symbols=()) -> CharTokenizer:
        texts = (split_leading(text, symbols)[1] for text in texts)
        counts = Counter(ch for text in texts for ch in text)
        return cls(sorted(ch for ch, n in counts.items() if n >= min_count), symbols)

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """text -> ids, without <s> or </s>"""
        symbol, text = split_leading(text, self.symbols)
        first = [self.index[symbol]] if symbol else []
        return first + [self.index.get(ch, UNK_ID) for ch in text]

    def tokens(self, text: str) -> list[str]:
        """The pieces a text is split into, for labelling attention pictures."""
        symbol, text = split_leading(text, self.symbols)
        return ([symbol] if symbol else []) + list(text)

    def decode(self, ids: Iterable[int]) -> str:
        """ids -> text; stops at </s>, skips the other special tokens."""
        return "".join(self.vocab[i] for i in _content_ids(ids))

    def id_to_token(self, i: int) -> str:
        return self.vocab[i]

    def save(self, path: str | Path) -> None:
        data = {"kind": self.kind, "vocab": self.vocab[len(SPECIALS) + len(self.symbols) :]}
        data |= {"symbols": list(self.symbols)} if self.symbols else {}  # older files: none
        Path(path).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> CharTokenizer:
        return cls.from_json(json.loads(_read_file(path).decode("utf-8")), path)

    @classmethod
    def from_json(cls, data, path: str | Path) -> CharTokenizer:
        """The tokenizer whose save() wrote `data` (parsed JSON) to `path`, checked: each vocab
        entry one character, none twice (one id each, as export.vocabulary needs too)."""
        valid = isinstance(data, dict) and data.get("kind") == cls.kind
        if not valid or not isinstance(data.get("vocab"), list):
            raise ValueError(f"{path}: not a heedful character tokenizer file")
        vocab = data["vocab"]
        for i, char in enumerate(vocab):
            if not isinstance(char, str) or len(char) != 1:
                raise ValueError(f"{path}: vocab entry {i} is {char!r}, not one character")
        if len(set(vocab)) != len(vocab):
            seen: set[str] = set()
            twice = next(c for c in vocab if c in seen or seen.add(c))
            raise ValueError(f"{path}: the character {twice!r} is in vocab twice")
        symbols = data.get("symbols", [])
        if not isinstance(symbols, list) or len(set(map(str, symbols))) != len(symbols):
            raise ValueError(f"{path}: symbols must be a list of distinct target tokens")
        for i, symbol in enumerate(symbols):
            if not isinstance(symbol, str) or TARGET_TOKEN.fullmatch(symbol) is None:
                raise ValueError(f"{path}: symbols entry {i} is {symbol!r:.40}, not a <2xx> token")
        return cls(vocab, symbols)


class SentencePieceTokenizer:
    """Subword pieces from a SentencePiece model (Kudo & Richardson 2018): unigram or BPE.

    The model lives in memory as its serialized bytes, `model_proto`, and `save` writes exactly
    those bytes: the standard binary .model file, so a model directory is self-contained and the
    file also works with `spm_encode` or `SentencePieceProcessor(model_file=...)`. Text is
    normalised before it is split (NFKC, runs of whitespace made one space, none at either end),
    so decode(encode(x)) == x for text already in that form. Characters the model never saw
    encode to <unk>, which decode leaves out, as CharTokenizer does.
    """

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes):
        processor = spm_model.processor(model_proto)
        if processor is None:
            raise ValueError("not a SentencePiece model")
        special_ids = (
            processor.pad_id(),
            processor.bos_id(),
            processor.eos_id(),
            processor.unk_id(),
        )
        if special_ids != (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
            raise ValueError(
                f"SentencePiece model has pad/bos/eos/unk ids {special_ids}, heedful needs "
                f"{(PAD_ID, BOS_ID, EOS_ID, UNK_ID)}: train it with SentencePieceTokenizer.train"
            )
        self.model_proto = bytes(model_proto)  # as trained and saved
        pieces = (processor.id_to_piece(i) for i in range(len(SPECIALS), len(processor)))
        self.symbols = frozenset(p for p in pieces if TARGET_TOKEN.fullmatch(p))  # <2de>, <2fr>
        # encodes with the symbols as control pieces: a text that holds "<2de>" spells it out
        if self.symbols:
            processor = spm_model.processor(spm_model.control_symbols(model_proto, self.symbols))
        self.processor = processor

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        model_type: str = "unigram",
        character_coverage: float = 1.0,
        input_sentence_size: int = 1_000_000,
        seed: int = 0,
        symbols: Iterable[str] = (),
    ) -> SentencePieceTokenizer:
        """Train a SentencePiece model in memory on `texts`, one sentence each; writes no files.

        vocab_size: every piece counts, the four special tokens included. When the text is too
            small to fill it, this raises ValueError naming the largest size that works, instead
            of training with hard_vocab_limit=False and quietly returning fewer pieces: the
            vocab_size in a config should be the size of the model it trains.
        model_type: "unigram" (Kudo 2018) or "bpe" (Sennrich et al. 2016).
        character_coverage: share of characters the vocabulary must cover; 1.0 keeps every
            character seen, 0.9995 is usual for scripts with thousands of characters.
        input_sentence_size: train on at most this many non-empty sentences (0: all of them).
        seed: chooses that sample. The same texts and arguments give the same model bytes.
        symbols: target tokens (<2de>), each one piece (user_defined_symbols) read where a
            text starts with it; the texts are sampled without them.
        """
        import sentencepiece as spm

        if model_type not in ("unigram", "bpe"):
            raise ValueError(f"model_type must be 'unigram' or 'bpe', not {model_type!r}")
        symbols = list(symbols)
        texts = (split_leading(text, symbols)[1] for text in texts)
        sentences = spm_model.sample(texts, input_sentence_size, seed)
        if not sentences:
            raise ValueError("no non-empty text to train a SentencePiece model on")
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_writer=model,
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=character_coverage,
                pad_id=PAD_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                unk_id=UNK_ID,
                pad_piece=PAD,
                bos_piece=BOS,
                eos_piece=EOS,
                unk_piece=UNK,
                user_defined_symbols=symbols,
                input_sentence_size=0,  # already sampled, reproducibly (see _sample)
                minloglevel=1,  # warnings only: the progress log is hundreds of lines
            )
        except RuntimeError as error:
            raise spm_model.training_error(error, vocab_size, model_type) from None
        return cls(model.getvalue())

    def __len__(self) -> int:
        return self.processor.get_piece_size()

    def encode(self, text: str) -> list[int]:
        """text -> ids, without <s> or </s>; a leading target token is one id (SentencePiece
        alone would give a "▁" piece before it)"""
        symbol, text = split_leading(text, self.symbols)
        first = [self.processor.piece_to_id(symbol)] if symbol else []
        return first + self.processor.encode(text)

    def tokens(self, text: str) -> list[str]:
        """The pieces a text is split into ("▁" marks a word start), for attention pictures."""
        symbol, text = split_leading(text, self.symbols)
        return ([symbol] if symbol else []) + self.processor.encode(text, out_type=str)

    def decode(self, ids: Iterable[int]) -> str:
        """ids -> detokenized text; stops at </s>, skips the other special tokens."""
        return self.processor.decode(_content_ids(ids))

    def id_to_token(self, i: int) -> str:
        return self.processor.id_to_piece(i)

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(self.model_proto)

    @classmethod
    def load(cls, path: str | Path) -> SentencePieceTokenizer:
        try:
            return cls(_read_file(path))
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None


def _read_file(path: str | Path) -> bytes:
    """The bytes of a tokenizer file; a directory is a ValueError that says so, not an
    IsADirectoryError traceback, and a pipe is refused rather than read forever."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a directory, not a tokenizer file")
    if path.exists() and not path.is_file():
        raise ValueError(f"{path}: not a regular file, so not a tokenizer file")
    return path.read_bytes()


def train_tokenizers(
    src_texts: Iterable[str],
    tgt_texts: Iterable[str],
    kind: str,
    vocab_size: int,
    model_type: str = "unigram",
    joint: bool = False,
    character_coverage: float = 1.0,
    sample: int = 1_000_000,
    symbols: Iterable[str] = (),
) -> tuple[Tokenizer, Tokenizer]:
    """Train the (source, target) tokenizers for a corpus.

    kind: "char" or "sentencepiece"; vocab_size, model_type and character_coverage apply to
        SentencePiece only (a character vocabulary is every character seen).
    joint: one tokenizer trained on both sides and returned twice (the same object), as
        needed to tie source and target embeddings or to copy names across; otherwise one per
        side, each trained on its own text only, with vocab_size pieces each.
    sample: SentencePiece trains on at most this many sentences, sampled uniformly from the
        texts, which may then be streams of any length (a character vocabulary reads them all).
    symbols: target tokens (<2de>) the source tokenizer reads as one token each where a source
        starts with one (data.corpora); the joint tokenizer has them too.
    """
    if kind not in ("char", "sentencepiece"):
        raise ValueError(f"tokenizer kind must be 'char' or 'sentencepiece', not {kind!r}")

    def train(texts: Iterable[str], symbols=()) -> Tokenizer:
        if kind == "char":
            return CharTokenizer.train(texts, symbols=symbols)
        return SentencePieceTokenizer.train(
            texts,
            vocab_size,
            model_type,
            character_coverage=character_coverage,
            input_sentence_size=sample,
            symbols=symbols,
        )

    symbols = tuple(symbols)
    if joint:
        tokenizer = train(chain(src_texts, tgt_texts), symbols)
        return tokenizer, tokenizer
    return train(src_texts, symbols), train(tgt_texts)


def load_tokenizer(path: str | Path, other_kinds: dict | None = None) -> Tokenizer:
    """Read a file written by either tokenizer's save(), whichever kind it holds.

    The files describe themselves: a character tokenizer is JSON with "kind": "char", a
    SentencePiece tokenizer is the binary .model file (a protobuf, which never parses as JSON).
    So JSON is tried first and anything else is read as a SentencePiece model. other_kinds:
    {kind: from_json(data, path)} for JSON files of other kinds that sit in a tokenizer's
    place (data/sources.py: an image model's transform), so this module needs none of them.
    """
    data = _read_file(path)
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        pass
    else:
        kind = parsed.get("kind") if isinstance(parsed, dict) else None
        if kind in (other_kinds or {}):
            return other_kinds[kind](parsed, path)
        if kind == "image":
            raise ValueError(f"{path}: an image model's source (kind 'image'), not a tokenizer")
        return CharTokenizer.from_json(parsed, path)
    if spm_model.processor(data) is None:
        raise ValueError(
            f"{path}: not a tokenizer file: neither heedful character-tokenizer JSON "
            "nor a SentencePiece model"
        )
    try:
        return SentencePieceTokenizer(data)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def seen_tokens(tokenizer, text: str) -> list[str]:
    """The labels of `text`'s tokens as the model saw them: a piece outside the vocabulary is
    `<unk>`, with the piece it replaced in parentheses, `<unk> (猫)`."""
    ids, pieces = tokenizer.encode(text), tokenizer.tokens(text)
    if len(ids) != len(pieces):  # the labels must name the positions the model read
        raise ValueError(f"tokenizer gives {len(ids)} ids but {len(pieces)} tokens")
    seen = [tokenizer.id_to_token(i) for i in ids]
    return [f"{s} ({p})" if s == UNK and p != UNK else s for s, p in zip(seen, pieces)]
