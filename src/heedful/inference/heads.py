"""Heads you can switch off: a Transformer's attention heads masked one by one or a layer at a
time, and how much each one matters (Michel et al. 2019, "Are Sixteen Heads Really Better than
One?"; Voita et al. 2019).

Masking head i of a multi-head attention sets its output to zero before W_O:

    MultiHead(Q, K, V) = Concat(ξ_1 head_1, …, ξ_h head_h) W_O,   ξ_i = 0 for a masked head

(Michel et al., eq. 2). The head's weights are still computed (a trace shows them), but nothing
it read reaches the layer's output. `masked` does it for the length of a `with` block, by a hook
in front of W_O, so the model's own code and weights are untouched; `importance` masks each head
alone and measures the change of the reference's loss (teacher-forced, per target token) and
of the BLEU of the model's translations, which `heedful heads` prints and draws.

Heads are named as the viewer and the traces name them: the attention `kind` (encoder,
decoder or cross), its layer and head, counted from 1 in what a person reads or types
("cross:3:2"), from 0 in Head.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from heedful.data.batching import collate
from heedful.data.tokenizers import PAD_ID
from heedful.inference.head_names import (  # noqa: F401 (named here too: their first home)
    KINDS,
    MAX_SPEC_CHARS,
    Head,
    HeadError,
    parse_heads,
)
from heedful.models.transformer import TransformerDecoder, TransformerEncoder


def attention_layers(model: nn.Module) -> dict[str, list[nn.Module]]:
    """The multi-head attentions of a Transformer, by kind, in layer order."""
    encoder, decoder = getattr(model, "encoder", None), getattr(model, "decoder", None)
    if not (isinstance(encoder, TransformerEncoder) and isinstance(decoder, TransformerDecoder)):
        name = getattr(model, "hf_model_type", None) or type(model).__name__
        if encoder is not None and decoder is not None:  # an EncoderDecoder of other parts
            name = f"{type(encoder).__name__} + {type(decoder).__name__}"
        raise HeadError(f"heads are masked in heedful's own Transformers, not in {name}")
    encoder, decoder = encoder.layers, decoder.layers
    return {
        "encoder": [layer.self_attn for layer in encoder],
        "decoder": [layer.self_attn for layer in decoder],
        "cross": [layer.cross_attn for layer in decoder],
    }


def check_heads(model: nn.Module, heads: Iterable[Head]) -> list[Head]:
    """The heads, each checked to be in the model; a HeadError names the first that is not."""
    layers, out = attention_layers(model), []
    for head in heads:
        if head.kind not in layers:
            raise HeadError(f"{head}: the kind must be one of {', '.join(KINDS)}")
        stack = layers[head.kind]
        if not 0 <= head.layer < len(stack):
            raise HeadError(f"{head}: the {head.kind} attention has layers 1 to {len(stack)}")
        count = stack[head.layer].num_heads
        if head.head is not None and not 0 <= head.head < count:
            raise HeadError(f"{head}: layer {head.layer + 1} has heads 1 to {count}")
        out.append(head)
    return out


@contextmanager
def masked(model: nn.Module, heads: Iterable[Head]) -> Iterator[None]:
    """Within the block, each listed head's output is zero before W_O (ξ_i = 0), in every
    forward pass of `model` (search, replay, traces, a loss); outside it, nothing changed."""
    layers, keep = attention_layers(model), {}
    for head in check_heads(model, heads):
        attention = layers[head.kind][head.layer]
        ones = keep.setdefault(id(attention), (attention, torch.ones(attention.d_model)))[1]
        for h in range(attention.num_heads) if head.head is None else [head.head]:
            ones[attention.head_columns(h)["q"]] = 0.0  # z's columns of head h
    handles = [
        attention.parts("o")["o"].register_forward_pre_hook(_zeroing(ones))
        for attention, ones in keep.values()
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _zeroing(keep: torch.Tensor) -> Callable:
    def hook(_module, args):  # W_O's input z (B, L, D): the heads side by side
        (z,) = args
        return (z * keep.to(z.device, z.dtype),)

    return hook


def reference_loss(translator, sources: Sequence[str], references: Sequence[str], batch_size=32):
    """The references' mean cross-entropy per target token under teacher forcing (</s> counted),
    in nats: how well the model predicts what it should have written."""
    model, total, tokens = translator.model, 0.0, 0
    pairs = [
        (translator.src_tokenizer.encode(s), translator.tgt_tokenizer.encode(r))
        for s, r in zip(sources, references)
    ]
    with torch.inference_mode():
        for start in range(0, len(pairs), batch_size):
            src_ids, tgt_ids = zip(*pairs[start : start + batch_size])
            batch = collate(src_ids, tgt_ids).to(translator.device)
            logits = model(batch.src, batch.tgt_in).logits.double()  # (B, T, V)
            nll = F.cross_entropy(  # Σ −log p(y_t | y_<t, x) over the real target tokens
                logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD_ID, reduction="sum"
            )
            total += nll.item()
            tokens += int((batch.tgt_out != PAD_ID).sum())
    return total / max(tokens, 1)


@dataclass(frozen=True)
class Importance:
    """What masking each head alone costs. loss / bleu: the unmasked model's; for each kind,
    (layers, heads) arrays of the masked model's loss and BLEU, head (l, h) at [l, h]."""

    loss: float
    bleu: float
    masked_loss: dict[str, np.ndarray]
    masked_bleu: dict[str, np.ndarray]

    def ranked(self) -> list[tuple[Head, float, float]]:
        """(head, BLEU lost, loss gained) for every head, the one that matters most first."""
        rows = [
            (Head(kind, l, h), self.bleu - bleu, self.masked_loss[kind][l, h] - self.loss)
            for kind, grid in self.masked_bleu.items()
            for (l, h), bleu in np.ndenumerate(grid)
            if not math.isnan(bleu)  # a layer with fewer heads than the widest
        ]
        return sorted(rows, key=lambda row: (-row[1], -row[2]))


def importance(
    translator,
    sources: Sequence[str],
    references: Sequence[str],
    num_beams: int = 1,
    progress: Callable[[Head], None] | None = None,
) -> Importance:
    """Mask each head of `translator`'s model alone; measure the loss of the references and
    the BLEU of the translations (sacreBLEU, num_beams) with it masked. One pass per head."""
    from heedful.evaluation import bleu

    def measure() -> tuple[float, float]:
        outputs = [t.text for t in translator.translate(sources, num_beams=num_beams, n_best=1)]
        return reference_loss(translator, sources, references), bleu(outputs, references)

    loss, score = measure()
    grids = {}
    for kind, stack in attention_layers(translator.model).items():
        shape = (len(stack), max(a.num_heads for a in stack))
        grids[kind] = (np.full(shape, math.nan), np.full(shape, math.nan))
        for layer, attention in enumerate(stack):
            for h in range(attention.num_heads):
                head = Head(kind, layer, h)
                if progress:
                    progress(head)
                with masked(translator.model, [head]):
                    grids[kind][0][layer, h], grids[kind][1][layer, h] = measure()
    return Importance(
        loss, score, {k: g[0] for k, g in grids.items()}, {k: g[1] for k, g in grids.items()}
    )
