"""The request contract, declared once: the fields of /translate, /detect and /caption.

Each field below says its type, its range and its message; from the same declaration come the
checks a request passes (parse_request, parse_detect, check_limits; images.py's reading of
/caption), the typing of form and query-string text (RequestSchema.typed) and the OpenAPI
description of the request (RequestSchema.openapi, upload_openapi), so the server and its
schema cannot disagree: schemathesis fuzzes /openapi.json against the server, and
tests/server/test_schema.py checks them field by field.

Unknown fields (LibreTranslate's `api_key`, a client's extras) are ignored, as LibreTranslate
does, up to MAX_FIELDS fields in all.
"""

from __future__ import annotations

from dataclasses import dataclass

from heedful.config.search import SETTINGS, Setting
from heedful.server.fields import (
    NOT_BLANK,  # noqa: F401 (the tests and the OpenAPI checks read it here)
    Boolean,
    Choice,
    Field,
    File,
    Integer,
    Language,
    Number,
    Prefix,
    Text,
    Texts,
    shown,  # noqa: F401
)
from heedful.server.head_field import Heads
from heedful.server.limits import ApiError, ServerLimits

# Fields one request may have, unknown ones included (clients of LibreTranslate send extras
# such as api_key); the schema says so as maxProperties. Twice /translate's own fields when it
# had 15, so that a request giving every field (and a few extras) passes as fields are added
# (each search setting declared in config/search.py brings its own).
MAX_FIELDS = 32

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

    def schema(self, form: bool = False) -> dict:
        """The JSON Schema of the fields in JSON, or in a form (form_schema, where a field
        reads otherwise there)."""

        def of(field: Field) -> dict:
            return getattr(field, "form_schema", field.schema)() if form else field.schema()

        return {
            "type": "object",
            "required": list(self.required),
            "maxProperties": MAX_FIELDS,
            "properties": {field.name: of(field) for field in self.fields},
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
                    "application/x-www-form-urlencoded": {"schema": self.schema(form=True)},
                },
            },
        }


API_KEY = Text("api_key", "accepted and ignored")


def numbers(limits: ServerLimits) -> tuple[Integer, ...]:
    """The numbers of /translate, each within a limit of the server."""
    return (
        Integer(
            "alternatives",
            0,
            limits.max_num_beams - 1,
            "--max-num-beams minus one",
            0,
            as_text=True,
        ),
        beams(limits, "1: greedy search; raised to alternatives + 1 when smaller"),
        Integer("max_new_tokens", 1, limits.max_new_tokens, "--max-new-tokens"),
    )


def beams(limits: ServerLimits, description: str) -> Integer:
    """num_beams, of /translate and /caption: from 1 to --max-num-beams."""
    return Integer("num_beams", 1, limits.max_num_beams, "--max-num-beams", description=description)


# The largest whole number a search setting's field takes (top_k, seed): nine digits, all that
# a form's text may spell (Integer.from_text), whatever the setting's own bounds allow. A fact
# of HTTP's forms, not of any one setting, so it applies to each.
MAX_SETTING = 999_999_999


def setting_field(name: str, declared: Setting) -> Field:
    """The request field of the search setting `name`, as config/search.py declares it: a
    switch is a Boolean, bounds of floats a Number, of ints an Integer (at most MAX_SETTING),
    described as declared. A setting that shapes sample's draws only is read without sample
    too, and then ignored (parse_request), so that every request the OpenAPI document
    describes is answered as it says."""
    if declared.bounds is None:
        return Boolean(name, declared.http)
    low, high = declared.bounds
    if isinstance(low, float):
        return Number(name, low, high, low_open=declared.above, description=declared.http)
    top = min(high, MAX_SETTING)
    return Integer(name, low, top, f"the largest {name}", description=declared.http)


def decoding(limits: ServerLimits) -> tuple[Field, ...]:
    """The search settings that declare a field of their own (sampling's, heedful.search.
    sampling, among them) and forced beginnings (heedful.search.prefix) of /translate."""
    settings = [setting_field(name, s) for name, s in SETTINGS.items() if s.http]
    return (
        *settings,
        Prefix("prefix", limits.max_chars, "every output starts with it (format text)"),
    )


def translate_request(
    limits: ServerLimits, languages: tuple[str, str], pairs: tuple[tuple[str, str], ...] = ()
) -> RequestSchema:
    """LibreTranslate's /translate, plus num_beams, max_new_tokens, return_attention, the
    decoding fields and mask_heads. pairs: those of a server of several models or directions,
    whose codes the source and target fields list (server/models.py routes each pair)."""
    src, tgt = languages
    sources = tuple(dict.fromkeys(s for s, _ in pairs)) or (src,)
    targets = tuple(dict.fromkeys(t for _, t in pairs)) or (tgt,)
    auto = "auto: " + src if len(pairs) < 2 else "auto: the one source of the target's pairs"
    return RequestSchema(
        fields=(
            Texts("q", limits.max_chars, limits.max_items),
            Language("source", (*sources, "auto"), languages, auto, pairs),
            Language("target", targets, languages, None, pairs),
            Choice("format", ("text", "html")),  # html: its text translated (documents.py)
            *numbers(limits),
            Boolean("return_attention", "the attention behind each output (format text)"),
            API_KEY,
            *decoding(limits),
            Heads("mask_heads", MASK_HEADS),
        ),
        required=("q", "source", "target"),
    )


