"""The tokenizer of a Hugging Face export: one vocabulary, our pieces at our ids, in tokenizer.json.

Hugging Face's Pegasus has one vocabulary for encoder and decoder, and CTranslate2's own
converter (ct2-transformers-converter) registers one vocabulary for both sides whatever the
model. So the export holds one: `layout` lists its tokens in export-id order, and for each the
row of our source and of our target embedding it is (our_src, our_tgt).

- One SentencePiece model on both sides (data.joint_vocab, as every shipped SentencePiece
  recipe): the export's ids are ours, and tokenizer.json is a Unigram model over our pieces with
  their scores, SentencePiece's own normalizer (its precompiled character map, read from the
  model's bytes), its dummy "▁" prefix and extra-whitespace removal: the pieces
  SentencePieceProcessor.encode gives. No post-processor: the source gets no </s>, which our
  models never read, so `tokenizer(text)` with its defaults gives what heedful encodes.
- Character vocabularies (the demo's): the target's characters at our target ids, then the
  source's other characters. A character only the target knows reads, in the encoder, our
  source <unk> row (what heedful reads it as); one only the source knows has no target row: the
  decoder never produces it (export_weights.NEVER).
- Marian (post-norm) exports end with one more token, <pad>, as Marian models do and as
  CTranslate2's converter expects (with_marian_pad); our own <pad> keeps id 0 as OUR_PAD.
- Two SentencePiece models: one Unigram model cannot split a text as the source model does
  and spell out the target's pieces, so they stay in Marian's two files (MarianTokenizer with
  separate_vocabs), which transformers reads and CTranslate2's converter does not.

Piece strings are what CTranslate2 and a tokenizer's convert_ids_to_tokens speak; specials keep
our ids: <pad> 0, <s> 1, </s> 2, <unk> 3. A symbol (<2de>) is matched wherever a text holds it,
where heedful reads one only at the start (tokenizers.split_leading).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from heedful.data import sentencepiece_model as spm_model
from heedful.data.tokenizers import BOS, EOS, PAD, PAD_ID, UNK, UNK_ID
from heedful.io import CheckpointError

# sentencepiece_model.proto: ModelProto.trainer_spec 2 (model_type 3: UNIGRAM 1),
# normalizer_spec 3 (precompiled_charsmap 2, add_dummy_prefix 3, remove_extra_whitespaces 4)
_TRAINER, _MODEL_TYPE, _UNIGRAM = 2, 3, 1
_NORMALIZER, _CHARSMAP, _DUMMY_PREFIX, _EXTRA_SPACES = 3, 2, 3, 4
# below every trained piece: a control piece (<s>, <2de>) is never what a text splits into
_CONTROL_SCORE_GAP = 100.0
OUR_PAD = "<pad:heedful>"  # our <pad>'s name in a Marian export, where <pad> is the last token


@dataclass(frozen=True)
class VocabLayout:
    """The export's tokens in id order; our source / target id of each (None: not on that
    side; a source None reads our <unk>); the symbols (<2de>) read as one token."""

    tokens: list[str]
    our_src: list[int | None]
    our_tgt: list[int | None]
    symbols: tuple[str, ...] = ()
    joint: bool = True  # one tokenizer on both sides: tokenizer.json; else Marian's two files

    @property
    def zero_start(self) -> bool:
        """Whether the decoder starts from Marian's <pad> (with_marian_pad), a zero row."""
        return self.joint and self.tokens[-1] == PAD

    def src_rows(self) -> list[int]:
        return [UNK_ID if i is None else i for i in self.our_src]


def _pieces(tokenizer) -> list[str]:
    return [tokenizer.id_to_token(i) for i in range(len(tokenizer))]


def _same(src, tgt) -> bool:
    if src.kind == "sentencepiece":
        return src.model_proto == tgt.model_proto
    return _pieces(src) == _pieces(tgt) and tuple(src.symbols) == tuple(tgt.symbols)


