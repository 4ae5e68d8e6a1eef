"""Heads by name, without torch: what a head is called (kind:layer[:head], counted from 1 as a
person types it, from 0 in Head) and the reading of a list of them, for the HTTP fields that
name heads (server/head_field.py) as much as for heads.py, which masks them.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("encoder", "decoder", "cross")  # self-attention of each stack, then cross-attention
MAX_SPEC_CHARS = 10_000  # a --heads list longer than this is not a list of heads


class HeadError(ValueError):
    """A head that is not in the model, or a list of heads that cannot be read."""


@dataclass(frozen=True)
class Head:
    """One head of one attention, from 0; head None is the whole layer."""

    kind: str
    layer: int
    head: int | None = None

    def __str__(self) -> str:  # as a person types it: from 1
        where = f"{self.kind}:{self.layer + 1}"
        return where if self.head is None else f"{where}:{self.head + 1}"

    def record(self) -> dict:
        """As a trace lists it (masked_heads): from 1, head None for the whole layer."""
        head = None if self.head is None else self.head + 1
        return {"kind": self.kind, "layer": self.layer + 1, "head": head}


def parse_heads(spec: str) -> list[Head]:
    """ "encoder:1:2,cross:3" (from 1; a layer alone is all its heads) -> Heads (from 0)."""
    if not isinstance(spec, str) or not spec.strip():
        raise HeadError("give the heads as kind:layer[:head], separated by commas")
    if len(spec) > MAX_SPEC_CHARS:
        raise HeadError(f"the list of heads is {len(spec):,} characters, over {MAX_SPEC_CHARS:,}")
    return [_one_head(item.strip()) for item in spec.split(",")]


def _one_head(item: str) -> Head:
    parts = item.split(":")
    if len(parts) not in (2, 3) or parts[0] not in KINDS:
        raise HeadError(
            f"{item[:60]!r}: a head is kind:layer[:head] with kind one of {', '.join(KINDS)}"
        )
    numbers = []
    for part in parts[1:]:
        if not (part.isascii() and part.isdigit()) or len(part) > 6 or int(part) < 1:
            raise HeadError(
                f"{item[:60]!r}: layers and heads are counted from 1, got {part[:20]!r}"
            )
        numbers.append(int(part) - 1)
    return Head(parts[0], numbers[0], numbers[1] if len(numbers) == 2 else None)
