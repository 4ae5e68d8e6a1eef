"""Ensemble: several models that decode as one, their log-probabilities averaged at every step.

At step t each member m gives log p_m(y | y_<t, x); the ensemble's distribution is their mean,
renormalized: log p(y) = log_softmax(1/M Σ_m log p_m(y)), the normalized geometric mean (as
OpenNMT-py averages log-probabilities; the softmax keeps scores true log-probabilities, and an
ensemble of one model is that model exactly). The members may be of different families (an RNN
beside a Transformer) as long as they read and write the same vocabularies: Translator checks
that, since ids only mean the same token when the vocabularies are equal.

The ensemble offers the members' encode / init_state / decode_step, so every search runs on it
unchanged; its memory and state hold one per member and reorder them together.

Shapes: B batch, T target length, V target vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from heedful.models.base import Seq2SeqOutput, StepAttention


@dataclass
class EnsembleParts:
    """One memory or decoder state per member; index_select reorders them all alike."""

    parts: tuple

    def index_select(self, index: torch.Tensor, *same_sources: bool) -> EnsembleParts:
        return EnsembleParts(tuple(p.index_select(index, *same_sources) for p in self.parts))


def mean_log_probs(log_probs: list[torch.Tensor]) -> torch.Tensor:
    """[M] of (..., V) -> (..., V): the renormalized mean of the members' log-probabilities."""
    return torch.stack(log_probs).mean(0).log_softmax(-1)


class Ensemble(nn.Module):
    """Members decoding together; `config` is the first member's (what a trace names first)."""

    def __init__(self, members: list[nn.Module]):
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one model")
        pads = {m.pad_id for m in members}
        if len(pads) > 1:
            raise ValueError(f"the ensemble's models pad with different ids: {sorted(pads)}")
        self.members = nn.ModuleList(members)
        self.pad_id = members[0].pad_id
        self.config = members[0].config

    def source_lengths(self, src: torch.Tensor) -> torch.Tensor:
        return self.members[0].source_lengths(src)  # the members read the same source

    def forward(
        self, src: torch.Tensor, tgt_in: torch.Tensor, need_weights: bool = False
    ) -> Seq2SeqOutput:
        """Teacher forcing: logits (B, T, V) are the ensemble's log-probabilities; the attention
        is the first member's (member_outputs gives every member's)."""
        outputs = self.member_outputs(src, tgt_in, need_weights)
        logits = mean_log_probs([o.logits.log_softmax(-1) for o in outputs])
        return Seq2SeqOutput(logits, outputs[0].attention)

    def member_outputs(
        self, src: torch.Tensor, tgt_in: torch.Tensor, need_weights: bool = False
    ) -> list[Seq2SeqOutput]:
        return [m(src, tgt_in, need_weights=need_weights) for m in self.members]

    def encode(self, src: torch.Tensor) -> EnsembleParts:
        return EnsembleParts(tuple(m.encode(src) for m in self.members))

    def init_state(self, memory: EnsembleParts) -> EnsembleParts:
        return EnsembleParts(tuple(m.init_state(p) for m, p in zip(self.members, memory.parts)))

    def decode_step(
        self,
        memory: EnsembleParts,
        state: EnsembleParts,
        last_tokens: torch.Tensor,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, EnsembleParts, StepAttention | None]:
        """The mean log-probabilities (B, V), every member's new state, and the first member's
        step attention."""
        steps = [
            m.decode_step(mem, st, last_tokens, need_weights=need_weights)
            for m, mem, st in zip(self.members, memory.parts, state.parts)
        ]
        log_probs = mean_log_probs([lp for lp, _, _ in steps])
        return log_probs, EnsembleParts(tuple(st for _, st, _ in steps)), steps[0][2]
