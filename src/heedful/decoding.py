"""Search, written once against the models' encode / init_state / decode_step.

Both searches return, for every sentence, the tokens produced and the attention of each step
(StepAttention layout: cross (L, H, S) per produced token), so that what a picture shows is what
the model actually did for that output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from heedful.models.base import Seq2SeqModel


@dataclass
class Hypothesis:
    """One output sentence.

    tokens: produced ids, without <s> and </s>.
    score: sum of the log-probabilities of the tokens and of </s> (if it was produced).
    cross_attention: (steps, L, H, S) with S the source's real length; one row per produced token
        plus the </s> step when the sentence finished. None when weights were not requested.
    """

    tokens: list[int]
    score: float
    cross_attention: torch.Tensor | None = None
    finished: bool = True


def max_output_lengths(src: torch.Tensor, pad_id: int, ratio: float, offset: int) -> torch.Tensor:
    """Per-sentence output limit, ratio · source length + offset (B,)."""
    return ((src != pad_id).sum(1).float() * ratio + offset).long().clamp(min=1)


@torch.no_grad()
def greedy_search(
    model: Seq2SeqModel,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    max_len_ratio: float = 2.0,
    max_len_offset: int = 10,
    need_weights: bool = True,
) -> list[Hypothesis]:
    """Pick the most probable token at every step until </s> or the length limit."""
    batch = src.size(0)
    limits = max_output_lengths(src, model.pad_id, max_len_ratio, max_len_offset)
    memory = model.encode(src)
    state = model.init_state(memory)
    last = torch.full((batch,), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(batch, dtype=torch.bool, device=src.device)
    lengths = torch.zeros(batch, dtype=torch.long, device=src.device)  # steps taken, </s> included
    scores = torch.zeros(batch, device=src.device)
    tokens, weights = [], []
    for step in range(int(limits.max())):
        log_probs, state, step_weights = model.decode_step(memory, state, last, need_weights)
        best_score, last = log_probs.max(dim=-1)  # (B,)
        active = ~done
        scores += torch.where(active, best_score, torch.zeros_like(best_score))
        lengths += active.long()
        tokens.append(last)
        if step_weights is not None:  # None without weights, or for a model without attention
            weights.append(step_weights.cross)  # (B, L, H, S)
        done |= (last == eos_id) | (step + 1 >= limits)
        if bool(done.all()):
            break
    return _hypotheses(src, model.pad_id, eos_id, tokens, weights, lengths, scores)


def _hypotheses(src, pad_id, eos_id, tokens, weights, lengths, scores) -> list[Hypothesis]:
    produced = torch.stack(tokens, dim=1).tolist()  # (B, steps)
    attention = torch.stack(weights, dim=1) if weights else None  # (B, steps, L, H, S)
    src_lengths = (src != pad_id).sum(1).tolist()
    out = []
    for i, row in enumerate(produced):
        n = int(lengths[i])
        finished = row[n - 1] == eos_id
        cross = None if attention is None else attention[i, :n, ..., : src_lengths[i]].cpu()
        out.append(
            Hypothesis(row[: n - 1] if finished else row[:n], float(scores[i]), cross, finished)
        )
    return out