MASK_HEADS = (
    "heads switched off, each its output zero before W_O (Michel et al. 2019): "
    "kind:layer[:head] from 1, kind encoder, decoder or cross, a layer alone all its heads"
)


def caption_request(limits: ServerLimits) -> dict[str, RequestSchema]:
    """POST /caption, by the media type of its body: the picture (a form's file, or JSON's
    image in base64), then attention and num_beams, read as /translate reads its booleans and
    numbers (images.py reads the picture itself within its own limits)."""
    options = (
        Boolean("attention", "also answer each word's attention over the grid of regions"),
        beams(limits, "1: greedy search"),
    )
    return {
        "application/json": RequestSchema(
            (File("image", "the picture's file in base64", base64=True), *options),
            required=("image",),
        ),
        "multipart/form-data": RequestSchema(
            (File("file", "the picture's file"), *options), required=("file",)
        ),
    }


def upload_openapi(schemas: dict[str, RequestSchema]) -> dict:
    """The request body of a route that reads a body only, in each media type it takes."""
    content = {
        media: {"schema": schema.schema(form=media != "application/json")}
        for media, schema in schemas.items()
    }
    return {"requestBody": {"required": True, "content": content}}


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
    prefix: str | None = None  # every output starts with it
    source: str = "auto"  # the pair asked for: server/models.py routes by it
    target: str = ""
    format: str = "text"  # html: q is a document, its text nodes translated (documents.py)
    settings: dict | None = None  # the search settings given, by name (_settings)
    mask_heads: tuple = ()  # inference/heads.py's Heads switched off


def parse_request(data: dict, schema: RequestSchema) -> TranslateRequest:
    """Check a /translate request's fields (a JSON object, or form or query fields through
    schema.typed), the text fields first; ApiError(400) names what is wrong."""
    texts, is_list = schema["q"].read(data)
    source, target = schema["source"].read(data), schema["target"].read(data)
    if source not in schema["source"].enum or target not in schema["target"].enum:
        raise unsupported(source, target, schema["source"])
    text_format = schema["format"].read(data)
    schema["api_key"].read(data)
    # read (checked) either way; with html, of one text and not of a document, they are
    # ignored as LibreTranslate ignores alternatives there (the schema says so)
    text_only = [schema[name].read(data) for name in ("return_attention", "prefix")]
    attention, prefix = text_only if text_format == "text" else (False, None)
    numbers = {name: schema[name].read(data) for name in ("alternatives", "num_beams")}
    return TranslateRequest(
        texts,
        is_list,
        **numbers,
        max_new_tokens=schema["max_new_tokens"].read(data),
        return_attention=attention,
        prefix=prefix,
        source=source,
        target=target,
        format=text_format,
        settings=_settings(data, schema),
        mask_heads=schema["mask_heads"].read(data),
    )


def unsupported(source: str, target: str, field: Language) -> ApiError:
    """The 400 of a pair not served. A code that no pair reads (source) or writes (target) is
    answered in LibreTranslate's words, "zz is not supported", which its clients and tests
    match exactly; a pair of codes served, but not together, names the pairs that are."""
    pairs = field.pairs or (field.pair,)
    if source != "auto" and source not in {s for s, _ in pairs}:
        return ApiError(400, f"{source[:20]} is not supported")
    if target not in {t for _, t in pairs}:
        return ApiError(400, f"{target[:20]} is not supported")
    model, served = field.said().split(": ", 1)
    return ApiError(
        400,
        f"unsupported language pair {source[:20]}→{target[:20]}: {model} translates {served} "
        "(GET /languages)",
    )


def _settings(data: dict, schema: RequestSchema) -> dict:
    """The search settings the request gives, by name (a switch only when true: false leaves
    the model's own). Each is checked whether or not it is used (the schema does not know
    that those shaping sample's draws are ignored without sample true, as they then are)."""
    read = {name: schema[name].read(data) for name, s in SETTINGS.items() if s.http}
    for name, value in read.items():
        if isinstance(schema[name], Integer):
            schema[name].check_limit(value)
    drawing = read.get("sample") is True
    return {
        name: value
        for name, value in read.items()
        if value is not None and value is not False and (drawing or not SETTINGS[name].draws)
    }


def parse_detect(data: dict, schema: RequestSchema) -> list[str]:
    """Check the fields of a /detect request: the texts of q."""
    texts, _ = schema["q"].read(data)
    schema["api_key"].read(data)
    return texts


def check_limits(request: TranslateRequest, limits: ServerLimits) -> None:
    """The numbers of a parsed request within the server's limits (ApiError(400) if not)."""
    for field in numbers(limits):
        field.check_limit(getattr(request, field.name))
