"""Scores of translations against references."""

from __future__ import annotations

from collections.abc import Sequence


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Fraction of hypotheses identical to their reference (the dates task's metric)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not references:
        raise ValueError("exact_match needs at least one reference")
    return sum(h == r for h, r in zip(hypotheses, references)) / len(references)
