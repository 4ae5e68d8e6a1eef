"""Translator: raw text in, Translation out; its search and replay are what trace, explain and
the server build on. The models are the two tiny committed ones of tests/golden (they reverse
letters, with clear margins), so nothing is trained here."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from heedful.checkpoint.model_dir import read_model_config
from heedful.config import ConfigError
from heedful.data.tokenizers import BOS_ID, EOS, EOS_ID
from heedful.inference.translator import Translator, blank_outputs, check_quantize

MODELS = Path(__file__).resolve().parent / "golden" / "models"


@pytest.fixture(scope="module", params=["transformer", "rnn"])
def translator(request) -> Translator:
    return Translator.load(MODELS / request.param)


def source(translator: Translator, text: str) -> torch.Tensor:
    return torch.tensor([translator.src_tokenizer.encode(text)])  # (1, S)


def test_the_translator_knows_its_model_config(translator):
    _, saved = read_model_config(MODELS / translator.config.arch)
    assert translator.config == saved == translator.model.config


def test_translate_keeps_order_answers_blank_texts_and_ranks_alternatives(translator):
    texts = ["abcd", "", "  ", "hgf", "abcd"]
    out = translator.translate(texts, num_beams=3, n_best=2)
    assert [t.text for t in out] == ["dcba", "", "", "fgh", "dcba"]
    assert out[1].tokens == [] and out[1].score == 0.0 and out[1].alternatives is None
    for t in (out[0], out[3]):
        assert t.tokens[-1] == EOS and len(t.alternatives) == 1
        assert t.text != t.alternatives[0].text


def test_search_greedy_equals_a_beam_of_one_without_length_penalty(translator):
    src = source(translator, "abcdefg")
    [[greedy]] = translator.search(src, num_beams=1)
    [[beam]] = translator.search(src, num_beams=1, n_best=1, length_penalty=0.0)
    [[wide]] = translator.search(src, num_beams=4)
    assert greedy.tokens == beam.tokens == wide.tokens
    assert wide.score == pytest.approx(greedy.score, abs=1e-4)


def test_replay_reproduces_the_search_and_is_where_attention_comes_from(translator):
    """Teacher forcing the output gives back every choice and the search's score; its
    cross-attention is a distribution over the source at every step, layer and head."""
    src = source(translator, "abcdef")
    for hyp in translator.search(src, num_beams=3, n_best=3)[0]:
        out = translator.replay(src, hyp)
        produced = hyp.produced(EOS_ID)
        log_probs = out.logits[0].log_softmax(-1)  # (T, V)
        score = log_probs[torch.arange(len(produced)), produced].sum()
        assert float(score) == pytest.approx(hyp.score, abs=1e-4)
        cross = out.attention.cross[0]  # (L, H, T, S)
        assert cross.shape[-2:] == (len(produced), src.size(1))
        torch.testing.assert_close(cross.sum(-1), torch.ones(cross.shape[:-1]))
    [[best]] = translator.search(src, num_beams=1)
    replayed = translator.replay(src, best).logits[0].argmax(-1).tolist()
    assert replayed == best.produced(EOS_ID)  # greedy's choices are the argmax of the replay
    assert best.decoder_input(BOS_ID, EOS_ID) == [BOS_ID, *replayed[:-1]]


def test_need_weights_gives_each_output_its_replayed_cross_attention(translator):
    [t] = translator.translate(["abca"], num_beams=2, n_best=2, need_weights=True)
    src = source(translator, "abca")
    hyps = translator.search(src, num_beams=2, n_best=2)[0]
    for translation, hyp in zip([t, *t.alternatives], hyps):
        expected = translator.replay(src, hyp).attention.cross[0].permute(2, 0, 1, 3)
        assert translation.attention.shape == (len(translation.tokens), *expected.shape[1:])
        torch.testing.assert_close(translation.attention, expected)
    assert translator.translate(["abca"])[0].attention is None  # only when asked


def test_padding_in_a_batch_does_not_change_the_attention(translator):
    alone = translator.translate(["ab"], num_beams=1, need_weights=True)[0].attention
    batched = translator.translate(["ab", "abcdefgh"], num_beams=1, need_weights=True)[0].attention
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-4)


def test_settings_out_of_range_are_refused_by_name(translator):
    with pytest.raises(ConfigError, match="generation.length_penalty"):
        translator.translate(["abc"], length_penalty=float("nan"))
    with pytest.raises(TypeError):
        translator.translate(["abc"], beam_width=3)  # not a GenerationConfig field


def test_blank_outputs_answer_only_blank_texts(translator):
    out, todo = blank_outputs(["a", "", " \t", "b"], translator.src_tokenizer)
    assert todo == [0, 3]
    assert out[0] is None and out[3] is None and out[1].text == out[2].text == ""


@pytest.mark.parametrize(
    "quantize, device, message",
    [("int4", "cpu", "unknown quantization 'int4'"), ("int8", "cuda", "runs on the CPU only"),
     ("INT8", "cpu", "unknown quantization")],
)  # fmt: skip
def test_check_quantize_refuses_what_we_do_not_offer(quantize, device, message):
    with pytest.raises(ValueError, match=message):
        check_quantize(quantize, device)
    check_quantize(None, device)
    check_quantize("int8", "cpu")


def test_translation_looks_at_the_free_cores_after_every_batch(reverse_model_dir, monkeypatch):
    """With its threads left to heedful, a Translator that decodes one batch after another
    sets them after each batch from the cores other processes leave free (cpu.FreeCores); a
    chosen count (here the tests' own OMP_NUM_THREADS) is never looked at."""
    assert Translator.load(reverse_model_dir).cores is None
    looks = []

    class Watcher:
        cores = [0, 1]

        def look(self):
            looks.append(1)

    monkeypatch.setattr("heedful.inference.translator.FreeCores.follow", lambda threads: Watcher())
    translator = Translator.load(reverse_model_dir)
    translator.streams = False  # one batch after another, each on all the threads
    translator.translate(["abc", "de", "fgh", "ab", "c"], num_beams=1, batch_size=2)
    assert len(looks) == 3
    translator.streams = True  # side by side: the streams keep both cores (cpu.in_streams)
    translator.translate(["abc", "de", "fgh", "ab", "c"], num_beams=1, batch_size=2)
    assert len(looks) == 3


def test_a_cpu_translator_asks_for_one_malloc_arena(reverse_model_dir, monkeypatch):
    """Its batches run side by side in threads, which would each hold a heap of their own:
    a Translator on the CPU asks glibc for one arena (allocator.one_malloc_arena)."""
    calls = []
    monkeypatch.setattr("heedful.inference.translator.one_malloc_arena", lambda: calls.append(1))
    translator = Translator.load(reverse_model_dir)
    assert calls == [1]
    Translator(translator.model, translator.source, translator.tgt_tokenizer, device="meta")
    assert calls == [1]  # not on another device
