"""The request contract, declared once: the fields of /translate and /detect.

Each field below says its type, its range and its message; from the same declaration come the
checks a request passes (parse_request, parse_detect, check_limits), the typing of form and
query-string text (RequestSchema.typed) and the OpenAPI description of the request
(RequestSchema.openapi), so the server and its schema cannot disagree: schemathesis fuzzes
/openapi.json against the server, and tests/server/test_schema.py checks them field by field.

Unknown fields (LibreTranslate's `api_key`, a client's extras) are ignored, as LibreTranslate
does, up to MAX_FIELDS fields in all.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

from heedful.server.limits import ApiError, ServerLimits

# Fields one request may have, unknown ones included (clients of LibreTranslate send extras
# such as api_key); the schema says so as maxProperties.
MAX_FIELDS = 16

# A text needs one character that is neither Python's whitespace (str.isspace, which also
# counts the separators \x1c-\x1f and \x85) nor the JSON-Schema regex's \s (which also counts
# U+FEFF): the OpenAPI pattern and the parser's check then agree on every string.
NOT_BLANK = r"[^\s\x1c-\x1f\x85\ufeff]"

_SURROGATE = re.compile("[\ud800-\udfff]")
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off", ""}


def shown(value: Any, width: int = 40) -> str:
    """A value as JSON, cut short: an error message quotes it, it does not echo megabytes."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


# ---------------------------------------------------------------------------------------------
# The kinds of field: each gives its JSON Schema and reads (checks) its value in a request
# ---------------------------------------------------------------------------------------------


class Field(Protocol):
    """A field of a request. Two methods are optional: from_text(value), the value a form's
    or a query string's text spells (where it is not text: a number, true or false), and
    query_schema(), the schema of one value in the query string (where it is not schema())."""

    name: str

    def schema(self) -> dict: ...  # its JSON Schema, in the body
    def read(self, data: dict) -> Any: ...  # the checked value; ApiError(400) if wrong


@dataclass(frozen=True)
class Texts:
    """A text, or a list of texts: each with a character that is not blank, valid Unicode,
    at most `max_chars` long; a list of 1 to `max_items` of them."""

    name: str
    max_chars: int
    max_items: int

    def query_schema(self) -> dict:  # a list is the field repeated: ?q=a&q=b
        return {"type": "string", "minLength": 1, "maxLength": self.max_chars, "pattern": NOT_BLANK}

    def schema(self) -> dict:
        text = self.query_schema()
        listed = {"type": "array", "items": text, "minItems": 1, "maxItems": self.max_items}
        return {"anyOf": [text, listed]}

    def read(self, data: dict) -> tuple[list[str], bool]:
        """The texts, and whether they came as a list (the answer is then a list too)."""
        if self.name not in data:
            raise ApiError(
                400, f"missing field {self.name}: the text to translate (a string or a list)"
            )
        value = data[self.name]
        is_list = isinstance(value, list)
        texts = value if is_list else [value]
        if is_list and not texts:
            raise ApiError(400, f"{self.name} is an empty list: give at least one text")
        if len(texts) > self.max_items:
            raise ApiError(
                400,
                f"{self.name} has {len(texts)} texts; the limit is {self.max_items} (--max-items)",
            )
        for i, text in enumerate(texts):
            self._check(f"{self.name}[{i}]" if is_list else self.name, text)
        return texts, is_list

    def _check(self, where: str, text: Any) -> None:
        if not isinstance(text, str):
            raise ApiError(400, f"{where} must be a string, got {type(text).__name__}")
        if re.search(NOT_BLANK, text) is None:
            raise ApiError(400, f"{where} is empty: there is nothing to translate")
        if not text.isascii() and _SURROGATE.search(text):  # JSON's "\ud800" decodes alone
            raise ApiError(400, f"{where} holds an unpaired surrogate: not valid Unicode text")
        if len(text) > self.max_chars:
            raise ApiError(
                400,
                f"{where} has {len(text)} characters; the limit is {self.max_chars} (--max-chars)",
            )


