"""Reading a request: query string and body (JSON, urlencoded or multipart form), never more
than --max-body-bytes, never slower than --body-timeout.

As in LibreTranslate, the fields may come as JSON, as a form, or in the query string (which is
how deep-translator sends them, with an empty body). A request with a body carries its required
fields in it; the query string may add the others. A field in both places must be valid in
both, and the body's value is the one used (Fields.readings).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from heedful.server.fields import is_blank
from heedful.server.limits import ApiError, ServerLimits
from heedful.server.schema import MAX_FIELDS, RequestSchema

log = logging.getLogger(__name__)

# A form repeats a field once per value (q once per text), so its raw pairs are only capped to
# bound the parsing, far above what a valid request needs; the limits that matter (MAX_FIELDS)
# apply to the fields it collapses to.
_MAX_FORM_PAIRS = 10_000


async def read_body(request, limit: int) -> bytes:
    """The body, or ApiError(413) as soon as it passes `limit` (declared or streamed)."""
    from starlette.requests import ClientDisconnect

    declared = request.headers.get("content-length", "")
    too_large = ApiError(413, f"the request body is over {limit:,} bytes (--max-body-bytes)")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
    except ClientDisconnect:  # the client's doing, not a fault of ours: one line, no traceback
        client = request.client
        log.info(
            "client %s disconnected after %d bytes of its request body",
            f"{client.host}:{client.port}" if client else "?",
            size,
        )
        raise ApiError(400, "the client disconnected before its body was complete") from None
    return b"".join(chunks)


async def read_timely_body(request, limits: ServerLimits) -> bytes:
    """read_body within --body-timeout: a client that stalls mid-body gets 408 and its
    connection is closed (it cannot be reused with a body half read)."""
    try:
        return await asyncio.wait_for(
            read_body(request, limits.max_body_bytes), limits.body_timeout
        )
    except asyncio.TimeoutError:
        raise ApiError(
            408,
            f"the request body did not arrive within {limits.body_timeout:g} s (--body-timeout)",
            {"Connection": "close"},
        ) from None


# ---------------------------------------------------------------------------------------------
# Decoding: JSON, forms and query strings to fields
# ---------------------------------------------------------------------------------------------


def _form_fields(pairs) -> dict[str, Any]:
    """Form fields as a dict; `q` given several times is a list, as in LibreTranslate."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if not isinstance(value, str):
            raise ApiError(400, f"form field {key[:40]} must be text, not a file")
        if key == "q" and "q" in data:
            data["q"] = (data["q"] if isinstance(data["q"], list) else [data["q"]]) + [value]
        else:
            data[key] = value
    for i, text in enumerate(data["q"] if isinstance(data.get("q"), list) else ()):
        if is_blank(text):  # a list of one text is that text here, and q alone is not blank
            raise ApiError(
                400,
                f"q[{i}] is empty: there is nothing to translate (a list with a blank text "
                "can be sent as JSON)",
            )
    return data


def _capped(data: dict, where: str) -> dict:
    if len(data) > MAX_FIELDS:
        raise ApiError(400, f"{where} has {len(data)} fields; the limit is {MAX_FIELDS}")
    return data


def _urlencoded(raw: bytes, what: str) -> dict[str, Any]:
    """The fields of a query string or an urlencoded form, which must be UTF-8."""
    try:
        pairs = parse_qsl(
            raw.decode("utf-8"),
            keep_blank_values=True,
            errors="strict",
            max_num_fields=_MAX_FORM_PAIRS,
        )
    except ValueError as error:  # bad UTF-8, or too many fields
        raise ApiError(400, f"invalid {what}: {str(error)[:200]}") from None
    return _form_fields(pairs)


def _not_a_number(name: str):
    raise ValueError(f"{name} is not a JSON number")


def json_object(body: bytes) -> dict:
    """A JSON object, strictly: UTF-8 (RFC 8259 §8.1), and no NaN or Infinity, which Python
    would read but JSON does not have."""
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_not_a_number)
    except UnicodeDecodeError as error:
        raise ApiError(
            400, f"invalid JSON: not UTF-8 ({error.reason} at byte {error.start})"
        ) from None
    except (ValueError, RecursionError) as error:
        raise ApiError(400, f"invalid JSON: {str(error)[:200]}") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"the body must be a JSON object, got {type(data).__name__}")
    return data


def media_type(headers) -> str:
    """The Content-Type without its parameters; a charset other than UTF-8 is refused (415)
    rather than read as UTF-8 and misunderstood."""
    kind, *parameters = headers.get("content-type", "").split(";")
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        charset = value.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
            raise ApiError(415, f"unsupported charset {charset[:20]!r}: send UTF-8")
    return kind.strip().lower()


async def _multipart(headers, body: bytes) -> dict:
    from starlette.formparsers import MultiPartException, MultiPartParser

    async def stream():
        yield body

    try:
        form = await MultiPartParser(
            headers, stream(), max_files=0, max_fields=_MAX_FORM_PAIRS
        ).parse()
    except (MultiPartException, ValueError) as error:
        raise ApiError(400, f"invalid form: {str(error)[:200]}") from None
    return _form_fields(form.multi_items())


async def decode_body(headers, body: bytes, schema: RequestSchema) -> dict:
    """The body's fields: a JSON object, or a form's fields typed by `schema`."""
    kind = media_type(headers)
    if kind in ("", "application/json") or kind.endswith("+json"):
        fields = json_object(body)
    elif kind == "application/x-www-form-urlencoded":
        fields = schema.typed(_urlencoded(body, "form"))
    elif kind == "multipart/form-data":
        fields = schema.typed(await _multipart(headers, body))
    else:
        raise ApiError(
            415,
            f"unsupported Content-Type {kind[:60]!r}: send application/json or a form "
            "(application/x-www-form-urlencoded, multipart/form-data)",
        )
    return _capped(fields, "the body")


@dataclass(frozen=True)
class Fields:
    """A request's fields from its query string and from its body (either may be empty)."""

    query: dict
    body: dict

    def readings(self) -> list[dict]:
        """The fields as used: the body's value where both give one. When both do, the other
        way round as well, for the checks: every value sent must be valid."""
        used = {**self.query, **self.body}
        if self.query.keys() & self.body.keys():
            return [used, {**self.body, **self.query}]
        return [used]


async def read_fields(request, limits: ServerLimits, schema: RequestSchema) -> Fields:
    """The query string's fields and the body's. A request with a body carries the schema's
    required fields in it (the query string may add others); one without a body, as
    deep-translator sends them, has them all in the query string."""
    raw_query = request.scope.get("query_string", b"")
    query = schema.typed(_capped(_urlencoded(raw_query, "query string"), "the query string"))
    body = await read_timely_body(request, limits)
    if not body:  # no body (Content-Length: 0), whatever its Content-Type says
        return Fields(query, {})
    fields = await decode_body(request.headers, body, schema)
    for name in schema.required:
        if name not in fields and name in query:
            raise ApiError(
                400,
                f"missing field {name} in the body (it is in the query string): a request with "
                f"a body carries {', '.join(schema.required)} in it",
            )
    return Fields(query, fields)
