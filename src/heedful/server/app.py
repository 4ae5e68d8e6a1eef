"""The application: routes, JSON errors, loading the model in the background, `heedful serve`.
LibreTranslate's other routes and CORS are added from libre.py.

Errors are JSON `{"error": "message"}`: 400 bad input, 408 body too slow, 413 body too large,
415 neither JSON nor a form, 503 saturated or still loading, 504 over the time limit. A request
counts as in flight only once its body has arrived (body.py), so a client slow to send one
holds no room.
"""

# No `from __future__ import annotations` here: FastAPI reads the route functions' annotations
# (`request: Request`, imported inside the function that defines the routes) as live objects.
import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from heedful.server.body import read_fields
from heedful.server.connections import uvicorn_config
from heedful.server.docs import ASSETS, assets_dir, swagger_page
from heedful.server.images import add_caption_route
from heedful.server.libre import add_cors, add_libretranslate_routes
from heedful.server.limits import DEFAULT_LIMITS, ApiError, ServerLimits
from heedful.server.models import Routes, load, model_state
from heedful.server.models import ready as _ready
from heedful.server.openapi import answer_schemas, responses
from heedful.server.page import head_shape, index_page
from heedful.server.pipeline import detected, documents, translate_documents
from heedful.server.schema import (
    RequestSchema,
    detect_request,
    parse_detect,
    parse_request,
    translate_request,
)
from heedful.server.service import response_body

log = logging.getLogger(__name__)


