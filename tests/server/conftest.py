"""The server's tests share one tiny model: a character-level Transformer whose </s> is
suppressed, so every output runs to its length limit (1.0 · source length + OFFSET) and lengths
are predictable."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from heedful.config import DecoderConfig, GenerationConfig, ModelConfig, TextEncoderConfig
from heedful.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID, CharTokenizer
from heedful.inference.translator import Translator
from heedful.models.build import build_model

from .helpers import OFFSET


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    from heedful.checkpoint.model_dir import save_model_dir

    tokenizer = CharTokenizer.train(["abcdefghijklmnopqrstuvwxyz ABC.,"])
    config = ModelConfig(
        d_model=16,
        num_heads=2,
        d_ff=32,
        dropout=0.0,
        encoder=TextEncoderConfig(layers=1),
        decoder=DecoderConfig(layers=1),
    )
    torch.manual_seed(0)
    model = build_model(config, len(tokenizer), len(tokenizer))
    with torch.no_grad():  # only letters come out, and never </s>: outputs reach their limit
        model.decoder.generator.bias[[PAD_ID, BOS_ID, UNK_ID, EOS_ID]] -= 10.0
    generation = GenerationConfig(num_beams=1, max_len_ratio=1.0, max_len_offset=OFFSET)
    path = tmp_path_factory.mktemp("serve") / "model"
    save_model_dir(path, model, config, tokenizer, tokenizer, generation, ("en", "de"))
    return path


@pytest.fixture(scope="session")
def translator(model_dir) -> Translator:
    return Translator.load(model_dir)