def layout(src, tgt, marian: bool = False) -> VocabLayout:
    """How the export numbers its tokens (module docstring); marian: with Marian's pad."""
    symbols = tuple(sorted(getattr(src, "symbols", ()) or ()))
    if src.kind == "sentencepiece" and not _same(src, tgt):  # two models: Marian's files
        return VocabLayout(
            _pieces(tgt), list(range(len(src))), list(range(len(tgt))), symbols, joint=False
        )
    target = _pieces(tgt)
    source = {piece: i for i, piece in enumerate(_pieces(src))}
    extra = [piece for piece in source if piece not in set(target)]  # none when joint
    tokens = target + extra
    vocab = VocabLayout(
        tokens,
        [source.get(p) for p in tokens],
        [*range(len(target)), *([None] * len(extra))],
        symbols,
    )
    return with_marian_pad(vocab) if marian else vocab


def with_marian_pad(vocab: VocabLayout) -> VocabLayout:
    """A new <pad> last, as Marian models have it and CTranslate2's converter wants it: it
    drops the last token, and starts the decoder from a zero vector, which this <pad>'s row
    is (export_weights folds our <s> into the decoder's position 0). Our own <pad> keeps its
    id and its output row under another name (OUR_PAD): a model of ours may give it a
    probability, which the export keeps."""
    tokens = [OUR_PAD, *vocab.tokens[1:], PAD]
    return replace(
        vocab, tokens=tokens, our_src=[*vocab.our_src, PAD_ID], our_tgt=[*vocab.our_tgt, None]
    )


def _proto_field(data: bytes, number: int) -> tuple[int, int] | None:
    found = None
    for field, start, end in spm_model.proto_fields(data, 0, len(data)):
        if field == number:
            found = (start, end)
    return found


def _settings(model_proto: bytes) -> tuple[int, bytes, bool, bool]:
    """(model type, precompiled charsmap, add_dummy_prefix, remove_extra_whitespaces)."""
    model_type, charsmap, dummy, spaces = _UNIGRAM, b"", True, True
    trainer = _proto_field(model_proto, _TRAINER)
    if trainer:
        for field, start, _ in spm_model.proto_fields(model_proto, *trainer):
            if field == _MODEL_TYPE:
                model_type = spm_model.varint(model_proto, start)[0]
    normalizer = _proto_field(model_proto, _NORMALIZER)
    if normalizer:
        for field, start, end in spm_model.proto_fields(model_proto, *normalizer):
            if field == _CHARSMAP:
                charsmap = model_proto[start:end]
            elif field == _DUMMY_PREFIX:
                dummy = bool(spm_model.varint(model_proto, start)[0])
            elif field == _EXTRA_SPACES:
                spaces = bool(spm_model.varint(model_proto, start)[0])
    return model_type, charsmap, dummy, spaces


