"""TranslationService in this process: planning (beams, output lengths and attention size
within the limits), running a batch (texts that share a search translated together, a failure
kept to its job) and LibreTranslate's answer, byte for byte."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from heedful.config import DecoderConfig, GenerationConfig, ModelConfig, TextEncoderConfig
from heedful.data.sources import TextSource
from heedful.data.tokenizers import CharTokenizer
from heedful.inference.runtime import engine_type
from heedful.inference.translator import Translation, Translator
from heedful.models.build import build_model
from heedful.safejson import dumps
from heedful.server import ApiError, ServerLimits, TranslateRequest, response_body
from heedful.server.service import Job, Output, Search, TranslationService
from heedful.visualize.trace import build_trace, estimated_json_bytes

GENERATION = GenerationConfig(num_beams=5, max_len_ratio=1.0, max_len_offset=4)
LIMITS = ServerLimits(max_num_beams=4, max_new_tokens=20, max_attention_bytes=100_000)


class FakeTranslator:
    """A translator of either engine that reverses texts and records each translate call."""

    def __init__(self, engine: str = "torch", config: ModelConfig = ModelConfig(), fail=None):
        self.engine, self.config, self.fail = engine, config, fail
        self.capabilities = engine_type(engine).capabilities  # what the engine declares
        self.generation, self.calls = GENERATION, []
        letters = SimpleNamespace(encode=lambda text: list(text))  # a token a letter
        self.source = TextSource(letters)  # what the Engine protocol reads (data/sources.py)

    def translate(self, texts, batch_size, prefixes=None, *, settings):
        self.calls.append((list(texts), settings))
        if self.fail and self.fail in texts:
            raise ValueError(f"cannot translate {self.fail}")
        others = [Translation(t, [], [], -1.0) for t in texts]
        return [
            Translation(t[::-1], [], [], 0.0, alternatives=[other] * (settings.n_best - 1))
            for t, other in zip(texts, others)
        ]


def searching(num_beams: int, n_best: int, max_len_ratio: float, max_len_offset: int):
    """The Search of a text: the model's settings with these beams and output limit."""
    lengths = {"max_len_ratio": max_len_ratio, "max_len_offset": max_len_offset}
    return Search(replace(GENERATION, num_beams=num_beams, n_best=n_best, **lengths))


def request(*texts: str, is_list: bool = False, **fields) -> TranslateRequest:
    return TranslateRequest(list(texts), is_list or len(texts) > 1, **fields)


def plan(service: TranslationService, *texts: str, **fields) -> list[Search]:
    searches, _ = service.plan(request(*texts, **fields))
    return searches


# ---- planning -----------------------------------------------------------------------------------


def test_beams_default_to_the_model_within_the_limit_and_grow_to_the_alternatives():
    service = TranslationService(FakeTranslator(), LIMITS)
    assert plan(service, "abc")[0].settings.num_beams == 4  # generation.json's 5, within the limit
    assert plan(service, "abc", num_beams=1)[0].settings.num_beams == 1
    [search] = plan(service, "abc", num_beams=1, alternatives=2)
    assert (search.settings.num_beams, search.settings.n_best) == (3, 3)  # a beam of n + 1


def test_the_output_limit_is_the_models_unless_a_cap_binds():
    service = TranslationService(FakeTranslator(), LIMITS)
    natural = searching(4, 1, GENERATION.max_len_ratio, GENERATION.max_len_offset)
    assert plan(service, "abcdefghij") == [natural]  # 1.0 · 10 + 4 = 14 <= 20
    assert plan(service, "abcdefghij", max_new_tokens=3) == [searching(4, 1, 0.0, 3)]
    assert plan(service, "a" * 30) == [searching(4, 1, 0.0, 20)]  # 34 > --max-new-tokens
    # texts with the same search can share a batch; another length limit is another search
    assert plan(service, "ab", "cd", "a" * 30) == [natural, natural, searching(4, 1, 0.0, 20)]


def test_a_learned_position_table_bounds_the_source_and_the_output():
    config = ModelConfig(positional="learned", max_positions=8)
    service = TranslationService(FakeTranslator(config=config), LIMITS)
    assert plan(service, "abcdefgh") == [searching(4, 1, 0.0, 8)]  # 1.0 · 8 + 4 > 8 positions
    with pytest.raises(ApiError, match=r"^q\[1\] is 9 tokens long; this model reads at most 8$"):
        plan(service, "ab", "abcdefghi")


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"alternatives": 4}, "alternatives=4 is over the limit of 3"),
        ({"num_beams": 5}, "num_beams=5 is over the limit of 4 (--max-num-beams)"),
        ({"max_new_tokens": 21}, "max_new_tokens=21 is over the limit of 20"),
        ({"return_attention": True}, "the ctranslate2 engine, which gives no attention"),
    ],
)
def test_requests_over_the_limits_are_refused_before_any_work(fields, message):
    translator = FakeTranslator(engine="ctranslate2")
    service = TranslationService(translator, LIMITS)
    with pytest.raises(ApiError, match=re.escape(message)) as raised:
        service.plan(request("abc", **fields))
    assert raised.value.status == 400 and translator.calls == []
    assert plan(service, "abc") and service.plan(request("abc"))[1] is False  # no attention


