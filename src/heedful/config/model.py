"""The model section: three parts whose structure says who reads each key (issue 27, item 6).

    model            what the encoder and the decoder both read: the family (arch), the width
                     (d_model), dropout; a Transformer's heads, feed-forward size, norm and
                     positions; an RNN's cell, hidden size and layers (the bridge hands each
                     encoder layer's final state to the same decoder layer)
    model.encoder    what reads the source, one dataclass per kind: text (token ids, read by
                     the family's own encoder, here), cnn, vit, torchvision:<name> (pictures,
                     config/vision.py)
    model.decoder    what writes the target: a Transformer's layers and tied embeddings, an
                     RNN's attention, local window, input feeding and copying, and the
                     attention penalty of a captioner

A key that only some models read says so on its field (`only`): another model given it is an
error naming who reads it, unless it holds its default (model directories and runs written
before the check list every key); a model directory stores only the keys its model reads
(`used`). The flat keys configs had before these parts (model.attention, model.cnn_blocks)
are read by config/flat.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, NamedTuple

from heedful.config.file import ConfigError
from heedful.config.file import check_choice as _choice
from heedful.config.file import check_fraction as _fraction
from heedful.config.file import check_positive as _positive
from heedful.config.vision import (
    BackboneEncoderConfig,
    CNNEncoderConfig,
    ViTEncoderConfig,
    check_image_model,
)
from heedful.layers.scores import RNN_ATTENTIONS, SCORES

ARCHS = ("transformer", "rnn")


class Readers(NamedTuple):
    """Which models read a key that not every model reads."""

    who: str  # for the error: "arch rnn"
    reads: Callable[[Any], bool]  # whether a ModelConfig reads it
    this: Callable[[Any], str]  # for the error: what this model is instead


_FAMILY = {
    arch: Readers(f"arch {arch}", lambda m, a=arch: m.arch == a, lambda m: f"model.arch {m.arch}")
    for arch in ARCHS
}
_LOCAL = Readers(
    "luong-local-m / -p attention",
    lambda m: m.arch == "rnn" and m.decoder.is_local(),
    lambda m: (
        f"model.decoder.attention {m.decoder.attention}"
        if m.arch == "rnn"
        else "model.arch " + m.arch
    ),
)
_IMAGES = Readers(
    "model.encoder.kind cnn / vit / torchvision:<name>",
    lambda m: m.encoder.kind != "text",
    lambda m: f"model.encoder.kind {m.encoder.kind}",
)


def only(readers: Readers | str, *, default: Any) -> Any:
    """A field that only some models read: those of arch `readers`, or as Readers says."""
    readers = _FAMILY[readers] if isinstance(readers, str) else readers
    return field(default=default, metadata={"readers": readers})


@dataclass(frozen=True)
class TextEncoderConfig:
    """model.encoder kind text: token ids, read by the family's own encoder (models/)."""

    KIND: ClassVar[str] = "text"
    ABSENT: ClassVar[dict] = {"freeze": "a text model has no image encoder"}  # why not here
    freeze: ClassVar[bool] = False  # what readers of model.encoder.freeze see
    kind: str = "text"
    layers: int = only("transformer", default=2)  # Transformer encoder layers
    bidirectional: bool = only("rnn", default=True)  # each direction gets model.hidden_size / 2
    # one token embedding for both sides (fairseq's share_all_embeddings, Eole's
    # share_embeddings): the source reads the target's table; needs one joint vocabulary
    share_embeddings: bool = only("transformer", default=False)

    def __post_init__(self) -> None:
        if self.kind != "text":
            raise ConfigError(f"model.encoder.kind: {self.kind!r} is not text, this section's")
        _positive("model.encoder.layers", self.layers)


Encoder = TextEncoderConfig | CNNEncoderConfig | ViTEncoderConfig | BackboneEncoderConfig


@dataclass(frozen=True)
class DecoderConfig:
    """model.decoder: what writes the target."""

    layers: int = only("transformer", default=2)  # Transformer decoder layers
    tie_embeddings: bool = only("transformer", default=False)  # embedding = output projection
    attention: str = only("rnn", default="bahdanau")  # none | a score of scores.py
    # D of luong-local-m/-p: attend to [p_t - D, p_t + D] (Luong 2015 §3.2: D = 10)
    local_window: int = only(_LOCAL, default=10)
    input_feeding: bool = only("rnn", default=False)  # Luong §3.3: [h_t; c_t] into step t + 1
    # See et al. 2017's pointer-generator: mix the softmax with the attention over the source
    # positions holding each token (copying), weighted by a learned p_gen; needs attention and
    # one vocabulary for both sides (data.joint_vocab)
    copy: bool = only("rnn", default=False)
    # λ of Show, Attend and Tell's doubly stochastic regulariser over a picture's regions
    attention_penalty: float = only(_IMAGES, default=0.0)

    def __post_init__(self) -> None:
        _choice("model.decoder.attention", self.attention, RNN_ATTENTIONS)
        _positive("model.decoder.layers", self.layers)
        _positive("model.decoder.local_window", self.local_window)
        if not (0 <= self.attention_penalty < float("inf")):  # False for NaN
            raise ConfigError(
                f"model.decoder.attention_penalty: must be >= 0, got {self.attention_penalty}"
            )

    def is_local(self) -> bool:
        """Whether the attention is one of Luong's local ones (§3.2), with a window D."""
        return self.attention in SCORES and SCORES[self.attention].local is not None


