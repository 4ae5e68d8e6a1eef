"""The request contract of schema.py: the parser and the OpenAPI schema come from one
declaration, so they accept the same requests; checked here against a JSON Schema validator
on generated requests, in this process (schemathesis does it over HTTP: test_process.py)."""

from __future__ import annotations

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heedful.server import ApiError
from heedful.server.head_field import Heads
from heedful.server.schema import (
    MAX_FIELDS,
    Boolean,
    Integer,
    Texts,
    check_limits,
    detect_request,
    parse_detect,
    parse_request,
    translate_request,
)

from .helpers import GOOD, LIMITS

LANGUAGES = ("en", "de")
TRANSLATE, DETECT = translate_request(LIMITS, LANGUAGES), detect_request(LIMITS)


def parsed_translate(data: dict) -> None:
    check_limits(parse_request(data, TRANSLATE), LIMITS)


def parsed_detect(data: dict) -> None:
    parse_detect(data, DETECT)


def accepted(parse, data: dict) -> bool:
    """Whether the server takes these fields: at most MAX_FIELDS (body.py), then the parser."""
    try:
        if len(data) > MAX_FIELDS:
            return False
        parse(data)
        return True
    except ApiError as error:
        assert error.status == 400, error.message
        return False


# Text blank by Python's or JSON Schema's idea of whitespace (they differ), or not.
BLANKS = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u3000\ufeff"
NOT_BLANKS = "\x00\x1b\u180e\u200b\u2060"  # control and zero-width: text, to both
JUNK = [None, True, 2.5, 1e300, -0.0, "many", "", [], {}, [1], ["abc"], {"a": 1}]
ABSENT = object()
SCHEMAS = [
    ("translate", TRANSLATE, parsed_translate, GOOD),
    ("detect", DETECT, parsed_detect, {"q": "abc"}),
]


def edge_values(field) -> list:
    """Values of `field` on both sides of each of its limits, and other values it may take."""
    if isinstance(field, Integer):
        near = [n + d for n in (field.minimum, field.maximum) for d in (-1, 0, 1)]
        return near + [float(n) for n in near]
    if isinstance(field, Texts):
        sizes = range(field.max_chars - 1, field.max_chars + 2)
        texts = ["ab"[n % 2] * n for n in sizes] + [
            *BLANKS,
            *NOT_BLANKS,
            *(c + "a" for c in BLANKS),
        ]
        counts = range(field.max_items - 1, field.max_items + 2)
        return texts + [["ab"] * n for n in counts] + [["ab", text] for text in texts]
    if isinstance(field, Boolean):
        return [True, False, "true", 1, 0]
    if isinstance(field, Heads):  # the syntax only: whether the model has them is the plan's
        heads = [f"cross:{n}:{n}" for n in range(1, field.max_items + 2)]
        return [
            "cross:1:1",
            "cross:1",
            "encoder:2:3,decoder:1",
            "cross:999999",
            "cross:1000000",
            "cross:01",
            "cross:0",
            "cross:1:",
            "cross:1 ",
            "x:1",
            "cross:1,",
            ",cross:1",
            heads[:-1],
            heads,
            ",".join(heads[:-1]),
            ",".join(heads),
            ["cross:1", 1],
        ]
    return [*getattr(field, "enum", ()), "fr", "html", "auto", "x" * 30]


def changed(base: dict, changes) -> dict:
    data = dict(base)
    for field, value in changes:
        if value is ABSENT or (value is None and isinstance(field, Integer)):  # (see below)
            data.pop(field.name, None)
        else:
            data[field.name] = value
    return data


@pytest.mark.parametrize("name, schema, parse, base", SCHEMAS, ids=[s[0] for s in SCHEMAS])
def test_the_parser_accepts_what_the_schema_does_field_by_field(name, schema, parse, base):
    """Each field at each of its edges (and wrong types, and absent), one at a time."""
    validator = jsonschema_rs.Draft202012Validator(schema.schema())
    requests = [
        changed(base, [(field, value)])
        for field in schema.fields
        for value in [*edge_values(field), *JUNK, ABSENT]
    ]
    requests += [base | {f"x{i}": 1 for i in range(MAX_FIELDS - len(base) + d)} for d in (0, 1)]
    verdicts = [(accepted(parse, data), validator.is_valid(data)) for data in requests]
    assert [data for data, (a, b) in zip(requests, verdicts) if a != b] == []
    assert {a for a, _ in verdicts} == {True, False}


@pytest.mark.parametrize("name, schema, parse, base", SCHEMAS, ids=[s[0] for s in SCHEMAS])
def test_the_parser_accepts_what_the_schema_does_in_any_combination(name, schema, parse, base):
    """Up to four fields changed at once, drawn from the same values."""
    validator = jsonschema_rs.Draft202012Validator(schema.schema())
    change = st.sampled_from(schema.fields).flatmap(
        lambda f: st.tuples(st.just(f), st.sampled_from([*edge_values(f), *JUNK, ABSENT]))
    )

    @given(changes=st.lists(change, min_size=2, max_size=4))
    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
    def agree(changes):
        data = changed(base, changes)
        assert accepted(parse, data) == validator.is_valid(data), data

    agree()


