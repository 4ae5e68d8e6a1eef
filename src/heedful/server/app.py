"""The application: routes, JSON errors, loading the model in the background, `heedful serve`.

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from heedful.server.batcher import Batcher
from heedful.server.body import read_fields
from heedful.server.connections import uvicorn_config
from heedful.server.docs import ASSETS, assets_dir, swagger_page
from heedful.server.limits import DEFAULT_LIMITS, ApiError, ServerLimits
from heedful.server.openapi import answer_schemas, responses
from heedful.server.page import index_page, language_name
from heedful.server.schema import (
    RequestSchema,
    detect_request,
    parse_detect,
    parse_request,
    translate_request,
)
from heedful.server.service import Job, TranslationService, response_body

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


@dataclass
class _State:
    """What the routes share: the settings, the batcher, and the service once it has loaded."""

    model_dir: Path
    languages: tuple[str, str]
    limits: ServerLimits
    batcher: Batcher | None = None
    service: TranslationService | None = None
    load_error: BaseException | None = None
    in_flight: int = 0


async def _load(state: _State, on_error, runtime: dict) -> None:
    """Load the model off the event loop, so /health answers while it loads."""
    from heedful.runtime import load_translator

    try:
        translator = await asyncio.to_thread(load_translator, state.model_dir, **runtime)
        state.service = TranslationService(translator, state.limits)
        log.info(
            "model %s loaded: %s→%s (%s engine%s)",
            state.model_dir,
            *translator.languages,
            translator.engine,
            f", {runtime['quantize']}" if runtime.get("quantize") else "",
        )
    except Exception as error:  # noqa: BLE001 - reported by /ready and the serve command
        state.load_error = error
        log.error("could not load %s: %s", state.model_dir, error)
        if on_error:
            on_error(error)


def create_app(
    model_dir: str | Path,
    limits: ServerLimits = DEFAULT_LIMITS,
    on_load_error: Callable[[BaseException], None] | None = None,
    engine: str = "torch",
    quantize: str | None = None,
):
    """The FastAPI application serving the model directory `model_dir` within `limits`.

    The directory's config.json is read at once (a wrong path fails here); the weights load in
    the background after start-up: GET /ready answers 200 once they have. engine and quantize
    choose the runtime (heedful.runtime.load_translator); only "torch" gives attention.
    """
    from contextlib import asynccontextmanager

    from fastapi import FastAPI

    from heedful.checkpoint import read_model_config
    from heedful.hf.layout import check_layout, is_huggingface_dir, languages

    model_dir = Path(model_dir)
    if is_huggingface_dir(model_dir):  # a save_pretrained directory (heedful.hf)
        check_layout(model_dir)
        state = _State(model_dir, languages(model_dir), limits)
    else:
        meta, _ = read_model_config(model_dir)
        state = _State(
            model_dir, (meta.get("src_lang", "src"), meta.get("tgt_lang", "tgt")), limits
        )
    state.batcher = Batcher(
        lambda jobs: state.service.run(jobs),  # type: ignore[union-attr]
        limits.max_batch_size,
        limits.max_wait_ms / 1000,
    )

    @asynccontextmanager
    async def lifespan(app):
        state.batcher.start()
        runtime = {"engine": engine, "quantize": quantize}
        loading = asyncio.create_task(_load(state, on_load_error, runtime))
        yield
        loading.cancel()
        await state.batcher.stop()

    app = FastAPI(
        title="heedful",
        summary="Translate with an attention seq2seq model; LibreTranslate-compatible.",
        version=_version(),
        lifespan=lifespan,
        docs_url=None,  # _add_docs_routes serves it offline
        redoc_url=None,  # off: ReDoc fetches its logo from a CDN (docs.py)
    )
    app.state.heedful = state
    _add_error_handlers(app)
    _add_translation_routes(app, state)
    _add_status_routes(app, state)
    _add_docs_routes(app)
    return app


def _version() -> str:
    from heedful import __version__

    return __version__


# ---------------------------------------------------------------------------------------------
# The routes
# ---------------------------------------------------------------------------------------------


def _ready(state: _State) -> TranslationService:
    if state.service is not None:
        return state.service
    if state.load_error is not None:
        message = f"the model could not be loaded: {state.load_error}"
    else:
        message = "the model is still loading; GET /ready answers 200 when it is done"
    raise ApiError(503, message, {"Retry-After": "1"})


@contextmanager
def _in_flight(state: _State) -> Iterator[None]:
    """Count a request from its queueing to its answer; 503 at once past --max-in-flight.
    Only requests whose body has arrived get here: a client slow to send one holds no room."""
    limit = state.limits.max_in_flight
    if state.in_flight >= limit:
        raise ApiError(
            503,
            f"the server is saturated: {state.in_flight} requests in flight, the limit is "
            f"{limit} (--max-in-flight); retry shortly",
            {"Retry-After": "1"},
        )
    state.in_flight += 1
    try:
        yield
    finally:
        state.in_flight -= 1


async def _translate(state: _State, schema: RequestSchema, request) -> bytes:
    """A /translate request's answer: read, checked, queued for the batcher, written."""
    service, limits = _ready(state), state.limits
    fields = await read_fields(request, limits, schema)
    parsed, *shadowed = [parse_request(data, schema) for data in fields.readings()]
    searches, attention = service.plan(parsed)
    for other in shadowed:  # a query value the body overrides must be valid all the same
        service.plan(other)
    future = asyncio.get_running_loop().create_future()
    with _in_flight(state):
        try:
            outputs = await asyncio.wait_for(
                state.batcher.submit(Job(parsed.texts, searches, attention, future)),
                limits.request_timeout,
            )
        except asyncio.TimeoutError:
            raise ApiError(
                504,
                f"the request took longer than {limits.request_timeout:g} s (--request-timeout)",
            ) from None
    return response_body(parsed, outputs)


