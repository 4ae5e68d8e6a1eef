"""heedful.safejson: compact JSON without NaN or inf, and JSON safe inside <script>; the bytes
pinned, since the server's answers and pages (tests/golden) are made of them."""

from __future__ import annotations

import json
import math

from heedful.safejson import dumps, finite, for_script


def test_finite_turns_nan_and_infinities_into_none_at_any_depth():
    data = {"a": [1.5, math.nan, (math.inf, -math.inf)], "b": {"c": -math.inf}, "d": "x", "e": 2}
    assert finite(data) == {"a": [1.5, None, [None, None]], "b": {"c": None}, "d": "x", "e": 2}
    assert finite(0.25) == 0.25 and finite(None) is None


def test_dumps_is_compact_utf8_and_writes_null_for_what_json_cannot_hold():
    assert dumps({"t": "früh", "n": [1, 2.5]}) == '{"t":"früh","n":[1,2.5]}'
    assert dumps({"score": -math.inf, "p": (math.nan, 0.5)}) == '{"score":null,"p":[null,0.5]}'
    assert json.loads(dumps({"q": "\u2028"})) == {"q": "\u2028"}


def test_for_script_escapes_what_could_end_or_confuse_a_script_element():
    text = for_script({"s": "</script><!-- a & b \u2028\u2029 ü", "x": math.nan})
    assert text == ('{"s":"\\u003c/script\\u003e\\u003c!-- a \\u0026 b \\u2028\\u2029 ü","x":null}')
    assert json.loads(text) == {"s": "</script><!-- a & b \u2028\u2029 ü", "x": None}
    assert for_script(["plain"]) == dumps(["plain"]) == '["plain"]'