@dataclass(frozen=True)
class Language:
    """A language code of this model's pair; `enum` the codes the schema lists (the pair
    itself is checked by parse_request, which names both)."""

    name: str
    enum: tuple[str, ...]
    pair: tuple[str, str]
    description: str | None = None

    def schema(self) -> dict:
        schema = {"type": "string", "enum": list(self.enum)}
        return schema | ({"description": self.description} if self.description else {})

    def read(self, data: dict) -> str:
        value = data.get(self.name)
        if not isinstance(value, str):
            src, tgt = self.pair
            raise ApiError(
                400, f"missing field {self.name}: a language code (this model: {src}→{tgt})"
            )
        return value


@dataclass(frozen=True)
class Choice:
    """One of a few words; the first is the default."""

    name: str
    enum: tuple[str, ...]

    def schema(self) -> dict:
        return {"type": "string", "enum": list(self.enum), "default": self.enum[0]}

    def read(self, data: dict) -> str:
        value = data.get(self.name, self.enum[0])
        if value not in self.enum:
            raise ApiError(
                400, f"{self.name} {str(value)[:20]!r} is not supported; use {self.enum[0]!r}"
            )
        return value


@dataclass(frozen=True)
class Text:
    """Any text (LibreTranslate's api_key: accepted and ignored)."""

    name: str
    description: str

    def schema(self) -> dict:
        return {"type": "string", "description": self.description}

    def read(self, data: dict) -> str:
        value = data.get(self.name, "")
        if not isinstance(value, str):
            raise ApiError(400, f"{self.name} must be a string, got {shown(value)}")
        return value


@dataclass(frozen=True)
class Integer:
    """A whole number from `minimum` to `maximum`, a limit of the server named by `flag`.

    read() checks the type and the minimum; check_limit() the maximum, when the request is
    planned (after every reading of it passed read(), so a request with several faults is
    told the same one first as it always was). null is taken as absent."""

    name: str
    minimum: int
    maximum: int
    flag: str  # how the message names the limit: "--max-num-beams"
    default: int | None = None
    description: str | None = None

    def schema(self) -> dict:
        schema = {"type": "integer", "minimum": self.minimum, "maximum": self.maximum}
        if self.default is not None:
            schema["default"] = self.default
        return schema | ({"description": self.description} if self.description else {})

    def from_text(self, value: str) -> int | str:
        """The number a text spells; other text stays as it is, for read() to name."""
        return int(value) if re.fullmatch(r"\s*[+-]?\d{1,9}\s*", value) else value

    def read(self, data: dict) -> int | None:
        value = data.get(self.name)
        if value is None:
            return self.default
        if isinstance(value, float) and value.is_integer():  # JSON Schema's integers include 3.0
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ApiError(400, f"{self.name} must be an integer, got {shown(value)}")
        if value < self.minimum:
            raise ApiError(400, f"{self.name} must be at least {self.minimum}, got {value}")
        return value

    def check_limit(self, value: int | None) -> None:
        if value is not None and value > self.maximum:
            raise ApiError(
                400, f"{self.name}={shown(value)} is over the limit of {self.maximum} ({self.flag})"
            )


@dataclass(frozen=True)
class Boolean:
    """true or false (in a form or query string: true/1/yes/on, false/0/no/off or empty)."""

    name: str

    def schema(self) -> dict:
        return {"type": "boolean", "default": False}

    def from_text(self, value: str) -> bool | str:
        word = value.strip().lower()
        return word in _TRUE if word in _TRUE | _FALSE else value

    def read(self, data: dict) -> bool:
        value = data.get(self.name, False)
        if not isinstance(value, bool):
            raise ApiError(400, f"{self.name} must be true or false, got {shown(value)}")
        return value


