"""A generated headline corpus: the summarization recipe's test data, made in milliseconds.

It imitates Gigaword's headline task (Rush et al. 2015): the source is an article's first
sentence, the target a short headline that keeps its names and numbers. The names are made of
random syllables, so most appear only a few times in a corpus: what a softmax over the
vocabulary learns badly and a copy mechanism (See et al. 2017) does not. The public corpus the
recipe is meant for is not shipped; the README says where to get it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path

SYLLABLES = ("ka", "lo", "mi", "ren", "tu", "sa", "vo", "dil", "ne", "gor", "pa", "zu")
TEMPLATES = (  # (first sentence, headline)
    ("police in {city} said on {day} that {n} people were hurt after a fire in the {place} "
     "district of the city .", "{n} hurt in {city} fire"),
    ("the {org} said on {day} that its chairman {name} will step down after {n} years in the "
     "post .", "{org} chairman {name} to step down"),
    ("{team} beat {other} {n} - {m} in the cup on {day} , with {name} scoring twice .",
     "{team} beat {other} {n} - {m}"),
    ("shares in {org} rose {n} percent on {day} after the company reported higher profits .",
     "{org} shares rise {n} percent"),
)  # fmt: skip
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday")
PLACES = ("northern", "southern", "eastern", "western", "central")
# the only headline words that are not in their source
HEADLINE_ONLY = frozenset({"hurt", "to", "rise", "fire"})


def generate_headlines(n: int, seed: int) -> list[tuple[str, str]]:
    """n (first sentence, headline) pairs, lowercased and tokenized as Gigaword's are; the same
    for the same seed."""
    rng = random.Random(seed)

    def name() -> str:
        return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3)))

    pairs = []
    for _ in range(n):
        source, headline = rng.choice(TEMPLATES)
        slots = {
            "city": name(), "name": name(), "org": name(), "team": name(), "other": name(),
            "day": rng.choice(DAYS), "place": rng.choice(PLACES),
            "n": str(rng.randint(2, 40)), "m": str(rng.randint(0, 9)),
        }  # fmt: skip
        pairs.append((source.format(**slots), headline.format(**slots)))
    return pairs


def write_jsonl(path: str | Path, pairs: Iterable[tuple[str, str]]) -> Path:
    """The pairs as JSON Lines with Gigaword's field names, `document` and `summary`."""
    path = Path(path)
    rows = (
        json.dumps({"document": s, "summary": t, "id": str(i)}) for i, (s, t) in enumerate(pairs)
    )
    path.write_text("".join(row + "\n" for row in rows), encoding="utf-8")
    return path