def _unigram(tokenizer, tokens: list[str], where):
    """A tokenizers Unigram model splitting text as `tokenizer`'s SentencePiece model does."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import Unigram

    model_type, charsmap, dummy, spaces = _settings(tokenizer.model_proto)
    if model_type != _UNIGRAM:
        raise CheckpointError(
            f"{where}: its SentencePiece model is not a unigram one (data.sp_model_type bpe); "
            "the Hugging Face export writes unigram models (sp_model_type: unigram)"
        )
    processor, size = tokenizer.processor, len(tokenizer)
    scores = [processor.get_score(i) for i in range(size)]
    control = {i for i in range(len(tokens)) if i >= size or i < 4 or processor.is_control(i)}
    lowest = min((s for i, s in enumerate(scores) if i not in control), default=0.0)
    vocab = [  # tokens past ours: Marian's <pad>
        (piece, lowest - _CONTROL_SCORE_GAP if i in control else scores[i])
        for i, piece in enumerate(tokens)
    ]
    model = Tokenizer(Unigram(vocab, unk_id=UNK_ID, byte_fallback=False))
    steps = [normalizers.Precompiled(charsmap)] if charsmap else []
    if spaces:  # SentencePiece drops spaces at either end and makes runs of them one
        ends, runs = Regex(r"\A +| +\z"), Regex(" {2,}")
        steps += [normalizers.Replace(ends, ""), normalizers.Replace(runs, " ")]
    model.normalizer = normalizers.Sequence(steps)
    # the "▁" SentencePiece puts before the text; "always": also after a symbol (<2de>), before
    # the text heedful encodes after it (tokenizers.split_leading)
    scheme = "always" if dummy else "never"
    space = dict(replacement="▁", prepend_scheme=scheme, split=False)
    model.pre_tokenizer = pre_tokenizers.Metaspace(**space)
    model.decoder = decoders.Metaspace(**space)
    return model


def _characters(tokens: list[str]):
    """One token per character, as CharTokenizer; decoding joins them with nothing between."""
    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import WordLevel

    model = Tokenizer(WordLevel({t: i for i, t in enumerate(tokens)}, unk_token=UNK))
    model.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    model.decoder = decoders.Fuse()
    return model


def hf_tokenizer(hf, loaded, vocab: VocabLayout, where):
    """A PreTrainedTokenizerFast (which AutoTokenizer and ct2-transformers-converter load) of
    the one vocabulary. The token that pads: Marian's <pad> (with_marian_pad) where there is
    one, else our <s>, the decoder's start, which Pegasus's converter reads from the pad token
    (export.py); padded positions are masked, so which token pads them changes nothing."""
    from tokenizers import AddedToken

    tgt = loaded.tgt_tokenizer
    if tgt.kind == "sentencepiece":
        model = _unigram(tgt, vocab.tokens, where)
    else:
        model = _characters(vocab.tokens)
    marian = vocab.zero_start
    specials = [*vocab.tokens[:4], *([PAD] if marian else [])]
    # specials are matched whole in a text, as transformers does; symbols (<2de>) too, the
    # target token of a multilingual model's source
    model.add_special_tokens([AddedToken(t, normalized=False) for t in specials])
    model.add_tokens([AddedToken(t, normalized=False, single_word=False) for t in vocab.symbols])
    return hf.PreTrainedTokenizerFast(
        tokenizer_object=model,
        pad_token=PAD if marian else BOS,
        eos_token=EOS,
        unk_token=UNK,
        # our <pad> when another token pads: special, so left out of decoded text as ours is
        additional_special_tokens=[vocab.tokens[0]],
        model_max_length=1 << 30,
        model_input_names=["input_ids", "attention_mask"],  # no token_type_ids for generate()
    )


def save_tokenizer(fast, build: Path, languages) -> None:
    """tokenizer.json and tokenizer_config.json, with the languages heedful reads back. The
    class is named PreTrainedTokenizerFast, the name transformers 4 and 5 both read (5 writes
    TokenizersBackend, which 4.57's AutoTokenizer does not know)."""
    fast.save_pretrained(build)
    _set_languages(build / "tokenizer_config.json", languages, "PreTrainedTokenizerFast")


def _set_languages(path: Path, languages, tokenizer_class: str | None = None) -> None:
    """Marian's keys (source_lang, target_lang), read back by hf.layout.saved_languages."""
    settings = json.loads(path.read_text(encoding="utf-8"))
    settings["source_lang"], settings["target_lang"] = languages
    if tokenizer_class:
        settings["tokenizer_class"] = tokenizer_class
        # transformers 5 writes a list here, which 4.57 reads as a dict of named tokens; both
        # read additional_special_tokens (tokenizer.json marks them special too)
        extra = settings.pop("extra_special_tokens", None)
        if isinstance(extra, list):
            settings["additional_special_tokens"] = extra
    path.write_text(json.dumps(settings, ensure_ascii=False, indent=2), encoding="utf-8")


def write_marian_tokenizer(hf, loaded, build: Path, languages) -> None:
    """Two SentencePiece models: source.spm / target.spm and their pieces in id order."""
    for name, tokenizer, vocab in (
        ("source", loaded.src_tokenizer, "vocab.json"),
        ("target", loaded.tgt_tokenizer, "target_vocab.json"),
    ):
        tokenizer.save(build / f"{name}.spm")
        pieces = {piece: i for i, piece in enumerate(_pieces(tokenizer))}
        (build / vocab).write_text(json.dumps(pieces, ensure_ascii=False), encoding="utf-8")
    marian = hf.MarianTokenizer(
        str(build / "source.spm"),
        str(build / "target.spm"),
        str(build / "vocab.json"),
        target_vocab_file=str(build / "target_vocab.json"),
        separate_vocabs=True,
        unk_token=loaded.src_tokenizer.id_to_token(UNK_ID),
        source_lang=languages[0],
        target_lang=languages[1],
    )
    marian.save_pretrained(build)
    _set_languages(build / "tokenizer_config.json", languages)
