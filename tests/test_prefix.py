"""Prefix-constrained decoding: the output starts with the prefix, and what follows is what the
model, given the prefix, would have chosen (recomputed here with plain teacher forcing)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from heedful.config import ModelConfig
from heedful.data.tokenizers import BOS_ID, EOS_ID
from heedful.inference.translator import Translator
from heedful.models.build import build_model
from heedful.search.beam import beam_search
from heedful.search.decoding import greedy_search
from heedful.search.prefix import prefix_tensor

MODELS = Path(__file__).resolve().parent / "golden" / "models"


def models():
    torch.manual_seed(0)
    yield build_model(ModelConfig(d_model=32, num_heads=4, d_ff=64, dropout=0.0), 20, 15).eval()
    yield build_model(
        ModelConfig(arch="rnn", d_model=16, hidden_size=32, dropout=0.0), 20, 15
    ).eval()


def forced_greedy(model, src: torch.Tensor, prefix: list[int], limit: int) -> list[int]:
    """Greedy decoding after `prefix`, one whole teacher-forced pass per step: the produced
    ids, </s> included when reached."""
    out = list(prefix)
    while len(out) < limit and (not out or out[-1] != EOS_ID or len(out) <= len(prefix)):
        with torch.no_grad():
            logits = model(src, torch.tensor([[BOS_ID, *out]])).logits
        out.append(int(logits[0, -1].argmax()))
        if out[-1] == EOS_ID:
            break
    return out


@pytest.mark.parametrize("prefix", [[5], [7, 3, 9], [4, 4, 4, 4, 4, 4]])
def test_greedy_and_a_beam_of_one_continue_as_forced_decoding_does(prefix):
    src = torch.tensor([[4, 9, 11, 6, 7], [8, 5, 12, 0, 0]])
    for model in models():
        limit = 12
        lengths = {"max_len_ratio": 0.0, "max_len_offset": limit}
        greedy = greedy_search(model, src, BOS_ID, EOS_ID, prefix=[prefix, []], **lengths)
        beams = beam_search(model, src, BOS_ID, EOS_ID, 1, 1, 0.0, prefix=[prefix, []], **lengths)
        for b, (hyp, [beam]) in enumerate(zip(greedy, beams)):
            wanted = prefix if b == 0 else []
            source = src[b : b + 1, : int((src[b] != 0).sum())]
            assert hyp.tokens[: len(wanted)] == wanted
            assert hyp.produced(EOS_ID) == forced_greedy(model, source, wanted, limit)
            assert beam.produced(EOS_ID) == hyp.produced(EOS_ID)
            assert beam.score == pytest.approx(hyp.score, abs=1e-4)


def test_every_beam_output_starts_with_the_prefix_and_scores_it():
    src = torch.tensor([[4, 9, 11, 6, 7]])
    for model in models():
        [hyps] = beam_search(
            model, src, BOS_ID, EOS_ID, 4, 4, 1.0, max_len_ratio=0.0, max_len_offset=8,
            prefix=[[6, 6]],
        )  # fmt: skip
        assert hyps and all(h.tokens[:2] == [6, 6] for h in hyps)
        for hyp in hyps:
            with torch.no_grad():
                out = model(src, torch.tensor([hyp.decoder_input(BOS_ID, EOS_ID)]))
            produced = hyp.produced(EOS_ID)
            log_probs = out.logits[0].log_softmax(-1)[torch.arange(len(produced)), produced]
            assert hyp.score == pytest.approx(float(log_probs.sum()), abs=1e-4)


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_the_prefix_appears_verbatim_and_its_attention_is_replayed(arch):
    translator = Translator.load(MODELS / arch)
    texts = ["abcdef", "hgfe", "abc"]
    out = translator.translate(texts, prefixes=["fed", "h", None], need_weights=True)
    plain = translator.translate(texts)
    assert out[0].text.startswith("fed") and out[1].text.startswith("h")
    assert out[2].text == plain[2].text
    assert out[0].text == plain[0].text  # the model's own beginning: nothing changes
    assert out[1].attention.shape[0] == len(out[1].tokens)  # the forced step has attention too


def test_beam_alternatives_all_start_with_the_prefix():
    translator = Translator.load(MODELS / "rnn")
    [out] = translator.translate(["abcdef"], num_beams=3, n_best=3, prefixes=["b"])
    assert all(t.text.startswith("b") for t in [out, *out.alternatives])


# Bad input: a prefix longer than the output limit is refused, naming both numbers
@pytest.mark.parametrize("search", ["greedy", "beam", "sample"])
def test_a_prefix_longer_than_the_output_limit_is_an_error(search):
    translator = Translator.load(MODELS / "rnn")  # limit: 1.5 · 2 + 4 = 7 for "ab"
    settings = {"greedy": {"num_beams": 1}, "beam": {"num_beams": 2}, "sample": {"sample": True}}
    with pytest.raises(ValueError, match="text 1: the prefix has 8 tokens.*limit of 7"):
        translator.translate(["ab"], prefixes=["abcdefgh"], **settings[search])
    translator.translate(["ab"], prefixes=["abcdefg"], **settings[search])  # 7 fits


def test_prefixes_must_match_the_texts():
    translator = Translator.load(MODELS / "rnn")
    with pytest.raises(ValueError, match="2 prefixes for 1 texts"):
        translator.translate(["ab"], prefixes=["a", "b"])


def test_prefix_tensor_pads_with_minus_one():
    assert prefix_tensor([[], []], "cpu") is None
    assert prefix_tensor([[3], [], [4, 5]], "cpu").tolist() == [[3, -1], [-1, -1], [4, 5]]