def _error(status: int, message: str, headers: dict[str, str] | None = None):
    from starlette.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _add_error_handlers(app) -> None:
    """Every error is JSON {"error": ...}; FastAPI's 422 validation answers become 400s."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    @app.exception_handler(ApiError)
    async def api_error(request, error: ApiError):
        return _error(error.status, error.message, error.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request, error: RequestValidationError):
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}"
            for e in error.errors()[:3]
        )
        return _error(400, f"invalid request: {detail}")

    @app.exception_handler(HTTPException)
    async def http_error(request, error: HTTPException):
        return _error(error.status_code, str(error.detail), getattr(error, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected(request, error: Exception):
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return _error(500, f"internal server error ({type(error).__name__})")


def create_app(
    model_dirs: str | Path | Sequence[str | Path],
    limits: ServerLimits = DEFAULT_LIMITS,
    on_load_error: Callable[[BaseException], None] | None = None,
    engine: str = "torch",
    quantize: str | None = None,
):
    """The FastAPI application serving a model directory, or several (each language pair
    in one of them: server/models.py routes requests), within `limits`.

    Each directory's config.json is read at once (a wrong path fails here); the weights load in
    the background after start-up: GET /ready answers 200 once they all have. engine and
    quantize choose the runtime (heedful.inference.runtime.load_translator); only "torch" gives
    attention.
    """
    from contextlib import asynccontextmanager

    from fastapi import FastAPI

    several = not isinstance(model_dirs, (str, Path))
    states = [model_state(Path(d), limits) for d in (model_dirs if several else [model_dirs])]
    routes = Routes(states)

    @asynccontextmanager
    async def lifespan(app):
        runtime = {"engine": engine, "quantize": quantize}
        loading = []
        for state in states:
            state.batcher.start()
            loading.append(asyncio.create_task(load(state, on_load_error, runtime)))
        yield
        for state, task in zip(states, loading):
            task.cancel()
            await state.batcher.stop()

    app = FastAPI(
        title="heedful",
        summary="Translate with an attention seq2seq model; LibreTranslate-compatible.",
        version=_version(),
        lifespan=lifespan,
        docs_url=None,  # _add_docs_routes serves it offline
        redoc_url=None,  # off: ReDoc fetches its logo from a CDN (docs.py)
    )
    app.state.heedful, app.state.models = states[0], states
    _add_error_handlers(app)
    _add_translation_routes(app, routes)
    add_caption_route(app, states)  # images.py: POST /caption, for an image model
    _add_status_routes(app, routes)
    _add_docs_routes(app)
    add_libretranslate_routes(app, routes, translate_schema(routes))  # libre.py
    add_cors(app, limits)
    return app


def _version() -> str:
    from heedful import __version__

    return __version__


# ---------------------------------------------------------------------------------------------
# The routes
# ---------------------------------------------------------------------------------------------


async def _translate(routes: Routes, schema: RequestSchema, request) -> bytes:
    """A /translate request's answer: read, checked, its texts read into documents, routed to
    the model of its pair, queued for that model's batcher, put together, written
    (pipeline.py)."""
    if len(routes.states) == 1:  # one model: 503 before the body, while it loads
        _ready(routes.states[0])
    limits = routes.states[0].limits
    fields = await read_fields(request, limits, schema)
    parsed, *shadowed = [parse_request(data, schema) for data in fields.readings()]
    docs = documents(parsed)
    outputs = await translate_documents(routes, schema, parsed, docs, tuple(shadowed))
    return response_body(parsed, outputs, detected(parsed, routes))


def translate_schema(routes: Routes) -> RequestSchema:
    state = routes.states[0]
    return translate_request(state.limits, state.languages, routes.pairs)


def _add_translation_routes(app, routes: Routes) -> None:
    from fastapi import Request
    from starlette.responses import JSONResponse, Response

    state, sources = routes.states[0], routes.sources()
    answers = answer_schemas(sources[0] if len(sources) == 1 else sources)
    schema = translate_schema(routes)
    detect_schema = detect_request(state.limits)

    @app.post(
        "/translate",
        responses=responses(answers["TranslateResponse"]),
        openapi_extra=schema.openapi(),
    )
    async def translate(request: Request):
        """Translate `q` (a string, or a list of strings) from `source` to `target`; with
        format html, the text of an HTML document, its markup kept."""
        body = await _translate(routes, schema, request)
        return Response(body, media_type="application/json")

    @app.post(
        "/detect",
        responses=responses(answers["Detections"], (400, 408, 413, 415)),
        openapi_extra=detect_schema.openapi(),
    )
    async def detect(request: Request):
        """The language of `q` (LibreTranslate's /detect). This model reads one language, so
        that is the answer, with confidence 100: no other was considered."""
        fields = await read_fields(request, state.limits, detect_schema)
        for data in fields.readings():
            parse_detect(data, detect_schema)
        share = 100.0 / len(sources)  # several: no detector here, so each is as likely
        return JSONResponse([{"language": code, "confidence": share} for code in sources])


def _get(app, path: str, **options) -> Callable:
    """A GET route that answers HEAD as well (uvicorn sends HEAD's headers without the body)."""

    def register(endpoint):
        app.head(path, **options)(endpoint)
        return app.get(path, **options)(endpoint)

    return register


def _add_status_routes(app, routes: Routes) -> None:
    from starlette.responses import HTMLResponse, JSONResponse

    states, state = routes.states, routes.states[0]
    answers = answer_schemas(state.languages[0])
    page: list[str] = []  # built on first request (the model's default beam size is known then)

    @_get(app, "/languages", responses=responses(answers["Languages"], ()))
    async def languages_list():
        """The languages this model reads and writes (LibreTranslate's format)."""
        return JSONResponse(routes.languages())

    @_get(app, "/health", responses=responses(answers["Health"], ()))
    async def health():
        """Alive: LibreTranslate's answer, {"status": "ok"}, which its clients and tests
        expect as it is; the model's state and the batcher's counters are at /ready."""
        return JSONResponse({"status": "ok"})

    @_get(app, "/ready", responses=responses(answers["Ready"], (503,)))
    async def ready():
        """200 once the model is loaded and translating, with how many requests are in
        flight and how they were batched; 503 before."""
        for s in states:
            _ready(s)  # 503 until every model has loaded
        if len(routes.pairs) == 1:
            status = {"model": state.model_dir.name, "languages": [*state.languages]}
        else:
            models = [{"model": s.model_dir.name, "pairs": [[*p] for p in s.pairs]} for s in states]
            status = {"models": models}
        stats = [vars(s.batcher.stats) for s in states]
        counts = {"in_flight": sum(s.in_flight for s in states)}
        counts |= {k: sum(s[k] for s in stats) for k in stats[0]}
        counts["largest_batch"] = max(s["largest_batch"] for s in stats)
        return JSONResponse({"status": "ready", **status, **counts})

    @_get(app, "/", include_in_schema=False)
    async def index():
        service = _ready(state)
        if not page:
            translator = service.translator
            attention = translator.capabilities.attention  # ctranslate2 gives no weights
            beams = translator.generation.num_beams
            heads = head_shape(translator)  # a Transformer's, to switch off on the page
            page.append(index_page(state.languages, state.limits, beams, attention, heads))
        return HTMLResponse(page[0])


def _add_docs_routes(app) -> None:
    """/docs, with Swagger UI's files served from here (docs.py): no CDN."""
    from starlette.responses import HTMLResponse
    from starlette.staticfiles import StaticFiles

    app.mount(ASSETS, StaticFiles(directory=assets_dir()), name="docs-assets")

    @_get(app, "/docs", include_in_schema=False)
    async def swagger_ui():
        return HTMLResponse(swagger_page(app.title))


# ---------------------------------------------------------------------------------------------
# heedful serve
# ---------------------------------------------------------------------------------------------


def _uvicorn_logging() -> None:
    """uvicorn's log lines, in its own format, set up without logging.config.dictConfig:
    uvicorn's default config goes through it, and dictConfig shuts down every handler in the
    process, other libraries' and a notebook's too (absl's handler then closes its stream).
    Calling this again replaces the handlers it added, as the stream may have changed."""
    import sys

    from uvicorn.logging import AccessFormatter, DefaultFormatter

    access = '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'
    for name, formatter, stream in (
        ("uvicorn", DefaultFormatter("%(levelprefix)s %(message)s"), sys.stderr),
        ("uvicorn.access", AccessFormatter(access), sys.stdout),
    ):
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if getattr(h, "heedful", False)]:
            logger.removeHandler(old)
        handler = logging.StreamHandler(stream)
        handler.setFormatter(formatter)
        handler.heedful = True
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def serve(
    model_dir: str | Path | Sequence[str | Path],
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: ServerLimits = DEFAULT_LIMITS,
    log_level: str = "info",
    access_log: bool = False,
    engine: str = "torch",
    quantize: str | None = None,
) -> None:
    """Serve `model_dir` (or several: create_app) until SIGINT/SIGTERM; requests in flight
    finish first (uvicorn's graceful shutdown, bounded by the request timeout). Raises the load
    error, if any."""
    import uvicorn

    logging.basicConfig(level=log_level.upper(), format="%(levelname)s: %(message)s")
    server: list = []
    failed = threading.Event()

    def on_load_error(error: BaseException) -> None:
        failed.set()
        server[0].should_exit = True

    app = create_app(model_dir, limits, on_load_error, engine, quantize)
    _uvicorn_logging()
    config = uvicorn_config(
        app,
        limits,
        host=host,
        port=port,
        log_level=log_level,
        access_log=access_log,
        log_config=None,
    )
    server.append(uvicorn.Server(config))
    server[0].run()
    if failed.is_set():
        raise next(s.load_error for s in app.state.models if s.load_error is not None)