def test_null_numbers_are_taken_as_absent_which_the_schema_does_not_say():
    """The one place the parser is laxer than the schema, as the server always was: a client
    that sends "num_beams": null gets the default. (Saying so in the schema would change
    /openapi.json; refusing it, the answer to such clients.)"""
    request = parse_request({**GOOD, "num_beams": None, "alternatives": None}, TRANSLATE)
    assert (request.num_beams, request.alternatives) == (None, 0)
    validator = jsonschema_rs.Draft202012Validator(TRANSLATE.schema())
    assert not validator.is_valid({**GOOD, "num_beams": None})


def test_the_query_parameters_are_the_fields_with_their_schemas():
    openapi = TRANSLATE.openapi()
    body = openapi["requestBody"]["content"]["application/json"]["schema"]
    form = openapi["requestBody"]["content"]["application/x-www-form-urlencoded"]["schema"]
    # the same, but that a form's list of texts holds no blank one (q=a is a list of one text
    # as much as the text alone, which must not be blank); JSON's may (issue 29)
    text, listed = form["properties"]["q"]["anyOf"]
    assert listed["items"] == text
    as_json = {**listed, "items": body["properties"]["q"]["anyOf"][1]["items"]}
    q = {"anyOf": [text, as_json]}
    assert {**form, "properties": {**form["properties"], "q": q}} == body
    parameters = {p["name"]: p["schema"] for p in openapi["parameters"]}
    assert list(parameters) == list(body["properties"]) == [f.name for f in TRANSLATE.fields]
    for name, schema in parameters.items():  # a list q is q repeated: one value is a string
        field = body["properties"][name]
        assert schema == (field["anyOf"][0] if name == "q" else field)
    assert body["required"] == ["q", "source", "target"] and body["maxProperties"] == MAX_FIELDS
    assert body["properties"]["num_beams"]["maximum"] == LIMITS.max_num_beams


@pytest.mark.parametrize(
    "text, value",
    [("3", 3), (" -2 ", -2), ("many", "many"), ("1" * 10, "1" * 10), ("3.0", "3.0")],
)
def test_form_text_becomes_the_number_it_spells(text, value):
    assert TRANSLATE.typed({"num_beams": text, "q": "3"}) == {"num_beams": value, "q": "3"}


@pytest.mark.parametrize(
    "text, value", [("true", True), (" On ", True), ("0", False), ("", False), ("maybe", "maybe")]
)
def test_form_text_becomes_true_or_false(text, value):
    assert TRANSLATE.typed({"return_attention": text}) == {"return_attention": value}
    assert DETECT.typed({"return_attention": text}) == {"return_attention": text}  # not its field


def test_a_request_is_parsed_into_its_fields():
    request = parse_request(
        {"q": ["ab", "cd"], "source": "auto", "target": "de", "alternatives": 2.0,
         "num_beams": 3, "return_attention": True, "api_key": "k", "extra": [1]},
        TRANSLATE,
    )  # fmt: skip
    assert (request.texts, request.is_list, request.alternatives) == (["ab", "cd"], True, 2)
    assert (request.num_beams, request.max_new_tokens, request.return_attention) == (3, None, True)
    assert parse_detect({"q": "abc", "source": 5}, DETECT) == ["abc"]  # /detect reads q only


@pytest.mark.parametrize(
    "data, message",
    [
        ({**GOOD, "q": "", "num_beams": "x"}, "q is empty: there is nothing to translate"),
        ({**GOOD, "api_key": 5, "num_beams": "x"}, "api_key must be a string, got 5"),
        ({**GOOD, "source": "fr", "target": 5}, "missing field target: a language code"),
        ({**GOOD, "num_beams": 0, "alternatives": 9}, "num_beams must be at least 1, got 0"),
        ({**GOOD, "max_new_tokens": "x" * 99}, 'max_new_tokens must be an integer, got "xxxx'),
    ],
)
def test_the_text_fields_are_checked_first_and_messages_name_the_field(data, message):
    with pytest.raises(ApiError) as raised:
        parse_request(data, TRANSLATE)
    assert raised.value.status == 400 and raised.value.message.startswith(message)
    assert len(raised.value.message) < 80  # a value is quoted, cut short


def test_the_numbers_limits_are_checked_when_planned():
    request = parse_request({**GOOD, "alternatives": 9, "num_beams": 99}, TRANSLATE)
    with pytest.raises(ApiError) as raised:
        check_limits(request, LIMITS)
    expected = "alternatives=9 is over the limit of 3 (--max-num-beams minus one)"
    assert raised.value.message == expected