def _add_translation_routes(app, state: _State) -> None:
    from fastapi import Request
    from starlette.responses import JSONResponse, Response

    answers = answer_schemas(state.languages[0])
    translate_schema = translate_request(state.limits, state.languages)
    detect_schema = detect_request(state.limits)

    @app.post(
        "/translate",
        responses=responses(answers["TranslateResponse"]),
        openapi_extra=translate_schema.openapi(),
    )
    async def translate(request: Request):
        """Translate `q` (a string, or a list of strings) from `source` to `target`."""
        body = await _translate(state, translate_schema, request)
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
        return JSONResponse([{"language": state.languages[0], "confidence": 100.0}])


def _get(app, path: str, **options) -> Callable:
    """A GET route that answers HEAD as well (uvicorn sends HEAD's headers without the body)."""

    def register(endpoint):
        app.head(path, **options)(endpoint)
        return app.get(path, **options)(endpoint)

    return register


def _add_status_routes(app, state: _State) -> None:
    from starlette.responses import HTMLResponse, JSONResponse

    src, tgt = state.languages
    answers = answer_schemas(src)
    page: list[str] = []  # built on first request (the model's default beam size is known then)

    @_get(app, "/languages", responses=responses(answers["Languages"], ()))
    async def languages_list():
        """The languages this model reads and writes (LibreTranslate's format)."""
        listed = [{"code": src, "name": language_name(src), "targets": [tgt]}]
        if tgt != src:
            listed.append({"code": tgt, "name": language_name(tgt), "targets": []})
        return JSONResponse(listed)

    @_get(app, "/health", responses=responses(answers["Health"], ()))
    async def health():
        """Alive; with how many requests are in flight and how they were batched."""
        counts = {"status": "ok", "ready": state.service is not None, "in_flight": state.in_flight}
        return JSONResponse(counts | vars(state.batcher.stats))

    @_get(app, "/ready", responses=responses(answers["Ready"], (503,)))
    async def ready():
        """200 once the model is loaded and translating; 503 before."""
        _ready(state)
        model = {"model": state.model_dir.name, "languages": [src, tgt]}
        return JSONResponse({"status": "ready"} | model)

    @_get(app, "/", include_in_schema=False)
    async def index():
        service = _ready(state)
        if not page:
            translator = service.translator
            attention = translator.engine == "torch"  # ctranslate2 gives no weights
            beams = translator.generation.num_beams
            page.append(index_page(state.languages, state.limits, beams, attention))
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
    model_dir: str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: ServerLimits = DEFAULT_LIMITS,
    log_level: str = "info",
    access_log: bool = False,
    engine: str = "torch",
    quantize: str | None = None,
) -> None:
    """Serve `model_dir` until SIGINT/SIGTERM; requests in flight finish first (uvicorn's
    graceful shutdown, bounded by the request timeout). Raises the load error, if any."""
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
        app, limits, host=host, port=port, log_level=log_level, access_log=access_log,
        log_config=None,
    )  # fmt: skip
    server.append(uvicorn.Server(config))
    server[0].run()
    if failed.is_set():
        raise app.state.heedful.load_error
