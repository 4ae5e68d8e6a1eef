"""ServerLimits: every limit a finite number, each a flag of `heedful serve`."""

from __future__ import annotations

from dataclasses import fields

import pytest

from heedful.server import ApiError, ServerLimits


def test_limits_must_be_positive_and_finite():
    with pytest.raises(ValueError, match="max_chars"):
        ServerLimits(max_chars=0)
    with pytest.raises(ValueError, match="request_timeout"):
        ServerLimits(request_timeout=float("inf"))
    assert ServerLimits(max_wait_ms=0).max_wait_ms == 0


@pytest.mark.parametrize("value", [True, "3", None, float("nan")])
def test_a_limit_is_a_number(value):
    with pytest.raises(ValueError, match=r"ServerLimits\.max_items must be"):
        ServerLimits(max_items=value)


def test_every_limit_has_a_default_and_a_help_text():
    for spec in fields(ServerLimits):
        kinds = str if spec.name == "cors_origins" else (int, float)  # origins, not a number
        assert isinstance(spec.default, kinds) and spec.metadata["help"].endswith(".")


def test_an_api_error_carries_its_status_message_and_headers():
    error = ApiError(503, "busy", {"Retry-After": "1"})
    assert (error.status, error.message, error.headers, str(error)) == (
        503, "busy", {"Retry-After": "1"}, "busy"
    )  # fmt: skip
    assert ApiError(400, "bad").headers == {}


def test_max_new_tokens_stays_within_what_a_search_takes():
    """A binding cap becomes the search's max_len_offset (GenerationConfig checks its range):
    a larger one would fail each request it binds, so the server refuses it at start."""
    from heedful.config import MAX_OUTPUT_OFFSET, GenerationConfig

    ServerLimits(max_new_tokens=MAX_OUTPUT_OFFSET)
    GenerationConfig(max_len_ratio=0.0, max_len_offset=MAX_OUTPUT_OFFSET)
    with pytest.raises(ValueError, match="max_new_tokens must be at most 10,000"):
        ServerLimits(max_new_tokens=MAX_OUTPUT_OFFSET + 1)
