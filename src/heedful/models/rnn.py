"""The RNN encoder and attention decoder, with or without attention (Sutskever 2014, Bahdanau
2014, Luong 2015); `EncoderDecoder` joins them, and the decoder reads image regions as well.

Without attention the decoder sees the source only through the encoder's final state: one
fixed-size context vector for a sentence of any length, the bottleneck attention removes. With
attention, one decoder step is (Luong et al. 2015, §3):

    h_t = RNN(embedding(y_{t-1}), h_{t-1})        [+ h̃_{t-1} with input feeding]
    a_t = softmax(score(h_t, h̄_s))  over source positions s
    c_t = Σ_s a_t(s) h̄_s
    h̃_t = tanh(W_c [h_t; c_t])                      the "attentional" vector
    p(y_t) = softmax(W_o h̃_t)

With `copy`, p(y_t) is the pointer-generator's mixture of that softmax and the attention over
the source positions holding y_t (See et al. 2017; models/pointer.py).

Shapes: B batch, S source length, T target length, E embedding size, N hidden size, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from heedful.layers.attention import attend, padding_mask
from heedful.layers.dropout import Dropout
from heedful.layers.products import apply
from heedful.layers.rnn_attention import LuongLocalAttention
from heedful.layers.scores import RNN_ATTENTIONS, SCORES
from heedful.models.base import (
    AttentionMaps,
    Hidden,
    Memory,
    Seq2SeqOutput,
    StepAttention,
    step_log_probs,
)
from heedful.models.pointer import CopyGate, pointer_mixture

RNN_CELLS = {"gru": nn.GRU, "lstm": nn.LSTM}


def make_attention(kind: str, size: int, window: int = 10) -> nn.Module | None:
    """The attention a decoder uses, by the config's name, as scores.py declares it ('none'
    gives the plain seq2seq); window: D of Luong's local attention."""
    if kind == "none":
        return None
    if kind not in SCORES:
        raise ValueError(f"unknown RNN attention {kind!r}; choose one of {RNN_ATTENTIONS}")
    return SCORES[kind].build(size, window)


