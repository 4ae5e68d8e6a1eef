"""The OpenAPI description of the answers: each route's 200 and its errors.

The requests' side is declared in schema.py, with the checks it describes.
"""

from __future__ import annotations

ERRORS = {
    400: "invalid input: a missing or wrong field, an empty text, an unsupported language "
    "pair, a text or batch over its limit, invalid JSON",
    408: "the body did not arrive within --body-timeout",
    413: "the body is over --max-body-bytes",
    415: "the body is neither JSON nor a form, or not UTF-8",
    503: "saturated (--max-in-flight) or the model is still loading",
    504: "the request took longer than --request-timeout",
}

_STRINGS = {"type": "array", "items": {"type": "string"}}
_COUNT = {"type": "integer", "minimum": 0}
_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}


def answer_schemas(source: str | list[str]) -> dict[str, dict]:
    """The JSON Schema of each route's 200 answer, by name; `source` the language /detect
    finds (or the languages, on a server of several sources)."""
    detection = {
        "language": {"type": "string", "enum": [source] if isinstance(source, str) else source},
        "confidence": {"type": "number", "minimum": 0, "maximum": 100},
    }
    found = _object(["language", "confidence"], detection)
    translated = {
        "translatedText": {"anyOf": [{"type": "string"}, _STRINGS]},
        "alternatives": {"anyOf": [_STRINGS, {"type": "array", "items": _STRINGS}]},
        "detectedLanguage": {
            "description": "with source auto (a list for a list q)",
            "anyOf": [found, {"type": "array", "items": found}],
        },
        "attention": {
            "description": "the attention trace of docs/trace-schema.md (a list for a list q, "
            "null for a blank text: it was not translated)",
            "anyOf": [
                {"type": "object"},
                {"type": "array", "items": {"anyOf": [{"type": "object"}, {"type": "null"}]}},
            ],
        },
    }
    language = {"code": {"type": "string"}, "name": {"type": "string"}, "targets": _STRINGS}
    counts = {"in_flight": _COUNT}
    counts |= dict.fromkeys(("requests", "sentences", "batches", "largest_batch"), _COUNT)
    ready = {"status": {"type": "string"}, **counts}
    return {
        "TranslateResponse": _object(["translatedText"], translated),
        "Detections": {"type": "array", "items": found},
        "Languages": {"type": "array", "items": _object(["code", "name", "targets"], language)},
        "Health": _object(["status"], {"status": {"type": "string", "enum": ["ok"]}}),
        "Ready": _object(["status", *counts], ready),
    }


def caption_answer() -> dict:
    """The JSON Schema of POST /caption's 200 answer (images.py)."""
    captioned = {
        "caption": {"type": "string"},
        "tokens": _STRINGS,
        "score": {"type": "number"},
        "grid": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
        "attention": {
            "description": "[T][gh][gw]: each token's attention over the regions (attention=true)",
            "type": "array",
        },
    }
    return _object(["caption", "tokens", "score", "grid"], captioned)


def _object(required: list[str], properties: dict) -> dict:
    return {"type": "object", "required": required, "properties": properties}


def _json(schema: dict) -> dict:
    return {"application/json": {"schema": schema}}


def responses(answer: dict, statuses=tuple(ERRORS)) -> dict:
    """A route's OpenAPI `responses`: 200 with the schema `answer`, and the errors of
    `statuses`."""
    described = {200: {"description": "OK", "content": _json(answer)}}
    for status in statuses:
        described[status] = {"description": ERRORS[status], "content": _json(_ERROR)}
    return described