@dataclass(frozen=True)
class ModelConfig:
    """model: what the encoder and the decoder both read, and the two parts."""

    arch: str = "transformer"  # transformer | rnn: the family, of the decoder and a text encoder
    d_model: int = 128  # embedding size (and the Transformer's width)
    dropout: float = 0.1
    attention_dropout: float = only("transformer", default=0.0)  # on weights (slow on CPU)
    num_heads: int = only("transformer", default=4)
    # grouped-query attention (Ainslie et al. 2023): key/value heads, each shared by num_heads /
    # num_kv_heads query heads (1: multi-query); must divide num_heads; None: one per head
    num_kv_heads: int | None = only("transformer", default=None)
    d_ff: int = only("transformer", default=512)
    norm: str = only("transformer", default="post")  # post (as in the paper) | pre (deep stacks)
    positional: str = only("transformer", default="sinusoidal")  # sinusoidal | learned
    max_positions: int = only("transformer", default=512)
    rnn_cell: str = only("rnn", default="gru")  # gru | lstm
    hidden_size: int = only("rnn", default=256)
    rnn_layers: int = only("rnn", default=1)  # the encoder's and the decoder's, layer to layer
    encoder: Encoder = field(default_factory=TextEncoderConfig)
    decoder: DecoderConfig = field(default_factory=DecoderConfig)

    def __post_init__(self) -> None:
        _choice("model.arch", self.arch, ARCHS)
        _choice("model.norm", self.norm, ("post", "pre"))
        _choice("model.positional", self.positional, ("sinusoidal", "learned"))
        _choice("model.rnn_cell", self.rnn_cell, ("gru", "lstm"))
        for name in ("d_model", "num_heads", "d_ff", "max_positions", "hidden_size", "rnn_layers"):
            _positive(f"model.{name}", getattr(self, name))
        for name in ("dropout", "attention_dropout"):
            _fraction(f"model.{name}", getattr(self, name))
        self._check_shapes()
        if self.encoder.kind != "text":
            check_image_model(self)

    def _check_shapes(self) -> None:
        """The sizes that must fit each other."""
        if self.arch == "transformer" and self.d_model % self.num_heads:
            raise ConfigError(
                f"model.d_model ({self.d_model}) must be divisible by model.num_heads "
                f"({self.num_heads})"
            )
        if self.num_kv_heads is not None and (
            self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads
        ):
            raise ConfigError(
                f"model.num_kv_heads ({self.num_kv_heads}) must divide model.num_heads "
                f"({self.num_heads}): each key/value head serves a group of query heads"
            )
        if self.arch == "rnn" and self.decoder.copy and self.decoder.attention == "none":
            raise ConfigError(
                "model.decoder.copy: the pointer-generator copies with attention; choose "
                "a model.decoder.attention other than none"
            )
        text = self.encoder.kind == "text"
        if self.arch == "rnn" and text and self.encoder.bidirectional and self.hidden_size % 2:
            raise ConfigError(
                f"model.hidden_size ({self.hidden_size}) must be even with "
                "model.encoder.bidirectional"
            )

    def _parts(self) -> tuple[tuple[str, Any], ...]:
        """(path, section) of the model section and its parts."""
        return (("", self), ("encoder.", self.encoder), ("decoder.", self.decoder))

    def check_given(self, given: dict, prefix: str = "model.") -> None:
        """A key this model does not read is an error, since it would silently do nothing
        (`tie_embeddings` on an RNN), unless it holds its default."""
        for path, part in self._parts():
            keys = given if not path else given.get(path[:-1])
            for f in sorted(fields(part), key=lambda f: f.name):  # the first by name is named
                readers = f.metadata.get("readers")
                if not isinstance(keys, dict) or f.name not in keys or readers is None:
                    continue
                if not readers.reads(self) and getattr(part, f.name) != f.default:
                    raise ConfigError(
                        f"{prefix}{path}{f.name}: only {readers.who} uses it, this model is "
                        f"{readers.this(self)}; remove the key"
                    )

    def used(self) -> dict:
        """The keys this model reads, nested as the config is: what a model directory and a
        run directory store."""
        written: dict = {}
        for path, part in self._parts():
            read = {
                f.name: getattr(part, f.name)
                for f in fields(part)
                if f.name not in ("encoder", "decoder")
                and ("readers" not in f.metadata or f.metadata["readers"].reads(self))
            }
            written.update({path[:-1]: read} if path else read)
        return written
