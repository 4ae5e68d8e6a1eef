"""/translate's sampling and prefix fields (issue 15): answers as the Translator gives them, and
each bad value a 400 that names the field."""

from __future__ import annotations

import pytest

from heedful.visualize.trace import Trace

from .helpers import GOOD, OFFSET, client, error, ok


@pytest.fixture(scope="module")
def app(model_dir):
    with client(model_dir) as test_client:
        yield test_client


def post(app, **body):
    return app.post("/translate", json={**GOOD, **body})


def test_seeded_samples_are_the_translators_and_repeat(app, translator):
    settings = {"temperature": 2.0, "top_k": 5, "seed": 11}
    body = ok(post(app, q="hello there", sample=True, alternatives=2, **settings))
    [expected] = translator.translate(["hello there"], n_best=3, sample=True, **settings)
    assert body["translatedText"] == expected.text
    assert body["alternatives"] == [a.text for a in expected.alternatives]
    assert ok(post(app, q="hello there", sample=True, alternatives=2, **settings)) == body


def test_sampling_settings_without_sample_change_nothing(app):
    assert ok(post(app, temperature=3.0, top_p=0.5)) == ok(post(app))


def test_a_prefix_starts_every_output(app, translator):
    body = ok(post(app, q=["abc", "hello"], prefix="zz", alternatives=1))
    assert all(text.startswith("zz") for text in body["translatedText"])
    assert all(a.startswith("zz") for alts in body["alternatives"] for a in alts)
    expected = translator.translate(["abc", "hello"], num_beams=2, n_best=2, prefixes=["zz"] * 2)
    assert body["translatedText"] == [t.text for t in expected]


def test_the_attention_of_a_sampled_prefixed_output(app):
    body = ok(post(app, q="abc", prefix="q", sample=True, seed=1, return_attention=True))
    trace = Trace.from_dict(body["attention"])
    assert trace.search["prefix"] == "q" and trace.search["sample"] == {"seed": 1}
    assert trace.hypotheses[0].text.startswith("q") and trace.hypotheses[0].sampled


# Bad input: each a 400 whose message names the field
BAD = [
    ({"sample": True, "temperature": 0}, "temperature must be above 0"),
    ({"sample": True, "temperature": -1.5}, "temperature must be above 0"),
    ({"sample": True, "temperature": "hot"}, "temperature must be a number"),
    ({"sample": True, "top_p": 0}, "top_p must be above 0"),
    ({"sample": True, "top_p": 1.5}, "top_p must be above 0.0 and at most 1.0"),
    ({"sample": True, "top_k": 0}, "top_k must be at least 1"),
    ({"top_k": 10**9}, "top_k=1000000000 is over the limit of 999999999"),
    ({"sample": True, "seed": -1}, "seed must be at least 0"),
    ({"sample": "yes"}, "sample must be true or false"),
    ({"prefix": 5}, "prefix must be a string"),
    ({"q": "ab", "prefix": "abcdefg"}, "prefix is 7 tokens long, more than the output may be (6"),
    ({"q": ["abcdef", "ab"], "prefix": "abcdefg"}, "more than the output of q[1] may be (6"),
    ({"prefix": "x" * 51}, "prefix has 51 characters; the limit is 50"),
    # issue 26: numbers no float holds, NUL as the CLI refuses it, prefixes the output could
    # not start with as typed (the model's vocabulary: a-z, space, A, B, C, '.' and ',')
    ({"sample": True, "temperature": 10**400}, "temperature must be a finite number above 0"),
    ({"temperature": -(10**400)}, "finite number above 0.0 and at most 100.0, got -1000"),
    ({"sample": True, "top_p": 10**309}, "top_p must be a finite number above 0.0 and at most"),
    ({"q": "ab\0c"}, "q holds NUL (\\u0000) at character 2"),
    ({"q": ["abc", "\0"]}, "q[1] holds NUL (\\u0000) at character 0"),
    ({"prefix": "a\0"}, "prefix holds NUL (\\u0000) at character 1"),
    ({"prefix": "a\U0001f600"}, "prefix holds '😀' (U+1F600 GRINNING FACE), which the target"),
    ({"prefix": "\u202eabc"}, "prefix holds U+202E RIGHT-TO-LEFT OVERRIDE, which the target"),
    ({"prefix": "e\u0301"}, "prefix holds U+0301 COMBINING ACUTE ACCENT, which the target"),
    ({"prefix": "<unk>"}, "prefix holds '<' (U+003C LESS-THAN SIGN), '>' (U+003E"),
    ({"prefix": "\U0001f600", "return_attention": True}, "prefix holds '😀'"),
    # issue 27: diverse beam search's fields, made from their settings' declarations
    ({"num_beam_groups": 0}, "num_beam_groups must be at least 1, got 0"),
    ({"num_beam_groups": 300}, "num_beam_groups=300 is over the limit of 256"),
    ({"num_beam_groups": "two"}, "num_beam_groups must be an integer"),
    ({"num_beams": 4, "num_beam_groups": 3}, "num_beam_groups must divide generation.num_beams"),
    ({"num_beam_groups": 2}, "got 2 groups of 1 beams"),  # the model's num_beams: 1
    ({"diversity_penalty": -0.5}, "diversity_penalty must be from 0.0 and at most 100.0, got"),
    ({"diversity_penalty": 10**400}, "diversity_penalty must be a finite number from 0.0"),
]


@pytest.mark.parametrize(("fields", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_decoding_fields_are_named_400s(app, fields, message):
    error(post(app, **fields), 400, message)


def test_the_output_limit_counts_the_prefix(app):
    """A prefix as long as the limit (1.0 · 2 + OFFSET) fits: the output is the prefix."""
    body = ok(post(app, q="ab", prefix="z" * (2 + OFFSET)))
    assert body["translatedText"] == "z" * (2 + OFFSET)
