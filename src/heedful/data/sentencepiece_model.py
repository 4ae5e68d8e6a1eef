"""The bytes of a SentencePiece model: reading them, training on a reproducible sample, the
trainer's errors in words, and target tokens that only heedful may write (control_symbols).

tokenizers.SentencePieceTokenizer is the one user of these helpers.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable

# sentencepiece_model.proto: ModelProto.pieces is field 1; a piece's text field 1, its type
# field 3 (a varint), where USER_DEFINED is 4 and CONTROL is 3
_PIECES, _PIECE_TEXT, _PIECE_TYPE = 1, 1, 3
_USER_DEFINED, _CONTROL = 4, 3


def processor(model_proto: bytes):
    """A SentencePieceProcessor for serialized model bytes, or None if they are not a model."""
    import sentencepiece as spm

    if not model_proto:  # parses as an empty protobuf, then fails on first use
        return None
    try:
        return spm.SentencePieceProcessor(model_proto=model_proto)
    except RuntimeError:
        return None


def varint(data: bytes, at: int) -> tuple[int, int]:
    """(the protobuf varint at `at`, the offset after it)"""
    value = shift = 0
    while True:
        byte = data[at]
        value, shift, at = value | (byte & 0x7F) << shift, shift + 7, at + 1
        if byte < 0x80:
            return value, at


def proto_fields(data: bytes, start: int, end: int):
    """(field number, offset of its value, offset after it) of each field in data[start:end];
    a length-delimited value's offset is that of its bytes, after the length."""
    at = start
    while at < end:
        key, at = varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value_at, (_, at) = at, varint(data, at)
        elif wire == 2:
            size, value_at = varint(data, at)
            at = value_at + size
        elif wire in (1, 5):  # fixed 64 or 32 bits (a piece's score)
            value_at, at = at, at + (8 if wire == 1 else 4)
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, value_at, at


def control_symbols(model_proto: bytes, symbols: Iterable[str]) -> bytes:
    """The model with `symbols` (<2de>, trained as user_defined_symbols) made control pieces.

    SentencePiece matches a user-defined symbol wherever a text holds it, so a user's
    "<2de> A man" encoded the target token itself and overrode --target (issue 26). A control
    piece (like <s>) keeps its id but is never read from text: heedful adds its id where a
    source starts with the token (tokenizers.split_leading), and the same characters typed by
    a user are text like any other. Each edit rewrites one varint byte (4 -> 3), so every
    other byte, and every other text's pieces, stay as trained."""
    wanted, out = {s.encode("utf-8") for s in symbols}, bytearray(model_proto)
    for number, start, end in proto_fields(model_proto, 0, len(model_proto)):
        if number != _PIECES:
            continue
        piece, type_at = None, None
        for field, value_at, after in proto_fields(model_proto, start, end):
            if field == _PIECE_TEXT:
                piece = model_proto[value_at:after]
            elif field == _PIECE_TYPE:
                type_at = value_at
        if piece in wanted and type_at is not None and model_proto[type_at] == _USER_DEFINED:
            out[type_at] = _CONTROL
    return bytes(out)


def sample(texts: Iterable[str], size: int, seed: int) -> list[str]:
    """At most `size` of the non-empty texts (all when size is 0), kept in their original order.

    Reservoir sampling (Vitter 1985, algorithm R) holds only the sample in memory. heedful
    samples itself because SentencePiece's own sampler (its input_sentence_size) picked
    different sentences in different processes even after set_random_generator_seed
    (sentencepiece 0.2), so the same config would train different models.
    """
    rng = random.Random(seed)
    kept: list[tuple[int, str]] = []
    for n, text in enumerate(t for t in texts if t.strip()):
        if size <= 0 or len(kept) < size:
            kept.append((n, text))
        elif (j := rng.randrange(n + 1)) < size:
            kept[j] = (n, text)
    kept.sort()
    return [text for _, text in kept]


def training_error(error: RuntimeError, vocab_size: int, model_type: str) -> ValueError:
    """SentencePiece's training error, in words; a vocabulary too large says the size that
    fits."""
    # SentencePiece reports "INTERNAL: src/trainer_interface.cc(744) [check] message".
    message = str(error).split("] ", 1)[-1] or str(error)
    limit = re.search(r"too high.*<= (\d+)", message)
    if limit:
        return TooManyPieces(
            f"vocab_size={vocab_size} is too large for this training text: a {model_type} model "
            f"can have at most {limit[1]} pieces here; set vocab_size to {limit[1]} or less, or "
            "train on more text",
            int(limit[1]),
        )
    return ValueError(
        f"SentencePiece training failed (vocab_size={vocab_size}, model_type={model_type}): "
        f"{message}"
    )


class TooManyPieces(ValueError):
    """A vocabulary larger than the training text can fill; `limit` is the most it can."""

    def __init__(self, message: str, limit: int):
        super().__init__(message)
        self.limit = limit


def fill_vocabulary(train, vocab_size: int, echo=print):
    """train(vocab_size), or where the text cannot fill that many pieces (a recipe's 8000 on a
    few thousand sentences of one's own) train(the most it can), said in one line, rather than
    stopping to ask for a retry with that number. With two tokenizers, both take the smallest
    size either side can fill: data.vocab_size is one number."""
    size = vocab_size
    while True:
        try:
            trained = train(size)
            break
        except TooManyPieces as error:
            if error.limit >= size:
                raise
            size = error.limit  # what the side that failed can fill; train again
    if size != vocab_size:
        echo(
            f"data.vocab_size: {vocab_size} is more than the training text can fill; trained "
            f"with {size}, the most it can (set data.vocab_size: {size} to say so)"
        )
    return trained
