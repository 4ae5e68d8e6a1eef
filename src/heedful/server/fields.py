"""The kinds of field a request has: each gives its JSON Schema and reads (checks) its value.

heedful.server.schema declares the requests from these; the parser and the OpenAPI document
both come from that one declaration.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Protocol

from heedful.server.limits import ApiError

# A text needs one character that is neither Python's whitespace (str.isspace, which also
# counts the separators \x1c-\x1f and \x85) nor the JSON-Schema regex's \s (which also counts
# U+FEFF): the OpenAPI pattern and the parser's check then agree on every string.
NOT_BLANK = r"[^\s\x1c-\x1f\x85\ufeff]"
# The schema of a text (q) and of a prefix: that, and no NUL anywhere (check_characters)
TEXT = r"^[^\x00]*[^\s\x00\x1c-\x1f\x85\ufeff][^\x00]*$"
NO_NUL = r"^[^\x00]*$"

_SURROGATE = re.compile("[\ud800-\udfff]")
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off", ""}


def shown(value: Any, width: int = 40) -> str:
    """A value as JSON, cut short: an error message quotes it, it does not echo megabytes."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def is_blank(text: str) -> bool:
    """Nothing to translate: no character but whitespace (Python's or JSON Schema's)."""
    return re.search(NOT_BLANK, text) is None


def check_characters(where: str, text: str) -> None:
    """Text as the CLI reads it: valid Unicode (JSON's "\\ud800" decodes to a lone surrogate)
    and no NUL, which no text holds (data/corpus.py refuses it in every file and on stdin:
    a UTF-16 or binary input), so `q` and `prefix` are refused where a line would be."""
    if not text.isascii() and _SURROGATE.search(text):
        raise ApiError(400, f"{where} holds an unpaired surrogate: not valid Unicode text")
    if "\0" in text:
        at = text.index("\0")
        raise ApiError(400, f"{where} holds NUL (\\u0000) at character {at}: remove it")


class Field(Protocol):
    """A field of a request. Two methods are optional: from_text(value), the value a form's
    or a query string's text spells (where it is not text: a number, true or false), and
    query_schema(), the schema of one value in the query string (where it is not schema())."""

    name: str

    def schema(self) -> dict: ...  # its JSON Schema, in the body
    def read(self, data: dict) -> Any: ...  # the checked value; ApiError(400) if wrong


@dataclass(frozen=True)
class Texts:
    """A text, or a list of texts: valid Unicode, at most `max_chars` long; a list of 1 to
    `max_items` of them. A text alone needs a character that is not blank; in a list a blank
    text is answered as it came (LibreTranslate translates a batch item by item, and an empty
    string comes back empty) rather than refusing the whole list."""

    name: str
    max_chars: int
    max_items: int

    def query_schema(self) -> dict:  # a list is the field repeated: ?q=a&q=b
        return {"type": "string", "minLength": 1, "maxLength": self.max_chars, "pattern": TEXT}

    def schema(self, blank_items: bool = True) -> dict:
        text = self.query_schema()
        item = {"type": "string", "maxLength": self.max_chars, "pattern": NO_NUL}
        item = item if blank_items else text
        listed = {"type": "array", "items": item, "minItems": 1, "maxItems": self.max_items}
        return {"anyOf": [text, listed]}

    def form_schema(self) -> dict:
        """In a form, a list of one text reads as that text (q=a), so its items are texts as
        q alone is: not blank (body.py refuses a blank one)."""
        return self.schema(blank_items=False)

    def read(self, data: dict) -> tuple[list[str], bool]:
        """The texts, and whether they came as a list (the answer is then a list too)."""
        if self.name not in data:  # LibreTranslate's words: its clients and tests match them
            raise ApiError(400, f"Invalid request: missing {self.name} parameter")
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
            self._check(f"{self.name}[{i}]" if is_list else self.name, text, is_list)
        return texts, is_list

    def _check(self, where: str, text: Any, in_list: bool) -> None:
        if not isinstance(text, str):
            raise ApiError(400, f"{where} must be a string, got {type(text).__name__}")
        if not in_list and is_blank(text):
            raise ApiError(400, f"{where} is empty: there is nothing to translate")
        check_characters(where, text)
        if len(text) > self.max_chars:
            raise ApiError(
                400,
                f"{where} has {len(text)} characters; the limit is {self.max_chars} (--max-chars)",
            )


@dataclass(frozen=True)
class Language:
    """A language code of this model's pair; `enum` the codes the schema lists (the pair
    itself is checked by parse_request, which names both). `pairs`: every pair of a server of
    several (server/models.py), named in messages in place of `pair`."""

    name: str
    enum: tuple[str, ...]
    pair: tuple[str, str]
    description: str | None = None
    pairs: tuple[tuple[str, str], ...] = ()

    def said(self) -> str:
        """this model: en→de, or this server: en→de, en→fr"""
        pairs = self.pairs or (self.pair,)
        served = ", ".join(f"{src}→{tgt}" for src, tgt in pairs)
        return f"this {'server' if len(pairs) > 1 else 'model'}: {served}"

    def schema(self) -> dict:
        schema = {"type": "string", "enum": list(self.enum)}
        return schema | ({"description": self.description} if self.description else {})

    def read(self, data: dict) -> str:
        value = data.get(self.name)
        if not isinstance(value, str):
            raise ApiError(400, f"missing field {self.name}: a language code ({self.said()})")
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
            choices = " or ".join(repr(choice) for choice in self.enum)
            message = f"{self.name} {str(value)[:20]!r} is not supported; use {choices}"
            raise ApiError(400, message)
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


