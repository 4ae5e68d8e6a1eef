"""Tiny random-weight Hugging Face seq2seq models, saved with save_pretrained: nothing is
downloaded. Each builder trains its tokenizer on TEXTS on the spot (SentencePiece, or a
byte-level BPE for BART) and writes a model directory as `huggingface-cli download` would
leave one: config.json, generation_config.json, model.safetensors and tokenizer files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

TEXTS = [
    "a small dog runs in the park .",
    "the man plays a guitar .",
    "two girls sit on a bench .",
    "ein kleiner hund läuft im park .",
    "der mann spielt gitarre .",
    "zwei mädchen sitzen auf einer bank .",
]
SIZES = dict(
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=128,
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
)


def _sentencepiece(prefix: Path, size: int = 48, **ids) -> list[tuple[str, float]]:
    """Train a unigram SentencePiece model on TEXTS; its (piece, score) list."""
    import sentencepiece as spm

    ids = {"bos_id": -1, "eos_id": -1, "unk_id": 0, "pad_id": -1, **ids}
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXTS * 20),
        model_prefix=str(prefix),
        vocab_size=size,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
        **ids,
    )
    sp = spm.SentencePieceProcessor(model_file=str(prefix) + ".model")
    return [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]


def _save(model, tokenizer, directory: Path, seed: int) -> Path:
    torch.manual_seed(seed)
    for p in model.parameters():  # larger than the init's 0.02, so outputs differ by input
        if p.dim() == 2:  # matrices and embeddings; norms and biases keep their init
            torch.nn.init.normal_(p, std=0.3)
    model.eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def build_marian(directory: Path, seed: int = 0) -> Path:
    """opus-mt's layout: source.spm, target.spm and one vocab.json; </s> 0, <unk> 1, <pad> last."""
    import transformers as hf

    directory.mkdir(parents=True, exist_ok=True)
    pieces = _sentencepiece(directory / "sp")
    vocab = {"</s>": 0, "<unk>": 1}
    for piece, _ in pieces:
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    for name in ("source.spm", "target.spm"):
        shutil.copy(directory / "sp.model", directory / name)
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    for leftover in ("sp.model", "sp.vocab"):
        (directory / leftover).unlink()
    tokenizer = hf.MarianTokenizer(
        str(directory / "source.spm"), str(directory / "target.spm"), str(directory / "vocab.json")
    )
    config = hf.MarianConfig(
        vocab_size=len(vocab),
        pad_token_id=vocab["<pad>"],
        eos_token_id=0,
        decoder_start_token_id=vocab["<pad>"],
        forced_eos_token_id=None,
        **SIZES,
    )
    model = hf.MarianMTModel(config)
    model.generation_config.bad_words_ids = [[vocab["<pad>"]]]  # as opus-mt's
    return _save(model, tokenizer, directory, seed)


def build_bart(directory: Path, seed: int = 0) -> Path:
    """A byte-level BPE vocabulary as BART's; decoding starts with </s>."""
    import transformers as hf
    from tokenizers import ByteLevelBPETokenizer

    directory.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    bpe.train_from_iterator(TEXTS * 20, vocab_size=300, min_frequency=1, special_tokens=specials)
    model_json = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model_json["merges"]]
    tokenizer = hf.BartTokenizer(vocab=model_json["vocab"], merges=merges)
    config = hf.BartConfig(
        vocab_size=len(tokenizer),
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_eos_token_id=None,
        forced_bos_token_id=None,
        **SIZES,
    )
    return _save(hf.BartForConditionalGeneration(config), tokenizer, directory, seed)


def build_mbart(directory: Path, seed: int = 0) -> Path:
    """mBART-50's layout: language codes after the pieces; the target's code comes first."""
    import transformers as hf

    directory.mkdir(parents=True, exist_ok=True)
    pieces = _sentencepiece(directory / "sp")
    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    vocab += [p for p in pieces if p[0] != "<unk>"]
    tokenizer = hf.MBartTokenizer(vocab=vocab, src_lang="en_XX", tgt_lang="de_DE")
    for leftover in ("sp.model", "sp.vocab"):
        (directory / leftover).unlink()
    config = hf.MBartConfig(
        vocab_size=len(tokenizer),
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_eos_token_id=None,
        forced_bos_token_id=tokenizer.convert_tokens_to_ids("de_DE"),
        **SIZES,
    )
    return _save(hf.MBartForConditionalGeneration(config), tokenizer, directory, seed)


def build_m2m100(directory: Path, seed: int = 0) -> Path:
    """M2M100's layout (NLLB's is the same model): vocab.json and a SentencePiece model,
    language codes __xx__ after them."""
    import transformers as hf

    directory.mkdir(parents=True, exist_ok=True)
    pieces = _sentencepiece(directory / "spm")
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for piece, _ in pieces:
        vocab.setdefault(piece, len(vocab))
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tokenizer = hf.M2M100Tokenizer(
        str(directory / "vocab.json"), str(directory / "spm.model"), src_lang="en", tgt_lang="de"
    )
    config = hf.M2M100Config(
        # the language codes come after the pieces, then "made-up words" (as in M2M100's 128,112)
        vocab_size=max(tokenizer.lang_token_to_id.values()) + tokenizer.num_madeup_words + 1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_eos_token_id=None,
        **SIZES,
    )
    model = hf.M2M100ForConditionalGeneration(config)
    return _save(model, tokenizer, directory, seed)


def build_t5(directory: Path, seed: int = 0) -> Path:
    """T5's layout: <pad> 0 (also what decoding starts with), </s> 1, <unk> 2, relative
    position buckets instead of position embeddings, no √d_k scaling."""
    import transformers as hf

    directory.mkdir(parents=True, exist_ok=True)
    pieces = _sentencepiece(directory / "spiece", pad_id=0, eos_id=1, unk_id=2)
    tokenizer = hf.T5Tokenizer(vocab=pieces, extra_ids=0)
    config = hf.T5Config(
        vocab_size=len(tokenizer),
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        dropout_rate=0.0,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        relative_attention_num_buckets=8,
    )
    for leftover in ("spiece.model", "spiece.vocab"):
        (directory / leftover).unlink()
    return _save(hf.T5ForConditionalGeneration(config), tokenizer, directory, seed)


def build_t5_v1_1(directory: Path, seed: int = 0) -> Path:
    """T5 v1.1 / FLAN-T5's shape: gated-GELU feed-forward and heads whose widths do not add up
    to d_model (6 heads of 8 in a d_model of 32, as FLAN-T5 small's 6 of 64 in 512)."""
    import transformers as hf

    directory.mkdir(parents=True, exist_ok=True)
    pieces = _sentencepiece(directory / "spiece", pad_id=0, eos_id=1, unk_id=2)
    tokenizer = hf.T5Tokenizer(vocab=pieces, extra_ids=0)
    config = hf.T5Config(
        vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=2,
        num_decoder_layers=2, num_heads=6, dropout_rate=0.0, pad_token_id=0, eos_token_id=1,
        decoder_start_token_id=0, relative_attention_num_buckets=8,
        feed_forward_proj="gated-gelu", tie_word_embeddings=False,
    )  # fmt: skip
    for leftover in ("spiece.model", "spiece.vocab"):
        (directory / leftover).unlink()
    return _save(hf.T5ForConditionalGeneration(config), tokenizer, directory, seed)


BUILDERS = {
    "marian": build_marian,
    "bart": build_bart,
    "mbart": build_mbart,
    "m2m_100": build_m2m100,
    "t5": build_t5,
}
