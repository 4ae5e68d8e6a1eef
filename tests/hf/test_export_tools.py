"""Hugging Face exports that other tools take as they are (issue 29, part 2).

A random tiny pre-norm Transformer with one SentencePiece vocabulary (as the Multi30k recipes)
exports as Pegasus; transformers' AutoTokenizer / AutoModelForSeq2SeqLM load it and
`generate(**tokenizer(text))`, with no other argument, writes heedful's translation;
heedful.load reads it back with its languages; CTranslate2's own ct2-transformers-converter
converts it and ctranslate2.Translator writes our outputs. A character-level post-norm model
with two vocabularies (as the demo's) exports too.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import warnings
from functools import partial
from pathlib import Path

import pytest
import torch

import heedful
from heedful.checkpoint.model_dir import GenerationConfig, save_model_dir
from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig
from heedful.data.tokenizers import EOS_ID, CharTokenizer, SentencePieceTokenizer
from heedful.hf.export import export_huggingface
from heedful.inference.translator import Translator
from heedful.models.build import build_model

from .builders import TEXTS

WORDS = "a small dog runs in the park man plays guitar two girls sit on bench".split()
# alpha 0: generate() ranks beams as ours then (hf/export.py, generation_config)
SEARCH = GenerationConfig(num_beams=4, length_penalty=0.0, max_len_ratio=1.5, max_len_offset=5)
# the demo's: one limit for every source, which generation_config.json holds exactly
DEMO_SEARCH = GenerationConfig(
    num_beams=3, length_penalty=0.0, max_len_ratio=0.0, max_len_offset=12
)


def texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 8))) for _ in range(n)]


def random_model(config: ModelConfig, src_size: int, tgt_size: int):
    """Every norm random too, so that a weight in the wrong place shows."""
    torch.manual_seed(1)
    model = build_model(config, src_size, tgt_size)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0.0, 0.1)
        model.decoder.generator.bias[EOS_ID] += 1.7  # most outputs end before their limit
    return model


def pre_norm_sentencepiece(root: Path, share: bool = False) -> Path:
    """As the Multi30k recipes: pre-norm, tied, one SentencePiece vocabulary, en -> de;
    share: one token table for both sides too (the tiny recipe)."""
    tokenizer = SentencePieceTokenizer.train(TEXTS * 20, vocab_size=40)
    config = ModelConfig(
        d_model=32,
        num_heads=4,
        d_ff=64,
        dropout=0.0,
        norm="pre",
        encoder=TextEncoderConfig(layers=2, share_embeddings=share),
        decoder=DecoderConfig(layers=2, tie_embeddings=True),
    )
    model = random_model(config, len(tokenizer), len(tokenizer))
    return save_model_dir(root, model, config, tokenizer, tokenizer, SEARCH, ("en", "de"))


def post_norm_characters(root: Path) -> Path:
    """As the demo's: post-norm, one character vocabulary per side, each with characters the
    other lacks (x, y, z only in sources; Q only in targets)."""
    src = CharTokenizer.train([*TEXTS, "xyz"])
    tgt = CharTokenizer.train([*(t.upper()[::-1] for t in TEXTS), "Q"])
    config = ModelConfig(
        d_model=32,
        num_heads=4,
        d_ff=64,
        dropout=0.0,
        encoder=TextEncoderConfig(layers=2),
        decoder=DecoderConfig(layers=2),
    )
    model = random_model(config, len(src), len(tgt))
    return save_model_dir(root, model, config, src, tgt, DEMO_SEARCH, ("dates", "iso"))


MODELS = {
    "pre-norm-sentencepiece": (pre_norm_sentencepiece, "pegasus", ("en", "de"), SEARCH),
    "shared-embeddings": (
        partial(pre_norm_sentencepiece, share=True),
        "pegasus",
        ("en", "de"),
        SEARCH,
    ),
    "post-norm-characters": (post_norm_characters, "marian", ("dates", "iso"), DEMO_SEARCH),
}


@pytest.fixture(scope="module", params=list(MODELS))
def exported(request, tmp_path_factory):
    """(model dir, its export, the architecture it exports as, its languages, its search)."""
    make, model_type, languages, search = MODELS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    model_dir = make(root / "model")
    return model_dir, export_huggingface(model_dir, root / "hf"), model_type, languages, search


def load_hf(directory: Path):
    import transformers as hf

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tokenizer = hf.AutoTokenizer.from_pretrained(directory)
        model = hf.AutoModelForSeq2SeqLM.from_pretrained(directory).eval()
    return tokenizer, model


def test_the_export_computes_our_log_probabilities(exported):
    model_dir, directory, model_type, _, _ = exported
    tokenizer, model = load_hf(directory)
    assert model.config.model_type == model_type
    ours = Translator.load(model_dir)
    source = "a xyz Q dog"  # a character only the source, one only the target knows
    src = torch.tensor([ours.src_tokenizer.encode(source)])
    tgt_in = torch.tensor([[1, 5, 9, 7, 12]])  # <s> then any target ids
    start = model.config.decoder_start_token_id  # what the export's decoder reads as our <s>
    with torch.no_grad():
        expected = ours.model(src, tgt_in).logits.log_softmax(-1)  # (1, T, V)
        hf_in = tgt_in.masked_fill(tgt_in == 1, start)
        ids = tokenizer(source, return_tensors="pt").input_ids
        got = model(input_ids=ids, decoder_input_ids=hf_in).logits.log_softmax(-1)
    # the target's tokens are the export's first ids; any after them it never produces
    torch.testing.assert_close(got[..., : expected.size(-1)], expected, atol=1e-4, rtol=1e-4)
    assert bool((got[..., expected.size(-1) :] < -1000).all())


def test_generate_with_no_arguments_gives_our_translations(exported):
    """The source as `tokenizer(text)` gives it (no </s> added), the search as
    generation_config.json sets it: every output heedful finished is generate()'s."""
    model_dir, directory, _, _, search = exported
    tokenizer, model = load_hf(directory)
    ours = Translator.load(model_dir)
    compared = 0
    for text in [*texts(30), "a xyz Q dog"]:
        [[best]] = ours.search(torch.tensor([ours.src_tokenizer.encode(text)]), search.num_beams)
        inputs = tokenizer(text, return_tensors="pt")
        assert inputs.input_ids.size(1) == len(ours.src_tokenizer.encode(text))  # no </s>
        if not best.finished and search.max_len_ratio:  # generate() goes on past our limit
            continue  # (hf/export.py, generation_config, says why)
        out = model.generate(**inputs)  # generation_config.json's settings
        assert tokenizer.decode(out[0], skip_special_tokens=True) == ours.translate([text])[0].text
        compared += 1
    assert compared >= 20