class RNNEncoder(nn.Module):
    """Embeds the source and runs a (bi)directional RNN; states are N wide either way."""

    def __init__(
        self, vocab_size, embed_size, hidden_size, cell, num_layers, bidirectional, dropout, pad_id
    ):
        super().__init__()
        self.pad_id, self.bidirectional, self.num_layers = pad_id, bidirectional, num_layers
        self.embedding = nn.Embedding(vocab_size, embed_size, padding_idx=pad_id)
        per_direction = hidden_size // 2 if bidirectional else hidden_size
        self.rnn = RNN_CELLS[cell](
            embed_size,
            per_direction,
            num_layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.dropout = Dropout(dropout)

    def source_lengths(self, src: torch.Tensor) -> torch.Tensor:
        return (src != self.pad_id).sum(1)  # (B,)

    def forward(self, src: torch.Tensor, need_weights: bool = False) -> Memory:
        """src (B, S) -> memory: states h̄_s (B, S, N) and the final state per layer (layers, B,
        N), which the decoder starts from; an RNN has no self-attention to return."""
        lengths = self.source_lengths(src).clamp(min=1).cpu()
        packed = pack_padded_sequence(
            self.dropout(self.embedding(src)), lengths, batch_first=True, enforce_sorted=False
        )  # packing keeps padding out of the final state
        out, final = self.rnn(packed)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        final = final if isinstance(final, tuple) else (final,)
        if self.bidirectional:  # (layers*2, B, N/2) -> (layers, B, N): [forward; backward]
            final = tuple(
                h.view(self.num_layers, 2, *h.shape[1:]).transpose(1, 2).flatten(2) for h in final
            )
        return Memory(states, padding_mask(src, self.pad_id), src, final)


@dataclass
class RNNState:
    hidden: Hidden  # decoder RNN state, (layers, B, N) each
    attentional: torch.Tensor | None  # h̃_{t-1} (B, N) with input feeding, else None
    keys: torch.Tensor | None = None  # (B, S, A) the attention's query-independent part, or None
    step: int = 0  # decoder steps taken: local-m attention centres step t on p_t = t

    def index_select(self, index: torch.Tensor, same_sources: bool = False) -> RNNState:
        """Rows `index`; same_sources: as TransformerState's, the keys (made from the source
        alone) stay as they are."""
        fed = None if self.attentional is None else self.attentional[index]
        keys = self.keys if same_sources or self.keys is None else self.keys[index]
        return RNNState(tuple(h[:, index] for h in self.hidden), fed, keys, self.step)


@dataclass
class DecoderSteps:
    """What the decoder computed at each of T steps: the parts of its attention, for pictures.

    states (B, T, N) h_t; and, None without attention: weights (B, T, S) a_t, scores (B, T, S)
    score(h_t, h̄_s) before the softmax, contexts (B, T, N) c_t; centers (B, T) p_t of local
    attention (None for the global ones); p_gen (B, T) of a copying decoder (else None).
    """

    states: torch.Tensor
    weights: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    contexts: torch.Tensor | None = None
    centers: torch.Tensor | None = None
    p_gen: torch.Tensor | None = None

    @staticmethod
    def cat(steps: list[DecoderSteps]) -> DecoderSteps:
        """Join one-step records along T."""

        def join(name: str) -> torch.Tensor | None:
            parts = [getattr(s, name) for s in steps]
            return None if parts[0] is None else torch.cat(parts, 1)

        names = ("states", "weights", "scores", "contexts", "centers", "p_gen")
        return DecoderSteps(*(join(f) for f in names))


class AttentionDecoder(nn.Module):
    """The decoder, over the states of any encoder (words, image regions); `attention=None`
    makes it the plain fixed-context-vector decoder. `forward` for training, `step` for search.
    """

    def __init__(
        self,
        vocab_size,
        embed_size,
        hidden_size,
        cell,
        num_layers,
        attention,
        input_feeding,
        dropout,
        pad_id,
        copy=False,
    ):
        super().__init__()
        self.cell, self.input_feeding = cell, input_feeding and attention is not None
        self.embedding = nn.Embedding(vocab_size, embed_size, padding_idx=pad_id)
        in_size = embed_size + (hidden_size if self.input_feeding else 0)
        self.rnn = RNN_CELLS[cell](
            in_size,
            hidden_size,
            num_layers,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.bridge = nn.Linear(hidden_size, hidden_size)  # s_0 = tanh(W_s h_final), Bahdanau A.2.2
        self.attention = attention
        self.combine = nn.Linear(hidden_size * (2 if attention is not None else 1), hidden_size)
        self.dropout = Dropout(dropout)
        self.generator = nn.Linear(hidden_size, vocab_size)
        # See et al. 2017: p_gen from [c_t; h_t; x_t]; it points with the attention
        self.copy_gate = CopyGate(hidden_size, embed_size) if copy else None
        self.pad_id = pad_id

    def init_state(self, memory: Memory) -> RNNState:
        """s_0 = tanh(W_s h_final) for every layer (and an LSTM's cell), Bahdanau et al. 2014,
        A.2.2, from the encoder's final state or, when it has none (pixels), the mean state
        (Xu et al. 2015, §3.1.2: h_0 = f(1/S Σ_s a_s)); and the attention's keys, once."""
        final = memory.final if memory.final is not None else self._mean_state(memory)
        hidden = tuple(torch.tanh(self.bridge(h)) for h in final)
        fed = hidden[0].new_zeros(hidden[0].shape[1:]) if self.input_feeding else None
        keys = None if self.attention is None else self.attention.prepare_keys(memory.states)
        return RNNState(hidden, fed, keys)

    def _mean_state(self, memory: Memory) -> Hidden:
        """The mean of the states the mask lets through (B, N), as every layer's final h (and
        an LSTM's c): (layers, B, N) each."""
        weights = memory.mask.transpose(1, 2).to(memory.states.dtype)  # (B, S, 1)
        mean = (memory.states * weights).sum(1) / weights.sum(1)  # (B, N)
        mean = mean.expand(self.rnn.num_layers, -1, -1)  # (layers, B, N)
        return (mean, mean) if self.cell == "lstm" else (mean,)

    def attend(
        self, h: torch.Tensor, memory: Memory, keys: torch.Tensor | None, step: int
    ) -> tuple[torch.Tensor, DecoderSteps]:
        """h (B, T, N) of decoder steps step .. step + T - 1 -> attentional h̃ (B, T, N), and
        h_t with its attention's parts; keys: the state's prepared keys"""
        if self.attention is None:  # no attention: h̃_t = tanh(W_c h_t)
            return torch.tanh(self.combine(h)), DecoderSteps(h)
        scores = self.attention.score(h, keys)  # (B, T, S)
        centers = None
        if isinstance(self.attention, LuongLocalAttention):  # it needs to know the step
            positions = torch.arange(step, step + h.size(1), device=h.device).expand(h.shape[:2])
            weights, centers = self.attention.weigh(scores, h, memory.mask, positions)
            context = weights @ memory.states  # (B, T, N)
        else:
            context, weights = attend(scores, memory.states, memory.mask)  # c_t: (B, T, N)
        attentional = torch.tanh(self.combine(torch.cat([h, context], dim=-1)))
        return attentional, DecoderSteps(h, weights, scores, context, centers)

    def run(self, tgt_in: torch.Tensor, state: RNNState, memory: Memory, project=True):
        """tgt_in (B, T) -> logits (B, T, V), new state, DecoderSteps of the T steps.

        project=False: the output layer's input (B, T, N) in place of the logits, for training
        to apply that layer in slices (output_loss.py); the pointer-generator cannot (its
        mixture needs the whole distribution), so the caller asks only without a copy gate."""
        emb = self.dropout(self.embedding(tgt_in))  # (B, T, E)
        hidden = state.hidden if self.cell == "lstm" else state.hidden[0]
        if not self.input_feeding:
            # h_t depends only on earlier words, so the RNN runs over all T at once and the
            # attention of every step is one batched computation.
            h, hidden = self.rnn(emb, hidden)  # (B, T, N)
            attentional, steps = self.attend(h, memory, state.keys, state.step)
            fed = None
        else:  # h̃_{t-1} is an input of step t: a loop over time is unavoidable.
            fed, outputs, each_step = state.attentional, [], []
            for t in range(emb.size(1)):
                step_in = torch.cat([emb[:, t : t + 1], fed.unsqueeze(1)], dim=-1)
                h, hidden = self.rnn(step_in, hidden)  # (B, 1, N)
                a, step = self.attend(h, memory, state.keys, state.step + t)
                fed = a[:, 0]
                outputs.append(a)
                each_step.append(step)
            attentional, steps = torch.cat(outputs, 1), DecoderSteps.cat(each_step)
        hidden = hidden if isinstance(hidden, tuple) else (hidden,)
        state = RNNState(hidden, fed, state.keys, state.step + emb.size(1))
        features = self.dropout(attentional)  # (B, T, N)
        if not project:
            return features, state, steps
        logits = apply(self, "generator", features)  # (B, T, V)
        if self.copy_gate is not None:  # log P(w) of the pointer-generator, not logits
            p_gen = self.copy_gate(steps.contexts, steps.states, emb)  # (B, T, 1)
            logits = pointer_mixture(logits, p_gen, steps.weights, memory.src)
            steps.p_gen = p_gen[..., 0]  # (B, T)
        return logits, state, steps

    def forward(
        self, tgt_in: torch.Tensor, memory: Memory, need_weights=False, project=True
    ) -> Seq2SeqOutput:
        """Teacher forcing: tgt_in (B, T) -> logits (B, T, V); with need_weights, the attention
        as layer 1, head 1 (B, 1, 1, T, S) and its parts h_t, scores, c_t. project=False: the
        states before the output layer and that layer instead of the logits, except for the
        pointer-generator, which returns its log P(w) as logits."""
        project = project or self.copy_gate is not None
        out, _, steps = self.run(tgt_in, self.init_state(memory), memory, project)
        maps = _maps(steps) if need_weights else None
        if not project:
            return Seq2SeqOutput(None, maps, features=out, output_layer=self.generator)
        return Seq2SeqOutput(out, maps)

    def step(
        self, memory: Memory, state: RNNState, last_tokens: torch.Tensor, need_weights=True
    ) -> tuple[torch.Tensor, RNNState, StepAttention | None]:
        """One step: last_tokens (B,) -> log-probabilities (B, V) of the next token."""
        logits, state, steps = self.run(last_tokens.unsqueeze(1), state, memory)
        weights = steps.weights  # (B, 1, S) or None
        step = (
            None
            if weights is None or not need_weights
            else StepAttention(weights[:, None, None, 0])
        )
        return step_log_probs(logits), state, step


def _maps(steps: DecoderSteps) -> AttentionMaps:
    """The attention as layer 1, head 1 (B, 1, 1, T, S) and its parts h_t, scores, c_t.
    Without attention (rnn-none) only h_t: the maps' cross, scores and contexts are None."""
    if steps.weights is None:  # the bottleneck model: nothing attends, h_t still shows
        return AttentionMaps(cross=None, decoder_states=steps.states)
    return AttentionMaps(
        cross=steps.weights[:, None, None],  # (B, 1, 1, T, S)
        scores=steps.scores[:, None, None],  # (B, 1, 1, T, S)
        decoder_states=steps.states,
        contexts=steps.contexts,
        centers=steps.centers,
        p_gen=steps.p_gen,
    )
