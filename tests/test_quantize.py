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
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner
from margins import clear_disagreements
from torch import nn
from torch.ao.nn.quantized import dynamic as quantized

from heedful.checkpoint.model_dir import GenerationConfig, save_model_dir
from heedful.cli import main
from heedful.config import DecoderConfig, ModelConfig
from heedful.data.batching import collate
from heedful.data.tokenizers import PAD_ID, CharTokenizer
from heedful.inference.translator import Translator
from heedful.models.build import build_model


def linears(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]


def int8_linears(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if isinstance(m, quantized.Linear)]


def test_every_linear_becomes_int8_and_nothing_else_changes(reverse_model_dir, reverse_test_set):
    fp32 = Translator.load(reverse_model_dir)
    int8 = Translator.load(reverse_model_dir, quantize="int8")
    assert int8_linears(int8.model) == linears(fp32.model)
    assert linears(int8.model) == []
    assert int8.model.encoder.embed.tokens.weight.dtype == torch.float32  # embeddings stay float
    tokenizer = fp32.src_tokenizer
    src, tgt_in, tgt_out = collate(
        [tokenizer.encode(s) for s, _ in reverse_test_set],
        [tokenizer.encode(t) for _, t in reverse_test_set],
    )
    with torch.no_grad():
        a = fp32.model(src, tgt_in).logits.log_softmax(-1)  # (B, T, V)
        b = int8.model(src, tgt_in).logits.log_softmax(-1)
    assert (a - b).abs().max() > 0  # int8 rounding moves the numbers
    # ... but not the decisions: wherever float32's best token leads the second by more than
    # a nat, int8 picks the same one. (A bound on the log-probabilities themselves is not
    # portable: those of unlikely tokens moved by up to 1.8 here, and by other amounts on
    # CPUs with other int8 kernels.)
    best_two = a.topk(2, dim=-1).values
    clear = (best_two[..., 0] - best_two[..., 1] > 1.0) & (tgt_out != PAD_ID)
    assert clear.sum() > 0.5 * (tgt_out != PAD_ID).sum()  # the model is mostly sure of itself
    assert torch.equal(a.argmax(-1)[clear], b.argmax(-1)[clear])


def test_int8_changes_no_clear_decision(reverse_model_dir, reverse_test_set):
    """int8 may flip a near-tie, never a decision float32 made clearly.

    Counting only disagreements where float32's margin was clear (over 1 nat, where int8's
    rounding moved log-probabilities by 0.5 at most) holds on every CPU. The BLEU cost of int8
    (at most 0.5 points) is measured on a real model by benchmarks/int8_per_cpu.py: on this
    tiny model one word in 200 moves char-BLEU by about 0.5, so a BLEU bound here pinned which
    near-ties each CPU's kernels happened to flip."""
    sources = [s for s, _ in reverse_test_set]
    fp32 = Translator.load(reverse_model_dir)
    int8 = Translator.load(reverse_model_dir, quantize="int8")
    ours = fp32.translate(sources, num_beams=1)
    theirs = int8.translate(sources, num_beams=1)
    assert clear_disagreements(fp32, sources, ours, theirs, margin=1.0) == []
    assert any(a.score != b.score for a, b in zip(ours, theirs))  # int8 did run


def test_the_margin_rule_sees_a_real_disagreement(reverse_model_dir, reverse_test_set):
    """The rule above can fail: outputs that differ where float32 was sure are counted."""
    sources = [s for s, _ in reverse_test_set[:20]]
    fp32 = Translator.load(reverse_model_dir)
    ours = fp32.translate(sources, num_beams=1)
    wrong = [replace(t, tokens=t.tokens[:1] + ["a" if t.tokens[1] != "a" else "b"]) for t in ours]
    assert len(clear_disagreements(fp32, sources, ours, wrong, margin=1.0)) >= 15


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
    config = ModelConfig(
        arch="rnn", d_model=16, hidden_size=16, decoder=DecoderConfig(attention="luong-concat")
    )
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
    # the command's outputs are the API's (which test_int8_changes_no_clear_decision checks)
    api = Translator.load(reverse_model_dir, quantize="int8").translate(words)
    assert int8.output.splitlines() == [t.text for t in api]
