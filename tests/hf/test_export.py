"""heedful export --format huggingface: a heedful Transformer as a Marian model directory.

A random tiny post-norm Transformer (every norm random too, so a weight in the wrong place or
a dimension in the wrong order shows) with SentencePiece tokenizers is exported; transformers'
MarianMTModel and MarianTokenizer load the result and their greedy generate() must write our
greedy outputs, token for token, and heedful.load reads the export back to the same outputs.
"""

from __future__ import annotations

import random
import warnings

import pytest
import torch
from click.testing import CliRunner

from heedful.checkpoint.model_dir import GenerationConfig, save_model_dir
from heedful.cli import main
from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig
from heedful.data.tokenizers import EOS_ID, SentencePieceTokenizer
from heedful.inference.translator import Translator
from heedful.models.build import build_model

from .builders import TEXTS

WORDS = "a small dog runs in the park man plays guitar two girls sit on bench".split()


def heedful_model_dir(path, tie=False, norm="post", kv_heads=None):
    english = [t for t in TEXTS if t.split()[0] in ("a", "the", "two")] * 20
    src = SentencePieceTokenizer.train(english, vocab_size=34)
    tgt = SentencePieceTokenizer.train(TEXTS[3:] * 20, vocab_size=36)
    config = ModelConfig(
        d_model=32,
        num_heads=4,
        d_ff=64,
        dropout=0.0,
        max_positions=64,
        norm=norm,
        num_kv_heads=kv_heads,
        encoder=TextEncoderConfig(layers=2),
        decoder=DecoderConfig(layers=2, tie_embeddings=tie),
    )
    torch.manual_seed(1)
    model = build_model(config, len(src), len(tgt))
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):  # not the identity they start as
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0.0, 0.1)
        model.decoder.generator.bias[EOS_ID] += 1.7  # most outputs end before their limit; some not
    generation = GenerationConfig(num_beams=4, max_len_ratio=1.5, max_len_offset=5)
    return save_model_dir(path, model, config, src, tgt, generation)


def texts(n: int = 60) -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 8))) for _ in range(n)]


@pytest.mark.parametrize("tie", [False, True])
def test_transformers_gives_our_greedy_outputs(tmp_path, tie):
    import transformers as hf

    model_dir = heedful_model_dir(tmp_path / "model", tie=tie)
    result = CliRunner().invoke(
        main, ["export", str(model_dir), "--format", "huggingface", "-o", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    ours = Translator.load(model_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MarianTokenizer recommends sacremoses
        tokenizer = hf.MarianTokenizer.from_pretrained(tmp_path / "out")
    marian = hf.MarianMTModel.from_pretrained(tmp_path / "out").eval()
    finished = 0
    for text in texts():
        [[expected]] = ours.search(torch.tensor([ours.src_tokenizer.encode(text)]), 1, 1)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
        assert ids[0].tolist() == ours.src_tokenizer.encode(text)
        limit = ours.generation.max_output_length(ids.size(1))
        out = marian.generate(input_ids=ids, num_beams=1, do_sample=False, max_new_tokens=limit)
        produced = out[0, 1:].tolist()  # after the decoder start
        assert produced[: len(expected.produced(EOS_ID))] == expected.produced(EOS_ID), text
        decoded = tokenizer.decode(out[0], skip_special_tokens=True)
        assert decoded == ours.tgt_tokenizer.decode(expected.tokens)
        finished += expected.finished
    assert 0 < finished < len(texts())  # both endings were compared


def test_heedful_reads_its_export_back(tmp_path):
    """heedful.load opens the export as any Marian model: with MarianTokenizer's </s> at the
    end of each source (which our own model never read), as generate() would search it."""
    from heedful.hf.export import export_huggingface

    model_dir = heedful_model_dir(tmp_path / "model")
    exported = Translator.load(export_huggingface(model_dir, tmp_path / "out"))
    ours = Translator.load(model_dir)
    assert exported.model.hf_model_type == "marian"
    text = texts(1)[0]
    [one] = exported.translate([text], num_beams=1, need_weights=True)
    assert one.source_tokens == [*ours.src_tokenizer.tokens(text), "</s>"]
    marian, tokenizer = exported.model.hf, exported.src_tokenizer.tokenizer
    ids = tokenizer(text, return_tensors="pt").input_ids
    limit = exported.generation.max_output_length(ids.size(1))
    out = marian.generate(input_ids=ids, num_beams=1, do_sample=False, max_new_tokens=limit)
    assert one.text == tokenizer.decode(out[0], skip_special_tokens=True)
    assert one.attention.shape[-1] == len(one.source_tokens)


def test_grouped_query_attention_is_refused_by_name(tmp_path):
    """Marian and Pegasus give each head its own keys and values: a model whose heads share
    them (model.num_kv_heads) is refused before anything is written."""
    from heedful.hf.export import export_huggingface
    from heedful.io import CheckpointError

    model_dir = heedful_model_dir(tmp_path / "model", kv_heads=2)
    with pytest.raises(CheckpointError, match="4 heads share 2 key/value heads"):
        export_huggingface(model_dir, tmp_path / "out")
    assert not (tmp_path / "out").exists()
