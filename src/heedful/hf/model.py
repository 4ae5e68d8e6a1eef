"""A Hugging Face encoder-decoder behind heedful's encode / init_state / decode_step.

HFSeq2Seq wraps a transformers model (MarianMTModel, BartForConditionalGeneration, ...) so that
search/'s greedy and beam search, Translator.replay, traces and the server use it as they
use our own Transformer (models/base.py's Protocol). It speaks our ids (vocab.IdMap) and runs the
model's own forward: the numbers are transformers', never a second implementation of them.

Search: `decode_step` feeds one token per row with the model's key/value cache (an
EncoderDecoderCache); HFState.index_select reorders it by beam, as beam search does with ours.
What generate() would also apply, and is applied here, so that the two search the same thing:
the generation config's single-token bad_words_ids (opus-mt bans <pad>) and forced_bos_token_id
(mBART-50 and M2M100 must start with the target language's code), both as transformers'
logits processors do (-inf for the banned tokens; the forced token alone, with log-prob 0).

Shapes: B sentences (R = B·K rows in beam search), S source length, T target length, V our
vocabulary, L layers, H heads, D d_model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig
from heedful.data.tokenizers import PAD_ID
from heedful.hf.vocab import IdMap
from heedful.models.base import AttentionMaps, Seq2SeqOutput, StepAttention


@dataclass(frozen=True)
class Layout:
    """Where an architecture keeps its attention modules (dotted paths in the model), and the
    names of their query, key, value and output projections (each an nn.Linear, D -> H·d_k)."""

    encoder_layers: str
    decoder_layers: str
    self_attn: str  # in each layer
    cross_attn: str  # in each decoder layer
    projections: tuple[str, str, str, str]  # W_Q, W_K, W_V, W_O


_BART_LIKE = Layout(
    "model.encoder.layers",
    "model.decoder.layers",
    "self_attn",
    "encoder_attn",
    ("q_proj", "k_proj", "v_proj", "out_proj"),
)
# modeling_marian.py, _bart.py, _mbart.py, _m2m_100.py, _pegasus.py share this
# structure; modeling_t5.py nests each sublayer in T5Block.layer[i].
LAYOUTS = {
    "marian": _BART_LIKE,
    "bart": _BART_LIKE,
    "mbart": _BART_LIKE,
    "m2m_100": _BART_LIKE,
    "pegasus": _BART_LIKE,
    "t5": Layout(
        "encoder.block",
        "decoder.block",
        "layer.0.SelfAttention",
        "layer.1.EncDecAttention",
        ("q", "k", "v", "o"),
    ),
}


def model_config(model_type: str, config) -> ModelConfig:
    """The sizes heedful's traces and server read (model_info, limits), as a ModelConfig.

    Marian and BART are post-norm with a finite position table (learned, or Marian's fixed
    sinusoids), mBART, Pegasus and M2M100 pre-norm; M2M100's sinusoids and T5's relative
    position buckets have no length limit.
    """
    if model_type == "t5":
        return ModelConfig(
            # the attention's width, H · d_kv: T5 v1.1 and FLAN-T5 small have d_model 512 and
            # 6 heads of 64 (which ModelConfig, dividing d_model among the heads, would refuse)
            d_model=config.num_heads * config.d_kv,
            num_heads=config.num_heads,
            encoder=TextEncoderConfig(layers=config.num_layers),
            decoder=DecoderConfig(layers=config.num_decoder_layers or config.num_layers),
            d_ff=config.d_ff,
            norm="pre",
            positional="sinusoidal",
            dropout=0.0,
        )
    finite = model_type != "m2m_100"
    return ModelConfig(
        d_model=config.d_model,
        num_heads=config.encoder_attention_heads,
        encoder=TextEncoderConfig(layers=config.encoder_layers),
        decoder=DecoderConfig(layers=config.decoder_layers),
        d_ff=config.encoder_ffn_dim,
        norm="pre" if model_type in ("mbart", "m2m_100", "pegasus") else "post",
        positional="learned" if finite else "sinusoidal",
        max_positions=config.max_position_embeddings,
        dropout=0.0,
    )


@dataclass
class HFMemory:
    hidden: torch.Tensor  # (B, S, D) the encoder's output
    mask: torch.Tensor  # (B, S) True where a real token is

    def index_select(self, index: torch.Tensor) -> HFMemory:
        return HFMemory(self.hidden.index_select(0, index), self.mask.index_select(0, index))


@dataclass
class HFState:
    """The model's key/value cache (None before the first step) and the steps taken."""

    cache: object | None
    step: int = 0

    def index_select(self, index: torch.Tensor, same_sources: bool = False) -> HFState:
        """Rows follow `index`. transformers' caches reorder in place; the state this came
        from is not used again by the search. With same_sources every row keeps reading its
        sentence's source, whose cross-attention keys and values are the same on every row
        of that sentence, so they stay."""
        if self.cache is not None:
            target = self.cache.self_attention_cache if same_sources else self.cache
            target.reorder_cache(index)
        return HFState(self.cache, self.step)


