"""The rest of LibreTranslate's API: CORS, /spec, /frontend/settings, /suggest,
/translate_file and /download_file.

LibreTranslate's web clients run on other origins, so its API answers CORS (any origin, by
default); here the same, through Starlette's CORSMiddleware, with --cors-origins to name the
origins allowed (or none). Its files are translated as /translate translates text
(pipeline.py): a .txt file line by line, an .html file by its text nodes.
"""

# No `from __future__ import annotations` here: FastAPI reads the route functions' annotations
# (`request: Request`, imported inside the function that defines the routes) as live objects.
from pathlib import PurePath

from heedful.server.body import read_timely_body
from heedful.server.documents import Document, lines, markup
from heedful.server.files import FileStore
from heedful.server.limits import ApiError, ServerLimits, origins
from heedful.server.models import Routes, ready
from heedful.server.page import language_name
from heedful.server.pipeline import translate_documents
from heedful.server.schema import RequestSchema, TranslateRequest, unsupported

# File kinds /translate_file reads, by extension, and the media type of the answer
FILE_KINDS = {".txt": "text/plain", ".html": "text/html", ".htm": "text/html"}
SUPPRESSED = "Suggestions are disabled on this server."
FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's default: the page waits this long after typing


def add_cors(app, limits: ServerLimits) -> None:
    """CORS headers as LibreTranslate sends them (GET and POST; Authorization and
    Content-Type), from --cors-origins; preflight OPTIONS requests answered."""
    from starlette.middleware.cors import CORSMiddleware

    allowed = origins(limits.cors_origins)
    if not allowed:  # --cors-origins '': no CORS headers, as before
        return
    app.add_middleware(
        CORSMiddleware,
        allow_origins=allowed,
        allow_methods=["GET", "POST"],
        allow_headers=["Authorization", "Content-Type"],
        expose_headers=["Authorization"],
        max_age=20 * 24 * 3600,  # LibreTranslate's: twenty days
    )


def _get(app, path: str, **options):
    """A GET route that answers HEAD as well, as every GET route here does (app.py)."""

    def register(endpoint):
        app.head(path, **options)(endpoint)
        return app.get(path, **options)(endpoint)

    return register


def add_libretranslate_routes(app, routes: Routes, schema: RequestSchema) -> None:
    """The routes of LibreTranslate's API beyond /translate, /detect and /languages. They are
    left out of /openapi.json (which /spec serves, as LibreTranslate serves its own there),
    the form upload being beyond what the schema-driven fuzzing there sends."""
    from fastapi import Request
    from starlette.responses import JSONResponse, Response

    state = routes.states[0]
    store = FileStore()
    app.state.files = store

    @_get(app, "/spec", include_in_schema=False)
    async def spec():
        return JSONResponse(app.openapi())

    @_get(app, "/frontend/settings", include_in_schema=False)
    async def frontend_settings():
        return JSONResponse(frontend(routes, state.limits))

    @app.post("/suggest", include_in_schema=False)
    async def suggest():
        raise ApiError(403, SUPPRESSED)

    @app.post("/translate_file", include_in_schema=False)
    async def translate_file(request: Request):
        name, data, media = await _translated_file(routes, schema, request)
        key = store.put(name, data, media)
        return JSONResponse({"translatedFileUrl": str(request.url_for("download", key=key))})

    @_get(app, "/download_file/{key}", include_in_schema=False, name="download")
    async def download(key: str):
        stored = store.get(key)
        disposition = f'attachment; filename="{stored.name}"'
        return Response(
            stored.data,
            media_type=f"{stored.media_type}; charset=utf-8",
            headers={"Content-Disposition": disposition},
        )


def frontend(routes: Routes, limits: ServerLimits) -> dict:
    """The fields LibreTranslate's web page reads from /frontend/settings."""
    source, target = routes.pairs[0]
    return {
        "charLimit": limits.max_chars,
        "frontendTimeout": FRONTEND_TIMEOUT_MS,
        "apiKeys": False,
        "keyRequired": False,
        "suggestions": False,
        "filesTranslation": True,
        "supportedFilesFormat": list(FILE_KINDS),
        "language": {
            "source": {"code": source, "name": language_name(source)},
            "target": {"code": target, "name": language_name(target)},
        },
    }


