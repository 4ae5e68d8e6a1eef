"""A run's validation, one shape for every task (experiment.py): the teacher-forced loss of the
references, then greedy search and the task's scores of what it found.

A task supplies the `Validation` (text_task.TextValidation for translation,
captions_task.CaptionValidation for captions, and the demo's tasks): its batches, how its
sources are searched and what its outputs score; the loss, the perplexity, the search settings
and the Translator that searches (text or pictures, as its source side reads) are the same for
all of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Protocol

from heedful.config import Config
from heedful.data.batching import Batch
from heedful.training.loop import sequence_loss


class Validation(Protocol):
    """What a task validates on."""

    sides: tuple  # (its Source or source tokenizer, target tokenizer): what it reads and writes
    # the validation inputs (at least the first few) as build_trace takes them, texts or
    # pictures: what training/snapshots.py traces over training
    inputs: Sequence

    def loss_batches(self) -> Iterable[Batch]:
        """The references as teacher-forced batches, on the CPU."""

    def outputs(self, searcher) -> list[str]:
        """Each validation source's greedy output, in order (`searcher`: a Translator)."""

    def scores(self, outputs: list[str]) -> dict:
        """The task's scores of the outputs; "bleu" among them, early stopping's default."""


def make_validator(valid: Validation, config: Config, device) -> Callable[..., dict]:
    """validate(model) -> {loss, ppl, the task's scores}.

    Search is greedy whatever config.generation.num_beams, as it always was: validation runs
    every eval_every steps, and a beam of k costs about k times as much; the output length
    limits are config.generation's.
    """
    from heedful.inference.translator import Translator

    greedy = replace(config.generation, num_beams=1, n_best=1)

    def validate(model) -> dict:
        total, tokens = 0.0, 0
        for batch in valid.loss_batches():
            batch = batch.to(device)
            logits = model(batch.src, batch.tgt_in).logits  # (B, T, V)
            total += sequence_loss(logits, batch.tgt_out, 0.0, "sum").item()
            tokens += batch.target_tokens()
        searcher = Translator(model, *valid.sides, greedy, device=device)
        loss = total / max(tokens, 1)  # nats per reference token
        scores = valid.scores(valid.outputs(searcher))
        return {"loss": loss, "ppl": math.exp(min(loss, 50)), **scores}

    return validate
