"""The one dispatch from SearchSettings to a search: sampling when sample is set, diverse beam
search for groups of beams (diverse.py), greedy search for one beam and one output
(decoding.py), else beam search (beam.py).

Every engine of torch (Translator, on text or pictures; an ensemble) searches through here, so
a new decoding method is its settings (config/search.py), its search (a module of its own, or
a Choice of beam.py's loop) and its line here.

Shapes: B sentences, S source length (or an image's pixels).
"""

from __future__ import annotations

import torch

from heedful.config.search import SearchSettings
from heedful.data.tokenizers import BOS_ID, EOS_ID
from heedful.models.base import Seq2SeqModel
from heedful.search.beam import beam_search
from heedful.search.decoding import Hypothesis, greedy_search, sample_search
from heedful.search.diverse import diverse_beam_search
from heedful.search.sampling import Sampling


@torch.no_grad()
def search(
    model: Seq2SeqModel,
    src: torch.Tensor,
    settings: SearchSettings,
    prefix: list[list[int]] | None = None,
) -> list[list[Hypothesis]]:
    """The settings.n_best outputs of each sentence of src (B, S), best first.

    prefix: per sentence, target ids each output must start with (prefix.py). With sample,
    max(n_best, num_samples) outputs are drawn per sentence and ranked by score.
    """
    s = settings
    lengths = {"max_len_ratio": s.max_len_ratio, "max_len_offset": s.max_len_offset}
    if s.sample:
        count = max(s.n_best, s.num_samples)
        found = sample_search(
            model, src, BOS_ID, EOS_ID, Sampling.of(s), count, prefix=prefix, **lengths
        )
        return [sorted(hyps, key=lambda h: -h.score) for hyps in found]
    if s.num_beam_groups > 1:
        beams = (s.num_beams, s.num_beam_groups, s.diversity_penalty, s.n_best, s.length_penalty)
        return diverse_beam_search(model, src, BOS_ID, EOS_ID, *beams, prefix=prefix, **lengths)
    if s.num_beams == 1 and s.n_best == 1:
        greedy = greedy_search(model, src, BOS_ID, EOS_ID, prefix=prefix, **lengths)
        return [[h] for h in greedy]
    return beam_search(
        model,
        src,
        BOS_ID,
        EOS_ID,
        s.num_beams,
        s.n_best,
        s.length_penalty,
        prefix=prefix,
        **lengths,
    )
