"""int8 dynamic quantization (Translator.load(quantize="int8"), --quantize int8).

The criterion for quality: on 200 held-out words of a trained reverse-task model, the int8
model's sacreBLEU (over characters) is at most 0.5 below the float32 model's, and at least 95%
of its outputs are the float32 outputs exactly (it measured +0.3 BLEU, 199 of 200 the same).
A broken quantization (wrong layers, wrong scales) changes far more than that; one that
silently did nothing is caught by the test that counts the int8 layers and sees the
log-probabilities move.
"""

from __future__ import annotations

import warnings

import pytest
import sacrebleu
import torch
from click.testing import CliRunner
from torch import nn
from torch.ao.nn.quantized import dynamic as quantized

from heedful.checkpoint import GenerationConfig, save_model_dir
from heedful.cli import main
from heedful.config import ModelConfig
from heedful.data.tokenizers import CharTokenizer
from heedful.models.build import build_model
from heedful.translator import Translator


def linears(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]


def int8_linears(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if isinstance(m, quantized.Linear)]


def test_every_linear_becomes_int8_and_nothing_else_changes(reverse_model_dir):
    fp32 = Translator.load(reverse_model_dir)
    int8 = Translator.load(reverse_model_dir, quantize="int8")
    assert int8_linears(int8.model) == linears(fp32.model)
    assert linears(int8.model) == []
    assert int8.model.src_embed.tokens.weight.dtype == torch.float32  # embeddings stay float
    src = torch.tensor([[5, 6, 7, 8]])
    tgt_in = torch.tensor([[1, 8, 7]])
    with torch.no_grad():
        a = fp32.model(src, tgt_in).logits.log_softmax(-1)
        b = int8.model(src, tgt_in).logits.log_softmax(-1)
    difference = (a - b).abs().max()
    assert 0 < difference < 0.5  # int8 rounding moves the numbers, a little


def test_int8_loses_at_most_half_a_bleu_point(reverse_model_dir, reverse_test_set):
    sources, references = zip(*reverse_test_set)
    outputs = {}
    for quantize in (None, "int8"):
        translator = Translator.load(reverse_model_dir, quantize=quantize)
        outputs[quantize] = [t.text for t in translator.translate(list(sources), num_beams=3)]
    refs = [list(references)]  # one-word sentences: BLEU over characters (tokenize="char")
    bleu = {q: sacrebleu.corpus_bleu(o, refs, tokenize="char").score for q, o in outputs.items()}
    same = sum(a == b for a, b in zip(outputs[None], outputs["int8"])) / len(sources)
    assert bleu[None] > 80  # the model has learned the task: there is a quality to keep
    assert bleu["int8"] >= bleu[None] - 0.5, bleu
    assert same >= 0.95, same


def test_quantizing_silences_only_its_own_warnings(reverse_model_dir):
    filters = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Translator.load(reverse_model_dir, quantize="int8")
        warnings.warn("torch.quantize_per_tensor: still reported elsewhere", stacklevel=1)
    assert [str(w.message) for w in caught] == [
        "torch.quantize_per_tensor: still reported elsewhere"
    ]
    assert warnings.filters == filters  # nothing left behind by the call


def test_an_rnn_with_luong_concat_keeps_the_one_linear_it_slices(tmp_path):
    """Luong's concat score reads W_a's weight directly, so W_a stays float; the rest is int8."""
    tokenizer = CharTokenizer.train(["abcdef"])
    config = ModelConfig(arch="rnn", attention="luong-concat", d_model=16, hidden_size=16)
    torch.manual_seed(0)
    model = build_model(config, len(tokenizer), len(tokenizer))
    save_model_dir(tmp_path / "rnn", model, config, tokenizer, tokenizer, GenerationConfig())
    int8 = Translator.load(tmp_path / "rnn", quantize="int8")
    assert [n for n in linears(int8.model)] == ["decoder.attention.w_a"]
    assert len(int8_linears(int8.model)) == len(linears(model)) - 1
    [t] = int8.translate(["abc"], num_beams=2, need_weights=True)
    assert t.attention is not None


def test_unknown_quantization_and_gpu_devices_are_refused(reverse_model_dir):
    with pytest.raises(ValueError, match="unknown quantization 'int4'; choose one of int8"):
        Translator.load(reverse_model_dir, quantize="int4")
    with pytest.raises(ValueError, match="runs on the CPU only"):
        Translator.load(reverse_model_dir, device="meta", quantize="int8")
    result = CliRunner().invoke(main, ["translate", str(reverse_model_dir), "--quantize", "int4"])
    assert result.exit_code == 2
    assert "Invalid value for '--quantize': 'int4' is not 'int8'" in result.output


def test_the_command_translates_with_int8(reverse_model_dir, reverse_test_set):
    words = [w for w, _ in reverse_test_set[:20]]
    runner = CliRunner()
    fp32 = runner.invoke(main, ["translate", str(reverse_model_dir)], input="\n".join(words))
    int8 = runner.invoke(
        main, ["translate", str(reverse_model_dir), "--quantize", "int8"], input="\n".join(words)
    )
    assert fp32.exit_code == 0 and int8.exit_code == 0, int8.output
    assert len(int8.output.splitlines()) == len(words)
    same = sum(a == b for a, b in zip(fp32.output.splitlines(), int8.output.splitlines()))
    assert same >= 18
