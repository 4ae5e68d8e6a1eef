"""What every model offers search, training and visualization: a small Protocol, its outputs, and
the one memory every encoder hands every decoder.

Attention maps share one layout for both families so that one plotting path serves them all:
an RNN's single attention distribution is simply "layer 1, head 1".

Shapes: B batch, S source positions (tokens or image regions), D their width, L layers, H heads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

Hidden = tuple[torch.Tensor, ...]  # an RNN's state per layer: (h,) GRU, (h, c) LSTM; (layers, B, D)


@dataclass
class Memory:
    """What an encoder hands a decoder, the same for tokens and pixels, so that any decoder
    reads any encoder (annotated-transformer's `memory`; torchtune fuses vision the same way).
    Whatever a decoder derives from it (a Transformer's cross-attention keys and values, an
    RNN attention's prepared keys) is the decoder's own business, made in its init_state.

    states:         (B, S, D)  one vector per source token or image region
    mask:           (B, 1, S)  True where a decoder may attend: the real tokens; every region
    src:            (B, S)     the source ids a copying decoder points at; None for pixels
    final:          an RNN encoder's final state, for an RNN decoder to start from; None: it
                    starts from the mean state, as Show, Attend and Tell does from the mean
                    region (Xu et al. 2015, §3.1.2)
    self_attention: (B, L, H, S, S)  the encoder's own attention, when asked for and it has one
    grid:           (gh, gw)  the grid image regions lie on, row-major (models/vision.py); None
                    for text
    """

    states: torch.Tensor
    mask: torch.Tensor
    src: torch.Tensor | None = None
    final: Hidden | None = None
    self_attention: torch.Tensor | None = None
    grid: tuple[int, int] | None = None

    def index_select(self, index: torch.Tensor) -> Memory:
        """Rows `index` (a search reorders or drops sentences)."""

        def pick(x: torch.Tensor | None, dim: int = 0) -> torch.Tensor | None:
            return None if x is None else x.index_select(dim, index)

        final = None if self.final is None else tuple(pick(h, 1) for h in self.final)
        return Memory(
            pick(self.states),
            pick(self.mask),
            pick(self.src),
            final,
            pick(self.self_attention),
            self.grid,
        )


@dataclass
class AttentionMaps:
    """Per-layer, per-head attention weights of a teacher-forced forward pass.

    cross:   (B, L, H, T, S)  decoder positions over source positions, or None (an RNN
             without attention, whose maps hold only decoder_states)
    encoder: (B, L, H, S, S)  encoder self-attention, or None (RNNs have none)
    decoder: (B, L, H, T, T)  decoder (causal) self-attention, or None

    An RNN also shows what its one attention distribution is made from (None for a Transformer),
    in Luong et al. 2015's notation, N the hidden size:
    scores:         (B, 1, 1, T, S)  score(h_t, h̄_s) before the softmax, laid out as `cross`
    decoder_states: (B, T, N)  h_t, the top decoder layer's state that queries the source
    contexts:       (B, T, N)  c_t = Σ_s a_t(s) h̄_s
    centers:        (B, T)     p_t, the source position local attention centres its window on
                               (Luong et al. 2015, §3.2); None for global attention
    p_gen:          (B, T)     the pointer-generator's probability of generating rather than
                               copying (See et al. 2017); None without model.copy
    """

    cross: torch.Tensor | None
    encoder: torch.Tensor | None = None
    decoder: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    decoder_states: torch.Tensor | None = None
    contexts: torch.Tensor | None = None
    centers: torch.Tensor | None = None
    p_gen: torch.Tensor | None = None


@dataclass
class Seq2SeqOutput:
    logits: torch.Tensor | None  # (B, T, V); None when asked for features instead (project=False)
    attention: AttentionMaps | None = None  # filled when need_weights=True
    # a regulariser training adds to its summed loss (the attention penalty of Show, Attend
    # and Tell, models/encoder_decoder.py), or None
    penalty: torch.Tensor | None = None
    # project=False (a model with `defers_output_layer`): the last hidden states (B, T, D) and
    # the layer that would make them logits, for a loss that never holds all logits at once
    # (output_loss.py)
    features: torch.Tensor | None = None
    output_layer: Any = None


@dataclass
class StepAttention:
    """The attention of one decoding step: cross (B, L, H, S); decoder self (B, L, H, t) or None."""

    cross: torch.Tensor
    decoder: torch.Tensor | None = None


class Seq2SeqModel(Protocol):
    """The decoding contract that greedy and beam search are written against.

    `memory` and `state` are the model's own objects; both offer `index_select(index)` so that a
    search can reorder or drop sentences (beam search keeps the best hypotheses this way); the
    state's takes `same_sources=True` when every row keeps reading the source it read before, so
    that parts computed from the source alone need not be copied.
    """

    pad_id: int

    def source_lengths(self, src: torch.Tensor) -> torch.Tensor:
        """(B,): how long each source is, which the output limit scales with (ratio · length +
        offset); 0 for a picture, which has no length (its limit is the offset alone)."""
        ...

    def forward(
        self, src: torch.Tensor, tgt_in: torch.Tensor, need_weights: bool = False
    ) -> Seq2SeqOutput: ...

    def encode(self, src: torch.Tensor) -> Any: ...

    def init_state(self, memory: Any) -> Any: ...

    def decode_step(
        self, memory: Any, state: Any, last_tokens: torch.Tensor, need_weights: bool = True
    ) -> tuple[torch.Tensor, Any, StepAttention | None]: ...


def step_log_probs(logits: torch.Tensor) -> torch.Tensor:
    """A decoding step's logits (B, 1, V) as log-probabilities (B, V), written over the logits
    when nothing differentiates them.

    Why: the logits are the step's own fresh tensor, read once; a second (B, V) tensor for the
    result is 10 MiB more at every step of beam 5 (320 rows over 8,000 words), which glibc maps
    and faults in afresh. Measured on one thread (Zen 4 EPYC, 2026-12-06): speed the same
    within the machine's noise (0.98x to 1.04x in three A/B runs of beam 5 on 500 Multi30k
    sentences), the profile's log_softmax row 0.20 s to 0.10 s of 4.1, peak memory 1-3 MiB
    lower."""
    logits = logits[:, 0]
    if torch.is_grad_enabled() or torch.is_autocast_enabled(logits.device.type):
        return logits.log_softmax(-1)  # autograd keeps the logits; autocast may change the dtype
    return torch.log_softmax(logits, -1, out=logits)
