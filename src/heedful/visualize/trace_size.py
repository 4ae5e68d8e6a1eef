"""How large a trace will be, before it is built: the server refuses answers it cannot send.

Shapes: S source tokens, T output tokens (</s> included), L layers, H heads, N RNN hidden size.
"""

from __future__ import annotations

from heedful.config import ModelConfig
from heedful.visualize.internals import INTERNALS_MAX_NUMBERS, internals_size

TOP_K = 5  # candidates per step in a trace (build_trace's default)
# Bytes a number takes in a trace's JSON, with DECIMALS decimals and a comma: a weight or a
# probability is in [0, 1] ("0.12345,"); h_t and c_t of tanh-bounded RNNs in (-1, 1)
# ("-0.12345,"); a score before the softmax is unbounded, and real ones stay under 1000 in
# magnitude ("-123.45678,").
_WEIGHT_BYTES, _STATE_BYTES, _SCORE_BYTES = 8, 9, 11


def estimated_json_bytes(
    config: ModelConfig, source_length: int, output_length: int, n_best: int
) -> int:
    """An upper estimate of the JSON size of a trace of `n_best` hypotheses, from the model's
    shape: S = source_length tokens and at most T = output_length (</s> included) each."""
    s, t = source_length, output_length
    if config.arch == "transformer":
        heads = config.num_heads
        per_output = config.decoder.layers * heads * (t * s + t * t)  # cross + decoder self
        per_output *= _WEIGHT_BYTES
        shared = config.encoder.layers * heads * s * s * _WEIGHT_BYTES  # encoder self-attention
    else:
        per_output = t * s * (_WEIGHT_BYTES + _SCORE_BYTES)  # weights and scores
        per_output += 2 * t * config.hidden_size * _STATE_BYTES  # h_t and c_t
        decoder = config.decoder
        per_output += t * _SCORE_BYTES * (decoder.is_local() + decoder.copy)  # p_t, p_gen
        shared = 0
    per_output += 4 * TOP_K * t * _WEIGHT_BYTES  # a candidate is a token and a probability
    # internals are kept only while within the limit: a trace of shorter outputs may keep them
    numbers = min(internals_size(config, s, [t] * n_best), INTERNALS_MAX_NUMBERS)
    return shared + n_best * per_output + numbers * _SCORE_BYTES
