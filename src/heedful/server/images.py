"""POST /caption: an image model's caption of an uploaded picture and, when asked, where it
looked for each word (issue 12).

A request is multipart/form-data with the picture in the field `file` (curl -F file=@cat.jpg),
or JSON {"image": "<base64 of the file>"}; either may add `attention` (true: the answer has
each word's weights over the gh × gw grid of regions) and `num_beams`, declared with the fields
of /translate (schema.caption_request: one reading of booleans and numbers, one OpenAPI
description from the declaration). The picture is read by
data/images.py's rules (content decides the format, modes become RGB, the centre square is
kept) with a pixel limit of MAX_UPLOAD_PIXELS checked from the header, so a small file that
would decode to gigabytes is refused before it is decoded. Every fault of the upload is a 4xx
naming the field; none is logged as an error.
"""

# No `from __future__ import annotations`: FastAPI reads the route's annotation (`request:
# Request`) as a live object, as in app.py.
import asyncio
import threading
import time
from dataclasses import replace

from heedful.server.body import json_object, media_type, read_timely_body
from heedful.server.limits import ApiError
from heedful.server.models import in_flight
from heedful.server.models import ready as _ready
from heedful.server.openapi import caption_answer, responses
from heedful.server.schema import RequestSchema, caption_request, upload_openapi

MAX_UPLOAD_PIXELS = 16_000_000  # a 16-megapixel photo; data/images.py's own limit is 40
DECIMALS = 5  # the attention's rounding, as in a trace


async def _multipart(headers, body: bytes) -> tuple[dict, bytes | None]:
    """The form's text fields, and the bytes of its one file (field `file`)."""
    from starlette.datastructures import UploadFile
    from starlette.formparsers import MultiPartException, MultiPartParser

    async def stream():
        yield body

    try:
        form = await MultiPartParser(headers, stream(), max_files=1, max_fields=8).parse()
    except (MultiPartException, ValueError) as error:
        raise ApiError(400, f"invalid form: {str(error)[:200]}") from None
    fields, data = {}, None
    for key, value in form.multi_items():
        if isinstance(value, UploadFile):
            if key != "file":
                raise ApiError(400, f"the picture goes in the form field file, not {key[:40]!r}")
            data = await value.read()
            await value.close()
        else:
            fields[key] = value
    return fields, data


async def read_upload(request, limits, schemas: dict[str, RequestSchema]):
    """(the picture's bytes, attention, num_beams or None, the field it came in) of a /caption
    request, every field read by its declaration in `schemas` (by media type); 400, 413, 415
    named."""
    body = await read_timely_body(request, limits)
    kind = media_type(request.headers)
    if kind == "multipart/form-data":
        fields, data = await _multipart(request.headers, body)
        if data is None:
            raise ApiError(400, "missing field file: send the picture as -F file=@picture.png")
        schema, fields = schemas[kind], schemas[kind].typed({**fields, "file": data})
    elif kind in ("", "application/json") or kind.endswith("+json"):
        if not body:
            raise ApiError(400, 'empty body: send the picture as JSON {"image": base64}')
        schema, fields = schemas["application/json"], json_object(body)
        if "image" not in fields:
            raise ApiError(400, "missing field image (the picture's file in base64)")
    else:
        raise ApiError(
            415,
            f"unsupported Content-Type {kind[:60]!r}: send multipart/form-data (field file) "
            "or application/json (field image, base64)",
        )
    picture, *options = schema.fields  # the file, or the image in base64; then the options
    data = picture.read(fields)
    names = [s.fields[0].name for s in schemas.values()] + [field.name for field in options]
    unknown = sorted(set(fields) - set(names))
    if unknown:
        raise ApiError(400, f"unknown field {unknown[0][:40]!r}: /caption reads {', '.join(names)}")
    if not data:
        raise ApiError(400, "the picture is empty (0 bytes)")
    attention, beams = (schema[name].read(fields) for name in ("attention", "num_beams"))
    schema["num_beams"].check_limit(beams)
    return data, attention, beams, picture.name


class ImageService:
    """A served image model's Translator, reading uploads under MAX_UPLOAD_PIXELS; one caption
    at a time (torch uses every core)."""

    def __init__(self, translator):
        self.translator, transform = translator, translator.source.transform
        limit = min(transform.max_pixels, MAX_UPLOAD_PIXELS)
        self.transform = replace(transform, max_pixels=limit)
        self.lock = threading.Lock()

    def answer(
        self, data: bytes, field: str, attention: bool, num_beams: int | None, deadline: float
    ) -> dict | None:
        """The answer's JSON, or None when the deadline (time.monotonic()) passed while it
        waited for the model: its client has had its 504, so the model does not run for it."""
        from heedful.data.images import ImageError, load_image

        try:  # every fault of the picture, named, before the model runs; decoded once
            image = load_image(data, self.transform, f"field {field}")
        except ImageError as error:
            raise ApiError(400, str(error)) from None
        with self.lock:
            if time.monotonic() > deadline:  # queued uploads past theirs must not jam the rest
                return None
            settings = self.translator.generation.but(num_beams=num_beams, n_best=1)
            [caption] = self.translator.translate(
                [image], need_weights=attention, settings=settings
            )
        answer = {"caption": caption.text, "tokens": caption.tokens, "score": caption.score}
        answer["grid"] = list(caption.grid)
        if attention and caption.attention is not None:
            grids = caption.attention_grid().astype("float64")  # (T, gh, gw)
            answer["attention"] = grids.round(DECIMALS).tolist()
        return answer


async def _counted_until_done(state, job: tuple):
    """job[0](*job[1:]) in a thread, counted in /ready's in_flight (and against
    --max-in-flight) until the thread ends, not only until its client's 504: a caption past
    its deadline still holds the model, and the limits must say so. Run it as a task the
    request shields: a 504 or a client gone leaves the count to the thread's end."""
    with in_flight(state):  # a 503 here, at once, when the server is saturated
        return await asyncio.to_thread(*job)


def _retrieved(work: asyncio.Future) -> None:
    """A caption's late outcome, read: a 400 after its client's 504 is no unhandled error."""
    if not work.cancelled():
        work.exception()


def add_caption_route(app, states) -> None:
    """POST /caption on a server whose models include an image model (the first one answers);
    nothing on a server of text models."""
    from fastapi import Request
    from starlette.responses import JSONResponse

    from heedful.checkpoint.model_dir import source_kind

    state = next((s for s in states if source_kind(s.model_dir) == "image"), None)
    if state is None:
        return
    services: list[ImageService] = []  # made on first use, once the weights have loaded
    schemas = caption_request(state.limits)

    @app.post(
        "/caption",
        responses=responses(caption_answer()),
        openapi_extra=upload_openapi(schemas),
    )
    async def caption(request: Request):
        """Caption an uploaded picture (multipart field `file`, or JSON `image` in base64)."""
        service = _ready(state)
        data, attention, beams, field = await read_upload(request, state.limits, schemas)
        if not services:
            services.append(ImageService(service.translator))
        limit = state.limits.request_timeout
        deadline = time.monotonic() + limit
        job = (services[0].answer, data, field, attention, beams, deadline)
        work = asyncio.ensure_future(_counted_until_done(state, job))
        work.add_done_callback(_retrieved)
        try:
            answer = await asyncio.wait_for(asyncio.shield(work), limit)
        except asyncio.TimeoutError:
            answer = None
        if answer is None:  # past its deadline, waiting or running
            raise ApiError(504, f"the caption took longer than {limit:g} s")
        return JSONResponse(answer)