def _digits(maximum: int) -> str:
    """The regex of the decimal texts (no sign, spaces or leading zeros) of the whole numbers
    from 0 to `maximum`: the JSON Schema of a number given as text. from_text reads those and
    a few more spellings (" 2", "+2", "02")."""
    top = str(min(maximum, 999_999_999))  # from_text reads at most 9 digits
    if len(top) == 1:
        return f"^[0-{top}]$"
    shorter = ["0", r"[1-9]\d{0," + str(len(top) - 2) + "}"]  # fewer digits than top
    same = []  # as long as top: a prefix of top, then a smaller digit, then any digits
    for i, digit in enumerate(top):
        lowest = 1 if i == 0 else 0  # no leading zero
        if int(digit) > lowest:
            rest = r"\d" * (len(top) - i - 1)
            same.append(f"{top[:i]}[{lowest}-{int(digit) - 1}]{rest}")
    return "^(" + "|".join([*shorter, *same, top]) + ")$"


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
    # the number may come as text in JSON too ("alternatives": "2"), as LibreTranslate reads
    # it (int(value)); the schema then lists that spelling beside the integer
    as_text: bool = False

    def schema(self) -> dict:
        schema = {"type": "integer", "minimum": self.minimum, "maximum": self.maximum}
        if self.default is not None:
            schema["default"] = self.default
        if self.as_text:
            schema = {"anyOf": [schema, {"type": "string", "pattern": _digits(self.maximum)}]}
        return schema | ({"description": self.description} if self.description else {})

    def from_text(self, value: str) -> int | str:
        """The number a text spells; other text stays as it is, for read() to name."""
        return int(value) if re.fullmatch(r"\s*[+-]?\d{1,9}\s*", value) else value

    def read(self, data: dict) -> int | None:
        value = data.get(self.name)
        if value is None:
            return self.default
        if self.as_text and isinstance(value, str) and re.fullmatch(r"0|[1-9]\d{0,8}", value):
            value = int(value)  # in JSON: the decimal spelling the schema's pattern has
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
    description: str | None = None

    def schema(self) -> dict:
        schema = {"type": "boolean", "default": False}
        return schema | ({"description": self.description} if self.description else {})

    def from_text(self, value: str) -> bool | str:
        word = value.strip().lower()
        return word in _TRUE if word in _TRUE | _FALSE else value

    def read(self, data: dict) -> bool:
        value = data.get(self.name, False)
        if not isinstance(value, bool):
            raise ApiError(400, f"{self.name} must be true or false, got {shown(value)}")
        return value


@dataclass(frozen=True)
class Number:
    """A finite number above `low` (or from it, with low_open=False) and at most `high`."""

    name: str
    low: float
    high: float
    low_open: bool = True
    description: str | None = None

    def schema(self) -> dict:
        low = {"exclusiveMinimum" if self.low_open else "minimum": self.low}
        schema = {"type": "number", **low, "maximum": self.high}
        return schema | ({"description": self.description} if self.description else {})

    def from_text(self, value: str) -> float | str:
        try:
            return float(value)
        except ValueError:
            return value

    def read(self, data: dict) -> float | None:
        if self.name not in data:
            return None
        value = data[self.name]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ApiError(400, f"{self.name} must be a number, got {shown(value)}")
        span = f"{'above' if self.low_open else 'from'} {self.low} and at most {self.high}"
        try:  # JSON's 1e400 reads as inf, and its 1 followed by 400 zeros as an int
            number = float(value)  # that no float holds (OverflowError)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise ApiError(400, f"{self.name} must be a finite number {span}, got {shown(value)}")
        if not (
            (number > self.low if self.low_open else number >= self.low) and number <= self.high
        ):
            raise ApiError(400, f"{self.name} must be {span}, got {value}")
        return number


@dataclass(frozen=True)
class Prefix:
    """Target text every output of the request must start with, at most `max_chars` long
    (an empty string: none)."""

    name: str
    max_chars: int
    description: str | None = None

    def schema(self) -> dict:
        schema = {"type": "string", "maxLength": self.max_chars, "pattern": NO_NUL}
        return schema | ({"description": self.description} if self.description else {})

    def read(self, data: dict) -> str | None:
        value = data.get(self.name, "")
        if not isinstance(value, str):
            raise ApiError(400, f"{self.name} must be a string, got {shown(value)}")
        check_characters(self.name, value)
        if len(value) > self.max_chars:
            raise ApiError(
                400,
                f"{self.name} has {len(value)} characters; the limit is {self.max_chars} "
                "(--max-chars)",
            )
        return value or None


@dataclass(frozen=True)
class File:
    """A file's bytes: a form's file (multipart/form-data), as the form parser read them, or
    in JSON (`base64`) standard base64 text, a data: URI's header allowed."""

    name: str
    description: str
    base64: bool = False

    def schema(self) -> dict:
        kind = "byte" if self.base64 else "binary"  # OpenAPI's names of the two
        return {"type": "string", "format": kind, "description": self.description}

    def read(self, data: dict) -> bytes:
        value = data[self.name]
        if not self.base64:
            return value
        if not isinstance(value, str):
            raise ApiError(
                400, f"field {self.name} must be base64 text, got {type(value).__name__}"
            )
        if value.startswith("data:") and "," in value:
            value = value.split(",", 1)[1]
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, f"field {self.name} is not valid base64") from None
