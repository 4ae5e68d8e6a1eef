"""Hugging Face ids as heedful ids: one permutation, so that search and traces run unchanged.

heedful's search, replay and traces read the special tokens at fixed ids (<pad> 0, <s> 1,
</s> 2, <unk> 3; heedful.data.tokenizers), and Hugging Face models put them anywhere: Marian
has </s> 0 and <pad> last, T5 <pad> 0 and </s> 1, BART <s> 0, <pad> 1, </s> 2. IdMap renumbers
a model's vocabulary: our ids 0-3 are its pad, decoder start, eos and unk, then every other id
in its order. The decoder start (what decoding reads first) is often the model's <pad>
(Marian, T5) or </s> (BART, mBART-50, M2M100), so our id 1 only ever goes in: the model's
next-token distribution has no column for it (-inf), and its own pad or eos keeps its column
under our id 0 or 2. Probabilities are the model's, only their order changes.

HFTokenizer is a transformers tokenizer behind heedful's Tokenizer interface, in our ids.
"""

from __future__ import annotations

import torch
from torch import nn

from heedful.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from heedful.io import CheckpointError


class IdMap(nn.Module):
    """inputs[i]: the model id our id i reads as; columns[i]: the model's output column our id
    i is, or V (its vocabulary size), a column of -inf, for our <s> (and <unk> when it has
    none); ours: model id -> our id. A module, so that its two tables follow the model to
    its device.

    A model with several end tokens (generation_config.json's eos_token_id [2, 3]: generate()
    stops on any) has them all as our </s>: its score is the best of theirs, which is the score
    generate() gives the hypothesis that ends there, and the others have no id of their own.
    """

    def __init__(self, inputs: list[int], columns: list[int], virtual: int, ends=()):
        super().__init__()
        self.register_buffer("inputs", torch.tensor(inputs), persistent=False)  # (V',)
        self.register_buffer("columns", torch.tensor(columns), persistent=False)  # (V',)
        # (E,) every model id that ends a translation, ours first; empty when there is one
        self.register_buffer("ends", torch.tensor(ends, dtype=torch.long), persistent=False)
        self.ours = {column: i for i, column in enumerate(columns) if column != virtual}
        self.ours.update({end: EOS_ID for end in ends})

    @classmethod
    def build(cls, vocab_size: int, pad: int, start: int, eos, unk: int | None) -> IdMap:
        """eos: the model's end token, or a sequence of them (the first is what ours reads)."""
        ends = (eos,) if isinstance(eos, int) else tuple(eos)
        named = {"pad": pad, "decoder start": start, "unk": unk}
        for name, i in [*named.items(), *(("eos", end) for end in ends)]:
            if i is not None and not 0 <= i < vocab_size:
                raise CheckpointError(
                    f"the {name} token id {i} is outside the model's vocabulary of {vocab_size}"
                )
        if pad in ends:
            raise CheckpointError(f"pad and eos are the same token ({pad}); heedful needs two")
        eos = ends[0]
        special = {pad, *ends} | ({unk} if unk is not None else set())
        rest = [i for i in range(vocab_size) if i not in special]
        virtual = vocab_size  # the -inf column
        unk_in, unk_out = (pad, virtual) if unk is None else (unk, unk)
        inputs, columns = [pad, start, eos, unk_in, *rest], [pad, virtual, eos, unk_out, *rest]
        return cls(inputs, columns, virtual, ends if len(ends) > 1 else ())

    def __len__(self) -> int:
        return len(self.columns)

    def to_model(self, ids: torch.Tensor) -> torch.Tensor:
        """Our ids (any shape) -> the model's."""
        return self.inputs[ids]

    def to_ours(self, scores: torch.Tensor) -> torch.Tensor:
        """The model's scores (..., V) -> ours (..., V'): reordered, -inf for our <s>."""
        blank = scores.new_full((*scores.shape[:-1], 1), -torch.inf)
        table = torch.cat([scores, blank], dim=-1)  # (..., V + 1)
        if self.ends.numel():  # our </s>: the best of the model's end tokens
            table[..., self.ends[0]] = table[..., self.ends].amax(-1)
        return table[..., self.columns]


class HFTokenizer:
    """A transformers tokenizer speaking our ids (heedful.data.tokenizers.Tokenizer).

    side "src" encodes sources as the model reads them, special tokens included (the </s> at
    the end, mBART's and M2M100's language code): they are positions the encoder attends to,
    so they are labelled. decode() leaves the special tokens out, as transformers does.
    """

    kind = "huggingface"

    def __init__(self, tokenizer, ids: IdMap, side: str = "src", pieces: dict | None = None):
        self.tokenizer, self.ids, self.side = tokenizer, ids, side
        self.inputs, self.columns = ids.inputs.tolist(), ids.columns.tolist()  # on the CPU
        self.pieces = pieces  # model id -> piece, where convert_ids_to_tokens is the other side's
        unknown = getattr(tokenizer, "unk_token_id", None)
        self.unk = ids.ours.get(unknown, UNK_ID) if unknown is not None else UNK_ID

    def __len__(self) -> int:
        return len(self.columns)

    def _model_ids(self, text: str) -> list[int]:
        # split_special_tokens: a user's text is text. A typed "</s>" or "__de__" is spelled
        # out in pieces, never read as the end or language token only the tokenizer may add.
        if self.side == "src":
            return self.tokenizer(text, split_special_tokens=True).input_ids
        # a target text as decoding writes it, without the special tokens the tokenizer adds
        return self.tokenizer(
            text_target=text, add_special_tokens=False, split_special_tokens=True
        ).input_ids

    def encode(self, text: str) -> list[int]:
        return [self.ids.ours.get(i, self.unk) for i in self._model_ids(text)]

    def tokens(self, text: str) -> list[str]:
        """The pieces as the tokenizer writes them (▁ or Ġ marks a word start)."""
        return [self._piece(i) for i in self._model_ids(text)]

    def decode(self, ids) -> str:
        model_ids = [self.inputs[i] for i in ids if i != BOS_ID]
        return self.tokenizer.decode(model_ids, skip_special_tokens=True).strip()

    def id_to_token(self, i: int) -> str:
        if i == PAD_ID or i == BOS_ID:  # our <s> reads the model's decoder start
            return self._piece(self.inputs[i])
        return self._piece(self.columns[i])

    def _piece(self, model_id: int) -> str:
        if self.pieces is not None:
            return self.pieces.get(model_id, f"<id {model_id}>")
        piece = self.tokenizer.convert_ids_to_tokens(model_id)
        return piece if isinstance(piece, str) else f"<id {model_id}>"


def check_vocabulary(ids, vocab_size: int, where, side: str = "") -> None:
    """A tokenizer whose ids reach past the model's embedding table does not belong to it
    (the model may have more rows than the tokenizer has tokens: T5 pads to a multiple of 128).
    ids: every id the tokenizer can give."""
    largest = max(ids, default=-1)
    if largest >= vocab_size:
        raise CheckpointError(
            f"{where}: the {side}tokenizer has ids up to {largest}, but the model's {side}"
            f"vocabulary has {vocab_size} tokens (ids 0..{vocab_size - 1}); the tokenizer and "
            "the model do not belong together"
        )


def tokenizer_ids(tokenizer) -> list[int]:
    """Every id a transformers tokenizer gives (M2M100's language codes are outside its vocab)."""
    languages = getattr(tokenizer, "lang_token_to_id", None) or {}
    return [*tokenizer.get_vocab().values(), *languages.values()]