class HFSeq2Seq(nn.Module):
    """A transformers encoder-decoder offering encode / init_state / decode_step in our ids."""

    pad_id = PAD_ID

    def __init__(
        self, hf_model, model_type: str, ids: IdMap, forced_bos=None, banned=(), src_ids=None
    ):
        super().__init__()
        self.hf, self.model_type, self.ids = hf_model, model_type, ids
        self.src_ids = ids if src_ids is None else src_ids  # Marian's separate_vocabs: its own
        self.layout = LAYOUTS[model_type]
        self.config = model_config(model_type, hf_model.config)
        self.forced_bos = forced_bos  # the model's id of the token forced first, or None
        self.register_buffer("banned", torch.tensor(sorted(banned), dtype=torch.long), False)

    @property
    def hf_model_type(self) -> str:
        """The transformers model_type: what explain and traces dispatch on."""
        return self.model_type

    def attention_modules(self, kind: str) -> list[nn.Module]:
        """The attention module of every layer: kind "encoder", "decoder" (self) or "cross"."""
        layers = self.layout.encoder_layers if kind == "encoder" else self.layout.decoder_layers
        name = self.layout.cross_attn if kind == "cross" else self.layout.self_attn
        return [layer.get_submodule(name) for layer in self.hf.get_submodule(layers)]

    def source_lengths(self, src: torch.Tensor) -> torch.Tensor:
        return (src != PAD_ID).sum(1)  # (B,)

    def encode(self, src: torch.Tensor) -> HFMemory:
        return self._encode(src, need_weights=False)[0]

    def _encode(self, src: torch.Tensor, need_weights: bool):
        """The memory and, with need_weights, the encoder's self-attention (B, L, H, S, S)."""
        mask = src != PAD_ID  # (B, S)
        out = self.hf.get_encoder()(
            input_ids=self.src_ids.to_model(src),
            attention_mask=mask.long(),
            output_attentions=need_weights,
        )
        weights = torch.stack(out.attentions, 1) if need_weights else None
        return HFMemory(out.last_hidden_state, mask), weights

    def init_state(self, memory: HFMemory) -> HFState:
        return HFState(None)

    def _run(self, memory: HFMemory, tgt_in: torch.Tensor, cache, need_weights: bool, use_cache):
        from transformers.modeling_outputs import BaseModelOutput

        return self.hf(
            encoder_outputs=BaseModelOutput(last_hidden_state=memory.hidden),
            attention_mask=memory.mask.long(),
            decoder_input_ids=self.ids.to_model(tgt_in),
            cache=cache,
            use_cache=use_cache,
            output_attentions=need_weights,
        )

    def decode_step(
        self, memory: HFMemory, state: HFState, last_tokens: torch.Tensor, need_weights=True
    ) -> tuple[torch.Tensor, HFState, StepAttention | None]:
        """One new position: last_tokens (R,) -> log-probabilities (R, V) of the next token."""
        out = self._run(memory, last_tokens.unsqueeze(1), state.cache, need_weights, True)
        log_probs = out.logits[:, -1].float().log_softmax(-1)  # (R, V_model)
        if self.banned.numel():
            log_probs[:, self.banned] = -torch.inf
        if state.step == 0 and self.forced_bos is not None:
            forced = torch.full_like(log_probs, -torch.inf)
            forced[:, self.forced_bos] = 0.0
            log_probs = forced
        weights = None
        if need_weights:
            cross = torch.stack([a[:, :, -1] for a in out.cross_attentions], 1)  # (R, L, H, S)
            decoder = torch.stack([a[:, :, -1] for a in out.decoder_attentions], 1)
            weights = StepAttention(cross, decoder)
        return self.ids.to_ours(log_probs), HFState(out.cache, state.step + 1), weights

    def forward(
        self, src: torch.Tensor, tgt_in: torch.Tensor, need_weights: bool = False
    ) -> Seq2SeqOutput:
        """Teacher forcing: src (B, S), tgt_in (B, T) -> log-probabilities (B, T, V) as the
        logits (the model's own distribution: nothing banned or forced), and with need_weights
        every attention map, each (B, L, H, ·, ·), from output_attentions."""
        memory, encoder = self._encode(src, need_weights)
        out = self._run(memory, tgt_in, None, need_weights, False)
        logits = self.ids.to_ours(out.logits.float().log_softmax(-1))  # (B, T, V)
        if not need_weights:
            return Seq2SeqOutput(logits)
        maps = AttentionMaps(
            cross=torch.stack(out.cross_attentions, 1),  # (B, L, H, T, S)
            encoder=encoder,  # (B, L, H, S, S)
            decoder=torch.stack(out.decoder_attentions, 1),  # (B, L, H, T, T)
        )
        return Seq2SeqOutput(logits, maps)