def test_attention_is_refused_when_its_estimate_is_over_the_limit():
    # a text of 10 tokens and up to 15 output tokens (+ </s>) in the default Transformer: the
    # limit lets one such trace through, not two
    one = estimated_json_bytes(ModelConfig(), 10, GENERATION.max_output_length(10) + 1, 1)
    limit = one * 3 // 2
    service = TranslationService(FakeTranslator(), replace(LIMITS, max_attention_bytes=limit))
    assert service.plan(request("a" * 10, return_attention=True))[1] is True
    with pytest.raises(ApiError, match=rf"could take {2 * one:,} bytes; the limit is {limit:,}"):
        service.plan(request("a" * 10, "b" * 10, return_attention=True))
    assert plan(service, "a" * 10, "b" * 10)  # without attention, size does not matter


def tiny_translator(config: ModelConfig) -> Translator:
    tokenizer = CharTokenizer.train(["abcdefgh"])
    torch.manual_seed(0)
    model = build_model(config, len(tokenizer), len(tokenizer))
    return Translator(model, tokenizer, tokenizer, GENERATION)


@pytest.mark.parametrize(
    "config",
    [
        ModelConfig(
            d_model=16,
            num_heads=2,
            d_ff=16,
            encoder=TextEncoderConfig(layers=2),
            decoder=DecoderConfig(layers=1),
        ),
        ModelConfig(arch="rnn", d_model=8, hidden_size=16),
    ],
    ids=["transformer", "rnn"],
)
def test_the_attention_estimate_is_an_upper_bound_of_the_trace(config):
    """Every output runs to its limit here (an untrained model rarely picks </s>), so the real
    trace is close to the largest one its shape allows."""
    translator = tiny_translator(replace(config, dropout=0.0))
    for text, beams, n_best in (("abcdefgh", 1, 1), ("abcabc", 3, 2), ("h", 2, 2)):
        size = len(dumps(build_trace(translator, text, beams, n_best).to_dict()).encode())
        steps = GENERATION.max_output_length(len(text)) + 1  # + </s>
        estimate = estimated_json_bytes(translator.config, len(text), steps, n_best)
        assert size <= estimate < 20 * size, (text, size, estimate)


# ---- running a batch (in the worker thread) -----------------------------------------------------


def job(texts: list[str], searches: list[Search], attention: bool = False) -> Job:
    return Job(texts, searches, attention, asyncio.Future(loop=asyncio.new_event_loop()))


def test_texts_that_share_a_search_are_translated_in_one_call():
    translator = FakeTranslator()
    service = TranslationService(translator, LIMITS)
    greedy, beam = searching(1, 1, 1.0, 4), searching(2, 2, 0.0, 3)
    results = service.run([job(["ab", "cd"], [greedy, beam]), job(["ef"], [greedy])])
    assert results == [
        [Output("ba", []), Output("dc", ["cd"])],
        [Output("fe", [])],
    ]
    assert translator.calls == [(["ab", "ef"], greedy.settings), (["cd"], beam.settings)]


def test_a_failure_is_the_answer_of_its_jobs_only():
    service = TranslationService(FakeTranslator(fail="cd"), LIMITS)
    greedy, beam = searching(1, 1, 1.0, 4), searching(2, 1, 1.0, 4)
    ok, failed = service.run([job(["ab"], [greedy]), job(["cd"], [beam])])
    assert ok == [Output("ba", [])]
    assert isinstance(failed, ValueError) and str(failed) == "cannot translate cd"


def test_a_job_with_attention_gets_the_trace_of_each_text(translator):
    service = TranslationService(translator, LIMITS)
    searches, _ = service.plan(request("ab", "cde", return_attention=True, alternatives=1))
    [outputs] = service.run([job(["ab", "cde"], searches, attention=True)])
    for text, output in zip(["ab", "cde"], outputs):
        trace = json.loads(output.trace_json)
        assert trace["source"] == text and len(trace["hypotheses"]) == 2
        assert [h["text"] for h in trace["hypotheses"]] == [output.text, *output.alternatives]


# ---- the answer ---------------------------------------------------------------------------------


def test_the_answer_is_a_string_per_string_and_a_list_per_list():
    one, two = Output("zwei", ["drei"], '{"t":1}'), Output("früh <b>", ["x"], '{"t":2}')
    assert response_body(request("a"), [one]) == b'{"translatedText":"zwei"}'
    assert response_body(request("a", "b"), [one, two]) == (
        '{"translatedText":["zwei","früh <b>"]}'.encode()  # UTF-8 as it is, nothing escaped
    )
    assert response_body(request("a", alternatives=1, return_attention=True), [one]) == (
        b'{"translatedText":"zwei","alternatives":["drei"],"attention":{"t":1}}'
    )
    listed = response_body(request("a", "b", alternatives=1, return_attention=True), [one, two])
    assert json.loads(listed) == {
        "translatedText": ["zwei", "früh <b>"],
        "alternatives": [["drei"], ["x"]],
        "attention": [{"t": 1}, {"t": 2}],
    }
    assert response_body(request("a", is_list=True), [one]) == b'{"translatedText":["zwei"]}'