# ---------------------------------------------------------------------------------------------
# /translate_file
# ---------------------------------------------------------------------------------------------


async def _form(request, limits: ServerLimits) -> dict:
    """The upload's fields: a multipart form within --max-body-bytes, one file at most."""
    from starlette.datastructures import UploadFile
    from starlette.formparsers import MultiPartException, MultiPartParser

    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await read_timely_body(request, limits)
    if kind != "multipart/form-data" or not body:
        raise ApiError(400, "Invalid request: missing file parameter (send multipart/form-data)")

    async def stream():
        yield body

    try:
        form = await MultiPartParser(request.headers, stream(), max_files=1, max_fields=16).parse()
    except (MultiPartException, ValueError) as error:
        raise ApiError(400, f"invalid form: {str(error)[:200]}") from None
    fields = {}
    for key, value in form.multi_items():
        fields[key] = await value.read() if isinstance(value, UploadFile) else value
        if isinstance(value, UploadFile):
            fields["filename"] = value.filename or ""
    return fields


async def _translated_file(routes: Routes, schema: RequestSchema, request):
    """(file name, translated bytes, media type) of an upload."""
    limits = routes.states[0].limits
    if len(routes.states) == 1:
        ready(routes.states[0])  # 503 while the model loads, before the body
    fields = await _form(request, limits)
    data = fields.get("file")
    if not isinstance(data, bytes):
        raise ApiError(400, "Invalid request: missing file parameter")
    for name in ("source", "target"):
        if not isinstance(fields.get(name), str) or not fields[name]:
            raise ApiError(400, f"Invalid request: missing {name} parameter")
    filename = fields["filename"]
    if not filename:
        raise ApiError(400, "Invalid request: empty file")
    kind = FILE_KINDS.get(PurePath(filename).suffix.lower())
    if kind is None:
        raise ApiError(400, "Invalid request: file format not supported")
    source, target = fields["source"], fields["target"]
    if source not in schema["source"].enum or target not in schema["target"].enum:
        raise unsupported(source, target, schema["source"])
    doc = file_document(filename, data, kind == "text/html", limits)
    text_format = "html" if kind == "text/html" else "text"
    request = TranslateRequest([""], False, source=source, target=target, format=text_format)
    (output,) = await translate_documents(routes, schema, request, [doc])
    return filename, output.text.encode("utf-8"), kind


def file_document(filename: str, data: bytes, is_html: bool, limits: ServerLimits) -> Document:
    """A file's text as a document: UTF-8 text (a BOM kept), no NUL, at most --max-items ×
    --max-chars characters, each line (of a text node, in HTML) at most --max-chars."""
    shown = filename[-60:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(
            400,
            f"file {shown}: not UTF-8 text ({error.reason} at byte {error.start}): "
            "save it as UTF-8",
        ) from None
    if "\0" in text:
        raise ApiError(
            400, f"file {shown} holds NUL at character {text.index(chr(0))}: not a text file"
        )
    most = limits.max_items * limits.max_chars
    if len(text) > most:
        raise ApiError(
            400,
            f"file {shown} has {len(text):,} characters; the limit is {most:,} "
            "(--max-items × --max-chars)",
        )
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    body = text[len(bom) :]
    doc = markup(body, by_line=True) if is_html else Document(tuple(lines(body)))
    doc = Document(((bom,) if bom else ()) + doc.parts)
    for slot in doc.slots:
        if len(slot.text) > limits.max_chars:
            line = body.count("\n", 0, slot.offset) + 1
            raise ApiError(
                400,
                f"file {shown}, line {line}: {len(slot.text):,} characters; the limit "
                f"is {limits.max_chars} (--max-chars)",
            )
    return doc
