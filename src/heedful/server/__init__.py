"""HTTP API over Translator: LibreTranslate's /translate, with the attention behind each output.

    heedful serve MODEL_DIR... [--host 127.0.0.1] [--port 8000] [--max-chars 1000 ...]
                            [--engine torch|ctranslate2] [--quantize int8] [--cors-origins *]

    POST /translate   {"q": str | [str], "source": "en", "target": "de"} -> {"translatedText": ...}
                      (format html: the text of an HTML document; source auto: detectedLanguage)
    POST /detect      {"q": str} -> [{"language": "en", "confidence": 100.0}]
    GET  /languages   [{"code", "name", "targets"}]
    POST /translate_file  a .txt or .html file -> {"translatedFileUrl"}: GET /download_file/...
    GET  /health      {"status": "ok"};  GET /ready: 200 once loaded, with the batcher's counters
    GET  /frontend/settings, /spec; POST /suggest (403: off)   LibreTranslate's, as it answers
    GET  /            a page to translate and explore the attention (works offline: no CDN)
    GET  /docs, /openapi.json                          (HEAD works wherever GET does)

Every answer carries CORS headers for the origins of --cors-origins (any, by default, as
LibreTranslate), so web pages on other origins can call the API.

Read in this order, parts to whole:

    limits.py       ServerLimits (every limit finite, each a flag of `heedful serve`), ApiError
    schema.py       the request contract, declared once: the parser and the OpenAPI schema
    body.py         reading the body (JSON, a form, the query string) within size and time
    service.py      TranslationService: plan a request's searches, translate batches, answer
    batcher.py      one queue, one worker thread: what arrives together is translated together
    documents.py    what of a text the model reads: plain text, HTML's text nodes, a file's lines
    pipeline.py     a request's documents translated by the model of its pair, put back together
    openapi.py      the answers' schemas and error statuses, for /openapi.json
    page.py         the page at GET / (assets/index.html, page.css, page.js)
    connections.py  uvicorn's settings: header and send deadlines, idle and stalled
                    connections make room, /health and /ready keep some
    models.py       the models served (one batcher each) and the routing of language pairs
    files.py        the translated files of /translate_file, in memory within bounds
    libre.py        the rest of LibreTranslate's API: CORS, /spec, /frontend/settings, files
    app.py          create_app (routes, JSON errors, background loading) and serve

Every limit is a field of ServerLimits. FastAPI, uvicorn and python-multipart (the `serve`
extra) are imported inside the functions that need them, so `heedful` without the extra still
runs everything else.
"""

from heedful.server.app import create_app, serve
from heedful.server.connections import uvicorn_config
from heedful.server.limits import ApiError, ServerLimits
from heedful.server.schema import (
    TranslateRequest,
    detect_request,
    parse_detect,
    parse_request,
    translate_request,
)
from heedful.server.service import TranslationService, response_body

__all__ = [
    "ApiError",
    "ServerLimits",
    "TranslateRequest",
    "TranslationService",
    "create_app",
    "detect_request",
    "parse_detect",
    "parse_request",
    "response_body",
    "serve",
    "translate_request",
    "uvicorn_config",
]