# ---------------------------------------------------------------------------------------------
# A request's fields, and the two requests of this server
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestSchema:
    """The fields of one request: in the body (JSON or a form) or in the query string."""

    fields: tuple[Field, ...]
    required: tuple[str, ...]

    def __getitem__(self, name: str) -> Field:
        return next(field for field in self.fields if field.name == name)

    def schema(self) -> dict:
        return {
            "type": "object",
            "required": list(self.required),
            "maxProperties": MAX_FIELDS,
            "properties": {field.name: field.schema() for field in self.fields},
        }

    def typed(self, data: dict) -> dict:
        """A form's or a query string's fields, whose values are all text, with the numbers and
        true/false they spell made so; other text stays as it is for the checks to name."""
        typed = dict(data)
        for field in self.fields:
            from_text = getattr(field, "from_text", None)
            if from_text and isinstance(typed.get(field.name), str):
                typed[field.name] = from_text(typed[field.name])
        return typed

    def openapi(self) -> dict:
        """The route's parameters and request body.

        Where a field comes from is beyond JSON Schema, so the query parameters are all
        optional here and the body is required: every request this describes is answered as
        it says. (A request without a body, all its fields in the query string, is served
        too.)"""
        schema = self.schema()
        query = [
            {
                "name": field.name,
                "in": "query",
                "required": False,
                "schema": getattr(field, "query_schema", field.schema)(),
            }
            for field in self.fields
        ]
        return {
            "parameters": query,
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": schema},
                    "application/x-www-form-urlencoded": {"schema": schema},
                },
            },
        }


API_KEY = Text("api_key", "accepted and ignored")


def numbers(limits: ServerLimits) -> tuple[Integer, ...]:
    """The numbers of /translate, each within a limit of the server."""
    return (
        Integer("alternatives", 0, limits.max_num_beams - 1, "--max-num-beams minus one", 0),
        Integer(
            "num_beams",
            1,
            limits.max_num_beams,
            "--max-num-beams",
            description="1: greedy search; raised to alternatives + 1 when smaller",
        ),
        Integer("max_new_tokens", 1, limits.max_new_tokens, "--max-new-tokens"),
    )


def translate_request(limits: ServerLimits, languages: tuple[str, str]) -> RequestSchema:
    """LibreTranslate's /translate, plus num_beams, max_new_tokens and return_attention."""
    src, tgt = languages
    return RequestSchema(
        fields=(
            Texts("q", limits.max_chars, limits.max_items),
            Language("source", (src, "auto"), languages, "auto: " + src),
            Language("target", (tgt,), languages),
            Choice("format", ("text",)),
            *numbers(limits),
            Boolean("return_attention"),
            API_KEY,
        ),
        required=("q", "source", "target"),
    )


def detect_request(limits: ServerLimits) -> RequestSchema:
    """LibreTranslate's /detect: the texts of q, within the limits of /translate."""
    return RequestSchema(
        fields=(Texts("q", limits.max_chars, limits.max_items), API_KEY), required=("q",)
    )


# ---------------------------------------------------------------------------------------------
# Reading a request by its schema
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TranslateRequest:
    texts: list[str]
    is_list: bool  # q was a list: answer with lists of the same length
    alternatives: int = 0
    num_beams: int | None = None
    max_new_tokens: int | None = None
    return_attention: bool = False


def parse_request(data: dict, schema: RequestSchema) -> TranslateRequest:
    """Check a /translate request's fields (a JSON object, or form or query fields through
    schema.typed), the text fields first; ApiError(400) names what is wrong."""
    texts, is_list = schema["q"].read(data)
    source, target = schema["source"].read(data), schema["target"].read(data)
    if source not in schema["source"].enum or target not in schema["target"].enum:
        src, tgt = schema["source"].pair
        raise ApiError(
            400,
            f"unsupported language pair {source[:20]}→{target[:20]}: this model translates "
            f"{src}→{tgt} (GET /languages)",
        )
    schema["format"].read(data)
    schema["api_key"].read(data)
    return TranslateRequest(
        texts,
        is_list,
        *(schema[name].read(data) for name in ("alternatives", "num_beams", "max_new_tokens")),
        schema["return_attention"].read(data),
    )


def parse_detect(data: dict, schema: RequestSchema) -> list[str]:
    """Check the fields of a /detect request: the texts of q."""
    texts, _ = schema["q"].read(data)
    schema["api_key"].read(data)
    return texts


def check_limits(request: TranslateRequest, limits: ServerLimits) -> None:
    """The numbers of a parsed request within the server's limits (ApiError(400) if not)."""
    for field in numbers(limits):
        field.check_limit(getattr(request, field.name))
