"""The RNN decoder's attention scores, each declared once: its config name, how explain and the
viewer name it, its formula with the paper it comes from, how its module is made, and its form.

Config, traces, explain, the viewer and the demo all read SCORES; a new score is one entry
here and its module in rnn_attention.py. No torch: config/__init__.py checks `model.attention`
against this table before any model exists, and `Score.build` imports the modules only when a
model is made (start-up time: `heedful --help` and config checks never load torch).

The form is what the viewer and explain recompute the score from, with the parts the module
gives (rnn_attention.ScoreParts, read into a trace's internals):

    "dot"       score = scale · q_t · k_s       (q_t = h_t unless given; k_s = h̄_s or W_a h̄_s)
    "additive"  score = vᵀ tanh(q_t + k_s)      (q_t = W_q h_t, k_s = W_k h̄_s)

N is the hidden size of the decoder's states h_t and the encoder's states h̄_s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FORMS = ("dot", "additive")


@dataclass(frozen=True)
class Score:
    name: str  # model.attention
    label: str  # explain's heading: "Bahdanau (additive) attention, output step 6, ..."
    formula: str  # score(h_t, h̄_s) in Luong et al. 2015's notation
    source: str  # the paper and equation the formula is from
    form: str  # one of FORMS
    # (rnn_attention, N, D) -> the module; D the local window's half-width (local scores only)
    make: Callable[[Any, int, int], Any]
    scaled: bool = False  # dot form × 1/√N
    local: str | None = None  # Luong et al. 2015, §3.2: "m" (p_t = t) or "p" (predicted p_t)

    def build(self, size: int, window: int) -> Any:
        """The module scoring N = size wide states (window: D of a local score)."""
        from heedful.layers import rnn_attention  # torch: only once a model is made

        return self.make(rnn_attention, size, window)

    def scale(self, size: int) -> float:
        """The dot form's factor for N = size wide states."""
        return 1 / math.sqrt(size) if self.scaled else 1.0

    def describe(self, size: int) -> dict:
        """What a trace says of the score (its model.score), for the viewer to recompute it."""
        out = {"form": self.form, "formula": f"score = {self.formula}  ({self.source})"}
        if self.scaled:
            out["scale"] = self.scale(size)
        if self.local == "p":  # a_t(s) × exp(-(s - p_t)² / 2σ²), σ = D / 2 (eq. 10)
            out["gaussian"] = True
        return out


_LOCAL = "h_tᵀ W_a h̄_s for |s − p_t| ≤ D"  # the window: rnn_attention.local_weights
SCORES: dict[str, Score] = {
    s.name: s
    for s in (
        Score(
            name="bahdanau",
            label="Bahdanau (additive)",
            formula="vᵀ tanh(W_q h_t + W_k h̄_s)",
            source="Bahdanau et al. 2014, eq. 6",
            form="additive",
            make=lambda a, n, d: a.AdditiveAttention(n, n, n),
        ),
        Score(
            name="luong-dot",
            label="Luong dot",
            formula="h_tᵀ h̄_s",
            source="Luong et al. 2015, §3.1, dot",
            form="dot",
            make=lambda a, n, d: a.LuongAttention("dot", n, n, n),
        ),
        Score(
            name="luong-general",
            label="Luong general",
            formula="h_tᵀ W_a h̄_s",
            source="Luong et al. 2015, §3.1, general",
            form="dot",
            make=lambda a, n, d: a.LuongAttention("general", n, n, n),
        ),
        Score(
            name="luong-concat",
            label="Luong concat",
            formula="v_aᵀ tanh(W_a [h_t; h̄_s])",
            source="Luong et al. 2015, §3.1, concat",
            form="additive",
            make=lambda a, n, d: a.LuongAttention("concat", n, n, n),
        ),
        Score(
            name="scaled-general",
            label="Scaled general",
            formula="h_tᵀ W_a h̄_s / √N",
            source="Luong et al. 2015, §3.1, general; scaled as Vaswani et al. 2017, §3.2.1",
            form="dot",
            make=lambda a, n, d: a.LuongAttention("general", n, n, n, scaled=True),
            scaled=True,
        ),
        Score(
            name="luong-local-m",
            label="Luong local-m",
            formula=f"{_LOCAL}, p_t = t",
            source="Luong et al. 2015, §3.2, local-m",
            form="dot",
            make=lambda a, n, d: a.LuongLocalAttention("m", n, n, d),
            local="m",
        ),
        Score(
            name="luong-local-p",
            label="Luong local-p",
            formula=f"{_LOCAL}; a_t(s) × exp(−(s − p_t)² / 2σ²), σ = D/2",
            source="Luong et al. 2015, §3.2, local-p, eq. 10",
            form="dot",
            make=lambda a, n, d: a.LuongLocalAttention("p", n, n, d),
            local="p",
        ),
    )
}

RNN_ATTENTIONS = ("none", *SCORES)  # model.attention: "none" is the plain seq2seq