def test_the_export_keeps_the_language_pair(exported):
    _, directory, _, languages, _ = exported
    assert heedful.load(directory).languages == languages


def test_ctranslate2s_own_converter_gives_our_outputs(exported, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    model_dir, directory, _, _, search = exported
    script = Path(sys.executable).with_name("ct2-transformers-converter")
    result = subprocess.run(
        [str(script), "--model", str(directory), "--output_dir", str(tmp_path / "ct2")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    tokenizer, _ = load_hf(directory)
    translator = ctranslate2.Translator(str(tmp_path / "ct2"))
    ours = Translator.load(model_dir)
    for text in texts(20, seed=1):
        ids = tokenizer(text).input_ids
        [result] = translator.translate_batch(
            [tokenizer.convert_ids_to_tokens(ids)],
            beam_size=search.num_beams,
            length_penalty=search.length_penalty,
            max_decoding_length=search.max_output_length(len(ids)),
            min_decoding_length=0,  # CTranslate2's default 1 forbids an empty output
        )
        pieces = tokenizer.convert_tokens_to_ids(result.hypotheses[0])
        assert tokenizer.decode(pieces, skip_special_tokens=True) == ours.translate([text])[0].text


def test_the_generation_config_carries_our_search(exported):
    _, directory, _, _, search = exported
    settings = json.loads((directory / "generation_config.json").read_text())
    assert settings["num_beams"] == search.num_beams
    assert settings["length_penalty"] == search.length_penalty
    positions = json.loads((directory / "config.json").read_text())["max_position_embeddings"]
    limit = search.max_output_length(positions)
    assert settings["max_new_tokens"] == min(limit, positions - 1)


def test_a_multilingual_model_keeps_its_target_tokens_and_pairs(tmp_path):
    """As configs/multi30k/multilingual.yaml: a source starts with its target token (<2de>),
    one symbol of the one vocabulary; the export reads it so, and keeps every pair."""
    from heedful.hf.layout import exported_pairs

    lines = [f"<2{lang}> {t}" for lang in ("de", "fr") for t in TEXTS] * 10
    tokenizer = SentencePieceTokenizer.train(lines, vocab_size=42, symbols=["<2de>", "<2fr>"])
    config = ModelConfig(
        d_model=16,
        num_heads=2,
        d_ff=32,
        dropout=0.0,
        norm="pre",
        encoder=TextEncoderConfig(layers=1),
        decoder=DecoderConfig(layers=1, tie_embeddings=True),
    )
    pairs = (("en", "de"), ("en", "fr"))
    model = random_model(config, len(tokenizer), len(tokenizer))
    model_dir = save_model_dir(
        tmp_path / "m", model, config, tokenizer, tokenizer, SEARCH, pairs[0], pairs=pairs
    )
    exported = export_huggingface(model_dir, tmp_path / "hf")
    hf_tokenizer, _ = load_hf(exported)
    for text in ["<2de> a dog runs", "<2fr> two girls sit", "a small dog"]:
        assert hf_tokenizer(text).input_ids == tokenizer.encode(text), text
    assert exported_pairs(exported) == pairs
