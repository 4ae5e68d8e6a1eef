"""Tokenizers: text <-> ids behind one small interface. Ids 0-3 are the special tokens."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)


class CharTokenizer:
    """One token per Unicode character; characters unseen in training map to <unk>.

    Character-level models need no trained subword model and make attention easy to read:
    every heatmap row and column is one letter.
    """

    kind = "char"

    def __init__(self, chars: Iterable[str]):
        self.vocab = list(SPECIALS) + [c for c in chars if c not in SPECIALS]
        self.index = {token: i for i, token in enumerate(self.vocab)}

    @classmethod
    def train(cls, texts: Iterable[str], min_count: int = 1) -> CharTokenizer:
        counts = Counter(ch for text in texts for ch in text)
        return cls(sorted(ch for ch, n in counts.items() if n >= min_count))

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """text -> ids, without <s> or </s>"""
        return [self.index.get(ch, UNK_ID) for ch in text]

    def tokens(self, text: str) -> list[str]:
        """The pieces a text is split into, for labelling attention pictures."""
        return list(text)

    def decode(self, ids: Iterable[int]) -> str:
        """ids -> text; stops at </s>, skips the other special tokens."""
        out = []
        for i in ids:
            if i == EOS_ID:
                break
            if i >= len(SPECIALS):
                out.append(self.vocab[i])
        return "".join(out)

    def id_to_token(self, i: int) -> str:
        return self.vocab[i]

    def save(self, path: str | Path) -> None:
        data = {"kind": self.kind, "vocab": self.vocab[len(SPECIALS) :]}
        Path(path).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> CharTokenizer:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if data.get("kind") != cls.kind or not isinstance(data.get("vocab"), list):
            raise ValueError(f"{path}: not a heedful character tokenizer file")
        return cls(data["vocab"])
