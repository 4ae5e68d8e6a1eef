"""Tokenizers: SentencePiece round trips, special ids, files, determinism, joint vocabularies.

The training text is generated here (no download): sentences of made-up words, Latin-script
syllables with accents for the source and Greek syllables for the target, so that a
vocabulary trained on one side alone cannot spell the other.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from heedful.data.tokenizers import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIALS,
    UNK_ID,
    CharTokenizer,
    SentencePieceTokenizer,
    load_tokenizer,
    train_tokenizers,
)

SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def words(syllables: str, n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return sorted({"".join(rng.choices(syllables.split(), k=rng.randint(1, 3))) for _ in range(n)})


def sentences(words: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(words, k=rng.randint(3, 12))) for _ in range(n)]


LATIN = words("ka lo mi ré tu sa ne bo fi gü da pe çi wa xo", 250, seed=0)
GREEK = words("κα λο μι ρέ του σα νε μπο φι γκι ντα πε τσι βα ξο", 250, seed=1)
SRC = sentences(LATIN, 300, seed=0)
TGT = sentences(GREEK, 300, seed=1)
# Unseen sentences and unseen words, all of seen characters.
HELD_OUT = sentences(LATIN, 50, seed=2) + ["xoxoxoxo kaçiré", "gügüpe wa", "ébok"]


@pytest.fixture(scope="module", params=["unigram", "bpe"])
def sp(request) -> SentencePieceTokenizer:
    return SentencePieceTokenizer.train(SRC, vocab_size=120, model_type=request.param)


def test_round_trip_on_normalised_text(sp):
    assert sp.kind == "sentencepiece"
    for text in SRC[:100] + HELD_OUT:  # held out: unseen sentences and words, seen characters
        ids = sp.encode(text)
        assert UNK_ID not in ids
        assert sp.decode(ids) == text
        assert sp.tokens(text) == [sp.id_to_token(i) for i in ids]
        assert "".join(sp.tokens(text)).replace("▁", " ").strip() == text


def test_text_is_normalised_before_splitting(sp):
    # NFKC and whitespace normalisation: what decode(encode(x)) returns for other text.
    assert sp.decode(sp.encode("  kalo   mi\tsa ")) == "kalo mi sa"
    assert sp.decode(sp.encode("re\u0301")) == "ré"  # combining accent -> one character


def test_special_ids_are_0_to_3_and_decode_skips_them(sp):
    assert len(sp) == 120
    assert [sp.id_to_token(i) for i in range(4)] == list(SPECIALS)
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    text = "kalo mi tusa néçi"
    ids = sp.encode(text)
    assert not {PAD_ID, BOS_ID, EOS_ID} & set(ids)  # encode adds no <s> or </s>
    assert sp.decode([BOS_ID, *ids, EOS_ID, *sp.encode("wa xo")]) == text  # stops at </s>
    padded = [i for t in ids for i in (t, PAD_ID)]
    assert sp.decode(padded + [PAD_ID] * 3) == text
    assert UNK_ID in sp.encode("kalo ☃ mi")  # an unseen character
    assert "☃" not in sp.decode(sp.encode("kalo ☃ mi"))


def test_save_and_load_give_the_same_model_in_a_standard_file(sp, tmp_path):
    import sentencepiece

    path = tmp_path / "tokenizer.src"
    sp.save(path)
    assert path.read_bytes() == sp.model_proto
    for loaded in (SentencePieceTokenizer.load(path), load_tokenizer(path)):
        assert isinstance(loaded, SentencePieceTokenizer)
        assert len(loaded) == len(sp)
        assert [loaded.encode(t) for t in SRC + HELD_OUT] == [sp.encode(t) for t in SRC + HELD_OUT]
        assert [loaded.id_to_token(i) for i in range(len(sp))] == [
            sp.id_to_token(i) for i in range(len(sp))
        ]
    # The plain .model file: any SentencePiece tool reads it, no heedful wrapper needed.
    plain = sentencepiece.SentencePieceProcessor(model_file=str(path))
    assert plain.encode(HELD_OUT[0]) == sp.encode(HELD_OUT[0])


def test_training_writes_no_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    SentencePieceTokenizer.train(SRC, vocab_size=80)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_training_is_deterministic(model_type):
    first = SentencePieceTokenizer.train(SRC, vocab_size=100, model_type=model_type)
    again = SentencePieceTokenizer.train(iter(SRC), vocab_size=100, model_type=model_type)
    assert first.model_proto == again.model_proto


def test_sentence_cap_samples_reproducibly_across_processes(tmp_path):
    # SentencePiece's own input_sentence_size sampler picks different sentences in each
    # process; heedful's must not, or the same config trains different models.
    def digest(tokenizer):
        return hashlib.sha256(tokenizer.model_proto).hexdigest()

    here = digest(SentencePieceTokenizer.train(SRC, vocab_size=80, input_sentence_size=100))
    (tmp_path / "src.txt").write_text("\n".join(SRC), encoding="utf-8")
    script = (
        "import hashlib, sys\n"
        "from heedful.data.tokenizers import SentencePieceTokenizer as T\n"
        "texts = open(sys.argv[1], encoding='utf-8').read().split('\\n')\n"
        "t = T.train(texts, vocab_size=80, input_sentence_size=100)\n"
        "print(hashlib.sha256(t.model_proto).hexdigest())\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "src.txt")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout.strip() == here
    other_seed = SentencePieceTokenizer.train(SRC, vocab_size=80, input_sentence_size=100, seed=1)
    assert digest(other_seed) != here  # the cap really sampled
    everything = SentencePieceTokenizer.train(SRC, vocab_size=80, input_sentence_size=0)
    assert digest(everything) != here


def test_too_large_vocabulary_names_the_size_and_a_size_that_works():
    with pytest.raises(ValueError, match=r"vocab_size=5000 is too large") as caught:
        SentencePieceTokenizer.train(SRC, vocab_size=5000)
    limit = int(re.search(r"at most (\d+)", str(caught.value))[1])
    assert 100 < limit < 5000
    assert len(SentencePieceTokenizer.train(SRC, vocab_size=limit)) == limit


def test_bad_training_arguments_are_value_errors():
    with pytest.raises(ValueError, match="model_type"):
        SentencePieceTokenizer.train(SRC, vocab_size=80, model_type="wordpiece")
    with pytest.raises(ValueError, match="no non-empty text"):
        SentencePieceTokenizer.train(["", "  "], vocab_size=80)
    with pytest.raises(ValueError, match="vocab_size=10"):  # fewer pieces than characters
        SentencePieceTokenizer.train(SRC, vocab_size=10)
    with pytest.raises(ValueError, match="tokenizer kind"):
        train_tokenizers(SRC, TGT, kind="word", vocab_size=80)


def unknowns(tokenizer, texts):
    return sum(tokenizer.encode(t).count(UNK_ID) for t in texts)


@pytest.mark.parametrize("kind", ["sentencepiece", "char"])
def test_joint_is_one_tokenizer_for_both_sides(kind):
    src_tok, tgt_tok = train_tokenizers(SRC, TGT, kind=kind, vocab_size=150, joint=True)
    assert src_tok is tgt_tok
    assert unknowns(src_tok, SRC + TGT) == 0
    assert src_tok.decode(src_tok.encode(TGT[0])) == TGT[0]


@pytest.mark.parametrize("kind", ["sentencepiece", "char"])
def test_separate_tokenizers_each_know_only_their_side(kind):
    src_tok, tgt_tok = train_tokenizers(SRC, TGT, kind=kind, vocab_size=80, joint=False)
    assert src_tok is not tgt_tok
    assert unknowns(src_tok, SRC) == unknowns(tgt_tok, TGT) == 0
    assert unknowns(src_tok, TGT[:5]) > 0 and unknowns(tgt_tok, SRC[:5]) > 0
    if kind == "sentencepiece":
        assert len(src_tok) == len(tgt_tok) == 80
        assert src_tok.model_proto == SentencePieceTokenizer.train(SRC, 80).model_proto
    else:
        assert src_tok.vocab == CharTokenizer.train(SRC).vocab


def test_load_tokenizer_dispatches_on_the_file(tmp_path):
    char = CharTokenizer.train(SRC)
    char.save(tmp_path / "char")
    loaded = load_tokenizer(tmp_path / "char")
    assert isinstance(loaded, CharTokenizer) and loaded.vocab == char.vocab
    SentencePieceTokenizer.train(SRC, vocab_size=80).save(tmp_path / "sp")
    assert isinstance(load_tokenizer(tmp_path / "sp"), SentencePieceTokenizer)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"hello world\n",
        bytes(range(256)),
        json.dumps({"kind": "word", "vocab": ["a"]}).encode(),
        b"[1, 2, 3]",
        json.dumps({"kind": "char", "vocab": [1]}).encode(),
        json.dumps({"kind": "char", "vocab": ["ab"]}).encode(),
        json.dumps({"kind": "char", "vocab": ["a", "b", "a"]}).encode(),
        b"[" * 100_000,
    ],
    ids=[
        "empty",
        "text",
        "binary",
        "other-json-kind",
        "json-list",
        "char-vocab-of-numbers",
        "char-vocab-of-strings",
        "char-vocab-repeats",
        "nested-too-deep",
    ],
)
def test_load_tokenizer_names_the_path_of_a_file_that_is_neither(tmp_path, content):
    path = tmp_path / "tokenizer.src"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(str(path))):
        load_tokenizer(path)


def test_load_tokenizer_refuses_a_directory_by_name(tmp_path):
    (tmp_path / "tokenizer.src").mkdir()
    with pytest.raises(ValueError, match=r"tokenizer\.src: is a directory"):
        load_tokenizer(tmp_path / "tokenizer.src")


def test_a_sentencepiece_model_with_other_special_ids_is_refused(tmp_path):
    import sentencepiece

    model = io.BytesIO()  # SentencePiece's defaults: <unk>=0, <s>=1, </s>=2, no <pad>
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(SRC), model_writer=model, vocab_size=80, minloglevel=2
    )
    (tmp_path / "foreign.model").write_bytes(model.getvalue())
    with pytest.raises(ValueError, match=r"foreign\.model.*pad/bos/eos/unk ids \(-1, 1, 2, 0\)"):
        load_tokenizer(tmp_path / "foreign.model")


@pytest.mark.integration
def test_multi30k_joint_unigram_round_trip():
    corpus = SHARED / "corpora" / "multi30k"
    if not corpus.is_dir():
        pytest.skip(f"{corpus} not present")

    def head(name, n):
        with open(corpus / name, encoding="utf-8") as f:
            return [next(f).rstrip("\n") for _ in range(n)]

    en, de = head("train.en", 2000), head("train.de", 2000)
    src_tok, tgt_tok = train_tokenizers(en, de, kind="sentencepiece", vocab_size=2000, joint=True)
    assert src_tok is tgt_tok and len(src_tok) == 2000
    for text in en + de:
        normalised = " ".join(unicodedata.normalize("NFKC", text).split())
        assert src_tok.decode(src_tok.encode(text)) == normalised
    # Subwords: far fewer tokens than characters, and held-out text is nearly all known.
    assert sum(len(src_tok.encode(t)) for t in en) < 0.4 * sum(len(t) for t in en)
    held_out = head("test2016.de", 200)
    assert unknowns(src_tok, held_out) <= 0.01 * sum(len(src_tok.encode(t)) for t in held_out)


def test_seen_tokens_label_what_the_model_saw():
    from heedful.data.tokenizers import seen_tokens

    assert seen_tokens(CharTokenizer("abc"), "a猫b") == ["a", "<unk> (猫)", "b"]
    assert seen_tokens(CharTokenizer("abc"), "cab") == ["c", "a", "b"]
