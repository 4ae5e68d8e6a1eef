"""Translation: what Translator.translate returns for each input, a text's translation or a
picture's caption, with the attention behind it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from heedful.data.sources import as_source


@dataclass
class Translation:
    """One input's output.

    source_tokens / tokens: the positions the model read (a text's pieces; a picture's regions,
    "r1c1" ... row-major) and the pieces it wrote (tokens ends with </s> when the output
    finished), the axis labels of an attention picture.
    attention: cross-attention (len(tokens), L, H, len(source_tokens)), or None.
    alternatives: the other n-best outputs, best first (empty unless n_best > 1).
    grid: a picture's (gh, gw), region s = i·gw + j; None for a text.
    """

    text: str
    source_tokens: list[str]
    tokens: list[str]
    score: float
    attention: torch.Tensor | None = None
    alternatives: list[Translation] | None = None
    grid: tuple[int, int] | None = None

    def weights(self, layer: int = -1) -> torch.Tensor:
        """(T, S): one layer's attention (the last by default), heads averaged."""
        if self.attention is None:
            raise ValueError("no attention: translate with need_weights=True")
        return self.attention[:, layer].mean(dim=1)

    def attention_grid(self, layer: int = -1) -> np.ndarray:
        """(T, gh, gw): a picture's weights laid on its grid, what visualize/overlay.draw_overlay
        draws."""
        if self.grid is None:
            raise ValueError("a text has no grid: attention_grid is an image model's")
        return self.weights(layer).reshape(-1, *self.grid).numpy()


def blank_outputs(inputs: Sequence, source) -> tuple[list, list[int]]:
    """The answers of every engine's translate() with the blank inputs already answered (an
    empty Translation) and the indices of the others, which still need a search. source: a
    Source (data/sources.py), or a text model's source tokenizer."""
    source = as_source(source)
    out: list[Translation | None] = [None] * len(inputs)
    todo = []
    for i, item in enumerate(inputs):
        if source.blank(item):
            out[i] = Translation("", source.labels(item), [], 0.0)
        else:
            todo.append(i)
    return out, todo
