"""POST /caption: an image model's caption of an uploaded picture and, when asked, where it
looked for each word (issue 12).

A request is multipart/form-data with the picture in the field `file` (curl -F file=@cat.jpg),
or JSON {"image": "<base64 of the file>"}; either may add `attention` (true: the answer has
each word's weights over the gh × gw grid of regions) and `num_beams`. The picture is read by
data/images.py's rules (content decides the format, modes become RGB, the centre square is
kept) with a pixel limit of MAX_UPLOAD_PIXELS checked from the header, so a small file that
would decode to gigabytes is refused before it is decoded. Every fault of the upload is a 4xx
naming the field; none is logged as an error.
"""

# No `from __future__ import annotations`: FastAPI reads the route's annotation (`request:
# Request`) as a live object, as in app.py.
import asyncio
import base64
import binascii
import threading
import time
from dataclasses import replace
from typing import Any

from heedful.server.body import json_object, media_type, read_timely_body
from heedful.server.limits import ApiError
from heedful.server.models import in_flight
from heedful.server.models import ready as _ready
from heedful.server.openapi import responses

MAX_UPLOAD_PIXELS = 16_000_000  # a 16-megapixel photo; data/images.py's own limit is 40
FIELDS = ("image", "file", "attention", "num_beams")
DECIMALS = 5  # the attention's rounding, as in a trace


def _flag(value: Any, form: bool) -> bool:
    """JSON true/false; a form's text true/false/1/0/yes/no (a form has no other types)."""
    if isinstance(value, bool) and not form:
        return value
    spelled = value.strip().lower() if isinstance(value, str) and form else None
    if spelled in ("true", "1", "yes", "false", "0", "no"):
        return spelled in ("true", "1", "yes")
    raise ApiError(400, f"field attention must be true or false, got {str(value)[:40]!r}")


def _beams(value: Any, largest: int, form: bool) -> int:
    """A JSON whole number, or a form's digits, from 1 to --max-num-beams."""
    if form and isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= largest:
        raise ApiError(
            400, f"field num_beams must be a whole number from 1 to {largest} (--max-num-beams)"
        )
    return value


def _options(fields: dict, form: bool, largest_beam: int) -> tuple[bool, int | None]:
    """(attention, num_beams) of a request's fields; num_beams None: the model's default."""
    attention = _flag(fields["attention"], form) if "attention" in fields else False
    beams = fields.get("num_beams")
    return attention, None if beams is None else _beams(beams, largest_beam, form)


def _decoded(text: Any) -> bytes:
    """JSON's `image`: the file's bytes in standard base64 (a data: URI's header is allowed)."""
    if not isinstance(text, str):
        raise ApiError(400, f"field image must be base64 text, got {type(text).__name__}")
    if text.startswith("data:") and "," in text:
        text = text.split(",", 1)[1]
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "field image is not valid base64") from None


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


async def read_upload(request, limits) -> tuple[bytes, dict]:
    """(the picture's bytes, the other fields) of a /caption request; 400, 413, 415 named."""
    body = await read_timely_body(request, limits)
    kind = media_type(request.headers)
    if kind == "multipart/form-data":
        fields, data = await _multipart(request.headers, body)
        if data is None:
            raise ApiError(400, "missing field file: send the picture as -F file=@picture.png")
    elif kind in ("", "application/json") or kind.endswith("+json"):
        if not body:
            raise ApiError(400, 'empty body: send the picture as JSON {"image": base64}')
        fields = json_object(body)
        if "image" not in fields:
            raise ApiError(400, "missing field image (the picture's file in base64)")
        data = _decoded(fields.pop("image"))
    else:
        raise ApiError(
            415,
            f"unsupported Content-Type {kind[:60]!r}: send multipart/form-data (field file) "
            "or application/json (field image, base64)",
        )
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise ApiError(
            400, f"unknown field {unknown[0][:40]!r}: /caption reads {', '.join(FIELDS)}"
        )
    if not data:
        raise ApiError(400, "the picture is empty (0 bytes)")
    return data, fields


class ImageService:
    """The Captioner of a served image model, over the weights its TranslationService loaded,
    reading uploads under MAX_UPLOAD_PIXELS; one caption at a time (torch uses every core)."""

    def __init__(self, translator):
        from heedful.inference.captioner import Captioner

        source = translator.src_tokenizer  # an image model's ImageSource
        limit = min(source.transform.max_pixels, MAX_UPLOAD_PIXELS)
        self.transform = replace(source.transform, max_pixels=limit)
        self.captioner = Captioner(
            translator.model,
            self.transform,
            translator.tgt_tokenizer,
            translator.generation,
            translator.device,
        )
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
            settings = self.captioner.generation.but(num_beams=num_beams, n_best=1)
            [caption] = self.captioner.caption([image], need_weights=attention, settings=settings)
        answer = {"caption": caption.text, "tokens": caption.tokens, "score": caption.score}
        answer["grid"] = list(caption.grid)
        if attention and caption.attention is not None:
            grids = caption.attention_grid().astype("float64")  # (T, gh, gw)
            answer["attention"] = grids.round(DECIMALS).tolist()
        return answer


CAPTION_ANSWER = {
    "type": "object",
    "required": ["caption", "tokens", "score", "grid"],
    "properties": {
        "caption": {"type": "string"},
        "tokens": {"type": "array", "items": {"type": "string"}},
        "score": {"type": "number"},
        "grid": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
        "attention": {
            "description": "[T][gh][gw]: each token's attention over the regions (attention=true)",
            "type": "array",
        },
    },
}
_OPTIONS = {
    "attention": {"type": "boolean", "description": "also answer each word's attention"},
    "num_beams": {"type": "integer", "minimum": 1, "description": "beam size (1: greedy)"},
}
_REQUEST = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file"],
                "properties": {"file": {"type": "string", "format": "binary"}, **_OPTIONS},
            }
        },
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["image"],
                "properties": {
                    "image": {"type": "string", "format": "byte", "description": "base64"},
                    **_OPTIONS,
                },
            }
        },
    },
}


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

    from heedful.inference.captioner import is_image_model

    state = next((s for s in states if is_image_model(s.model_dir)), None)
    if state is None:
        return
    services: list[ImageService] = []  # made on first use, once the weights have loaded

    @app.post(
        "/caption", responses=responses(CAPTION_ANSWER), openapi_extra={"requestBody": _REQUEST}
    )
    async def caption(request: Request):
        """Caption an uploaded picture (multipart field `file`, or JSON `image` in base64)."""
        service = _ready(state)
        data, fields = await read_upload(request, state.limits)
        form = media_type(request.headers) == "multipart/form-data"
        attention, beams = _options(fields, form, state.limits.max_num_beams)
        if not services:
            services.append(ImageService(service.translator))
        field = "file" if form else "image"
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
