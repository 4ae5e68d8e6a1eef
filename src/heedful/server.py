"""HTTP API over Translator: LibreTranslate's /translate, with the attention behind each output.

    heedful serve MODEL_DIR [--host 127.0.0.1] [--port 8000] [--max-chars 1000 ...]
                            [--engine torch|ctranslate2] [--quantize int8]

    POST /translate   {"q": str | [str], "source": "en", "target": "de"} -> {"translatedText": ...}
    POST /detect      {"q": str} -> [{"language": "en", "confidence": 100.0}]
    GET  /languages   [{"code", "name", "targets"}]
    GET  /health      alive, with the batcher's counters;  GET /ready: 200 once the model is loaded
    GET  /            a page to translate and explore the attention (works offline: no CDN)
    GET  /docs, /openapi.json                          (HEAD works wherever GET does)

As in LibreTranslate, the fields may come as JSON, as a form, or in the query string (which is
how deep-translator sends them, with an empty body). A request with a body carries q, source and
target in it; the query string may add the other fields. A field in both places must be valid
in both, and the body's value is the one used.

Concurrent requests meet in one queue. The batcher takes whatever arrived within `max_wait_ms`
(up to `max_batch_size` sentences) and translates it in one worker thread, so the event loop keeps
answering while the model computes and throughput grows with load. Every limit is a field of
ServerLimits; errors are JSON `{"error": "message"}`: 400 bad input, 408 body too slow,
413 body too large, 415 neither JSON nor a form, 503 saturated or still loading, 504 over the
time limit. A request counts as in flight only once its body has arrived, and a connection
that is slow to send its headers or sits idle is closed (uvicorn_config), so neither slow nor
idle clients take room from real requests.

FastAPI, uvicorn and python-multipart (the `serve` extra) are imported inside the functions that
need them, so `heedful` without the extra still runs everything else.
"""

# No `from __future__ import annotations` here: FastAPI reads the route functions' annotations
# (`request: Request`, imported inside the function that defines the routes) as live objects.
import asyncio
import json
import logging
import math
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import torch

from heedful.checkpoint import read_model_config
from heedful.config import ModelConfig
from heedful.decoding import max_output_lengths

log = logging.getLogger("heedful.server")

# ---------------------------------------------------------------------------------------------
# Limits: every one finite, with a default and a command-line flag (--max-chars, ...)
# ---------------------------------------------------------------------------------------------


def _limit(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ServerLimits:
    """What one request, and the server as a whole, may ask for. `heedful serve --help` lists
    each field as a flag (max_chars -> --max-chars) with the help text below."""

    max_chars: int = _limit(1000, "Characters in one text; longer texts get 400.")
    max_items: int = _limit(64, "Texts in one request (q as a list); more get 400.")
    max_body_bytes: int = _limit(1 << 20, "Bytes of one request body; larger bodies get 413.")
    max_num_beams: int = _limit(8, "Largest num_beams (and alternatives + 1); more get 400.")
    max_new_tokens: int = _limit(
        512,
        "Output tokens per text; the model's own limit, max_len_ratio x source tokens + "
        "max_len_offset (generation.json), applies as well.",
    )
    max_attention_bytes: int = _limit(
        8 << 20, "Bytes of the attention traces of one request (return_attention); 400 beyond."
    )
    max_in_flight: int = _limit(
        32,
        "Requests queued or translating at once (counted once their body has arrived); "
        "further requests get 503 at once.",
    )
    request_timeout: float = _limit(30.0, "Seconds from a request's body to its answer; then 504.")
    header_timeout: float = _limit(
        10.0,
        "Seconds a connection may take to send a request's headers, counted from its opening "
        "or its last answer (keep-alive); then it is closed.",
    )
    body_timeout: float = _limit(
        10.0, "Seconds a request may take to send its body; then 408 and the connection closes."
    )
    max_batch_size: int = _limit(32, "Sentences translated together (1: one at a time).")
    max_wait_ms: float = _limit(5.0, "How long a batch waits for more requests to join it.")
    max_connections: int = _limit(
        256,
        "Open connections. A new one past it closes the longest-idle connection (one with no "
        "request under way); when none is idle, uvicorn answers a plain-text 503.",
    )

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"ServerLimits.{spec.name} must be a number, got {value!r}")
            if spec.name == "max_wait_ms":  # 0: no waiting, batch what is already queued
                ok, rule = math.isfinite(value) and value >= 0, ">= 0"
            elif isinstance(spec.default, float):
                ok, rule = math.isfinite(value) and value > 0, "> 0 and finite"
            else:
                ok, rule = value >= 1, ">= 1"
            if not ok:
                raise ValueError(f"ServerLimits.{spec.name} must be {rule}, got {value!r}")


class ApiError(Exception):
    """An answer other than 200: the status a client expects and a message a person can act on."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "fi": "Finnish", "fr": "French", "hi": "Hindi",
    "hu": "Hungarian", "it": "Italian", "ja": "Japanese", "ko": "Korean", "nl": "Dutch",
    "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sv": "Swedish",
    "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# A request, checked: the fields of LibreTranslate's /translate plus ours
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TranslateRequest:
    texts: list[str]
    is_list: bool  # q was a list: answer with lists of the same length
    alternatives: int = 0
    num_beams: int | None = None
    max_new_tokens: int | None = None
    return_attention: bool = False


_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off", ""}
_SURROGATE = re.compile("[\ud800-\udfff]")


def _shown(value: Any, width: int = 40) -> str:
    """A value as JSON, cut short: an error message quotes it, it does not echo megabytes."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def _integer(data: dict, name: str, smallest: int) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():  # JSON Schema's integers include 3.0
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(400, f"{name} must be an integer, got {_shown(value)}")
    if value < smallest:
        raise ApiError(400, f"{name} must be at least {smallest}, got {value}")
    return value


def _boolean(data: dict, name: str) -> bool:
    value = data.get(name, False)
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be true or false, got {_shown(value)}")
    return value


_INTEGERS, _BOOLEANS = ("alternatives", "num_beams", "max_new_tokens"), ("return_attention",)


def typed_text_fields(data: dict) -> dict:
    """A form's or a query string's fields, whose values are all text, with the numbers and
    true/false they spell made so; other text stays as it is for the checks to name."""
    typed = dict(data)
    for name in _INTEGERS:
        value = typed.get(name)
        if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d{1,9}\s*", value):
            typed[name] = int(value)
    for name in _BOOLEANS:
        value = typed.get(name)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            typed[name] = value.strip().lower() in _TRUE
    return typed


# A text needs one character that is neither Python's whitespace (str.isspace, which also
# counts the separators \x1c-\x1f and \x85) nor the JSON-Schema regex's \s (which also counts
# U+FEFF): the OpenAPI pattern below and this check then agree on every string.
_NOT_BLANK = r"[^\s\x1c-\x1f\x85\ufeff]"


def _blank(text: str) -> bool:
    return re.search(_NOT_BLANK, text) is None


def _texts(data: dict, limits: ServerLimits) -> tuple[list[str], bool]:
    if "q" not in data:
        raise ApiError(400, "missing field q: the text to translate (a string or a list)")
    q = data["q"]
    is_list = isinstance(q, list)
    texts = q if is_list else [q]
    if is_list and not texts:
        raise ApiError(400, "q is an empty list: give at least one text")
    if len(texts) > limits.max_items:
        raise ApiError(
            400, f"q has {len(texts)} texts; the limit is {limits.max_items} (--max-items)"
        )
    for i, text in enumerate(texts):
        where = f"q[{i}]" if is_list else "q"
        if not isinstance(text, str):
            raise ApiError(400, f"{where} must be a string, got {type(text).__name__}")
        if _blank(text):
            raise ApiError(400, f"{where} is empty: there is nothing to translate")
        if not text.isascii() and _SURROGATE.search(text):  # JSON's "\ud800" decodes alone
            raise ApiError(400, f"{where} holds an unpaired surrogate: not valid Unicode text")
        if len(text) > limits.max_chars:
            raise ApiError(
                400,
                f"{where} has {len(text)} characters; the limit is {limits.max_chars} "
                "(--max-chars)",
            )
    return texts, is_list


def _api_key(data: dict) -> None:
    """LibreTranslate's api_key is accepted and ignored, but it is text, as the schema says."""
    if not isinstance(data.get("api_key", ""), str):
        raise ApiError(400, f"api_key must be a string, got {_shown(data['api_key'])}")


def parse_detect(data: dict, limits: ServerLimits) -> list[str]:
    """Check the fields of a /detect request: the texts of q, within the limits of /translate."""
    texts, _ = _texts(data, limits)
    _api_key(data)
    return texts


def parse_request(data: dict, limits: ServerLimits, languages: tuple[str, str]) -> TranslateRequest:
    """Check a request's fields (a JSON object, or form or query fields through
    typed_text_fields); ApiError(400) names what is wrong.

    Unknown fields (LibreTranslate's `api_key`, say) are ignored, as LibreTranslate does.
    """
    texts, is_list = _texts(data, limits)
    src, tgt = languages
    for name in ("source", "target"):
        if not isinstance(data.get(name), str):
            raise ApiError(400, f"missing field {name}: a language code (this model: {src}→{tgt})")
    if data["source"] not in (src, "auto") or data["target"] != tgt:
        raise ApiError(
            400,
            f"unsupported language pair {data['source'][:20]}→{data['target'][:20]}: this "
            f"model translates {src}→{tgt} (GET /languages)",
        )
    if data.get("format", "text") != "text":
        raise ApiError(400, f"format {str(data['format'])[:20]!r} is not supported; use 'text'")
    _api_key(data)
    return TranslateRequest(
        texts,
        is_list,
        _integer(data, "alternatives", 0) or 0,
        _integer(data, "num_beams", 1),
        _integer(data, "max_new_tokens", 1),
        _boolean(data, "return_attention"),
    )


# ---------------------------------------------------------------------------------------------
# The model's side: plan a request's searches, run batches of them (in the worker thread)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Search:
    """The settings that decide which texts may share a batch."""

    num_beams: int
    n_best: int
    max_len_ratio: float
    max_len_offset: int


@dataclass(eq=False)
class Job:
    """One request in the queue: its texts, their searches and where the answer goes."""

    texts: list[str]
    searches: list[Search]
    attention: bool
    future: asyncio.Future


@dataclass
class Output:
    text: str
    alternatives: list[str]
    trace_json: str | None = None  # the trace (docs/trace-schema.md), serialized in the worker


_BYTES_PER_NUMBER = 8  # "0.12345," in a trace: five decimals and a comma
_TOP_K = 5  # candidates per step in a trace (build_trace's default)


def _dumps(data: Any) -> str:
    """Compact JSON; NaN and ±inf (a -inf score), which JSON cannot hold, become null."""
    try:
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return _dumps(_finite(data))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


class TranslationService:
    """A loaded Translator with the server's limits: plans requests, translates batches."""

    def __init__(self, translator, model_config: ModelConfig, limits: ServerLimits):
        self.translator, self.config, self.limits = translator, model_config, limits
        learned = model_config.arch == "transformer" and model_config.positional == "learned"
        # a learned positional table ends at max_positions; sinusoidal ones extend on the fly
        self.max_positions = model_config.max_positions if learned else None

    def plan(self, request: TranslateRequest) -> tuple[list[Search], bool]:
        """The search of every text, with beams and output lengths within the limits."""
        limits, generation = self.limits, self.translator.generation
        n_best = request.alternatives + 1
        if n_best > limits.max_num_beams:
            raise ApiError(
                400,
                f"alternatives={_shown(request.alternatives)} is over the limit of "
                f"{limits.max_num_beams - 1} (--max-num-beams minus one)",
            )
        beams = request.num_beams
        if beams is not None and beams > limits.max_num_beams:
            raise ApiError(
                400,
                f"num_beams={_shown(beams)} is over the limit of {limits.max_num_beams} "
                "(--max-num-beams)",
            )
        if beams is None:
            beams = min(generation.num_beams, limits.max_num_beams)
        beams = max(beams, n_best)  # n alternatives need a beam of n + 1
        asked = request.max_new_tokens
        if asked is not None and asked > limits.max_new_tokens:
            raise ApiError(
                400,
                f"max_new_tokens={_shown(asked)} is over the limit of {limits.max_new_tokens} "
                "(--max-new-tokens)",
            )
        if request.return_attention and self.translator.engine != "torch":
            raise ApiError(
                400,
                f"this server runs the {self.translator.engine} engine, which gives no "
                "attention weights: drop return_attention (the torch engine gives them)",
            )
        searches, attention_bytes = [], 0
        for i, text in enumerate(request.texts):
            source_tokens = len(self.translator.src_tokenizer.encode(text))
            if self.max_positions is not None and source_tokens > self.max_positions:
                where = f"q[{i}]" if request.is_list else "q"
                raise ApiError(
                    400,
                    f"{where} is {source_tokens} tokens long; this model reads at most "
                    f"{self.max_positions}",
                )
            search = self._search(source_tokens, beams, n_best, asked)
            searches.append(search)
            steps = self._output_limit(source_tokens, search) + 1  # + </s>
            attention_bytes += self._attention_bytes(source_tokens, steps, n_best)
        if request.return_attention and attention_bytes > limits.max_attention_bytes:
            raise ApiError(
                400,
                f"the attention of this request could take {attention_bytes:,} bytes; the limit "
                f"is {limits.max_attention_bytes:,} (--max-attention-bytes): send shorter or "
                "fewer texts, fewer alternatives, or drop return_attention",
            )
        return searches, request.return_attention

    def _search(self, source_tokens: int, beams: int, n_best: int, asked: int | None) -> Search:
        """The model's output limit (ratio · S + offset), capped by the request and the server;
        a cap that binds becomes a limit of its own (ratio 0, offset = the cap)."""
        g = self.translator.generation
        natural = Search(beams, n_best, g.max_len_ratio, g.max_len_offset)
        caps = [self.limits.max_new_tokens, asked, self.max_positions]
        cap = min(c for c in caps if c is not None)
        if self._output_limit(source_tokens, natural) <= cap:
            return natural
        return Search(beams, n_best, 0.0, cap)

    @staticmethod
    def _output_limit(source_tokens: int, search: Search) -> int:
        src = torch.ones(1, source_tokens, dtype=torch.long)  # no padding: length S
        return int(max_output_lengths(src, 0, search.max_len_ratio, search.max_len_offset))

    def _attention_bytes(self, s: int, t: int, n_best: int) -> int:
        """An upper estimate of one trace's JSON size, from the model's shape: S source and
        at most T output tokens (docs/trace-schema.md lists what a trace holds)."""
        c = self.config
        if c.arch == "transformer":
            per_output = c.decoder_layers * c.num_heads * (t * s + t * t)  # cross + decoder self
            shared = c.encoder_layers * c.num_heads * s * s  # encoder self-attention
        else:
            per_output = 2 * t * s + 2 * t * c.hidden_size  # weights, scores; h_t, c_t
            shared = 0
        per_output += 4 * _TOP_K * t  # a candidate is a token and a probability
        return (shared + n_best * per_output) * _BYTES_PER_NUMBER

    # -- in the worker thread ------------------------------------------------------------------

    def run(self, jobs: list[Job]) -> list[list[Output] | Exception]:
        """Translate a batch of jobs: the texts that share a Search in one call; a job with
        attention one text at a time (each trace has its own search and teacher-forced pass)."""
        results = [
            self._guard(lambda job=job: self._traces(job))
            if job.attention
            else [None] * len(job.texts)
            for job in jobs
        ]
        groups: dict[Search, list[tuple[int, int]]] = {}
        for j, job in enumerate(jobs):
            for i, search in enumerate([] if job.attention else job.searches):
                groups.setdefault(search, []).append((j, i))
        for search, members in groups.items():
            texts = [jobs[j].texts[i] for j, i in members]
            outputs = self._guard(lambda s=search, t=texts: self._translate(s, t))
            for k, (j, i) in enumerate(members):
                if isinstance(outputs, Exception):
                    results[j] = outputs
                elif isinstance(results[j], list):
                    results[j][i] = outputs[k]
        return results

    @staticmethod
    def _guard(work: Callable[[], list[Output]]) -> list[Output] | Exception:
        try:
            return work()
        except Exception as error:  # noqa: BLE001 - the job's answer, not the worker's end
            return error

    def _translate(self, search: Search, texts: list[str]) -> list[Output]:
        results = self.translator.translate(
            texts,
            num_beams=search.num_beams,
            n_best=search.n_best,
            batch_size=self.limits.max_batch_size,
            max_len_ratio=search.max_len_ratio,
            max_len_offset=search.max_len_offset,
        )
        return [Output(r.text, [a.text for a in r.alternatives or []]) for r in results]

    def _traces(self, job: Job) -> list[Output]:
        from heedful.visualize.trace import build_trace

        outputs, size = [], 0
        for text, search in zip(job.texts, job.searches):
            translator = self._with_lengths(search)
            trace = build_trace(translator, text, num_beams=search.num_beams, n_best=search.n_best)
            trace_json = _dumps(trace.to_dict())
            size += len(trace_json.encode("utf-8"))
            if size > self.limits.max_attention_bytes:
                raise ApiError(
                    400,
                    f"the attention of this request is over the limit of "
                    f"{self.limits.max_attention_bytes:,} bytes (--max-attention-bytes)",
                )
            first, *rest = trace.hypotheses
            outputs.append(Output(first.text, [h.text for h in rest], trace_json))
        return outputs

    def _with_lengths(self, search: Search):
        """The translator with this search's output-length limit (the model is shared)."""
        from copy import copy

        translator = copy(self.translator)
        translator.generation = replace(
            translator.generation,
            max_len_ratio=search.max_len_ratio,
            max_len_offset=search.max_len_offset,
        )
        return translator


def response_body(request: TranslateRequest, outputs: list[Output]) -> bytes:
    """LibreTranslate's answer: a string per string, a list per list; plus our attention."""

    def shaped(values):
        return values if request.is_list else values[0]

    body: dict[str, Any] = {"translatedText": shaped([o.text for o in outputs])}
    if request.alternatives:
        body["alternatives"] = shaped([o.alternatives for o in outputs])
    text = _dumps(body)
    if request.return_attention:  # the traces are JSON already: splice them in, not re-encode
        traces = [o.trace_json or "null" for o in outputs]
        attention = "[" + ",".join(traces) + "]" if request.is_list else traces[0]
        text = text[:-1] + ',"attention":' + attention + "}"
    return text.encode("utf-8")


# ---------------------------------------------------------------------------------------------
# The dynamic batcher: one queue, one worker thread
# ---------------------------------------------------------------------------------------------


@dataclass
class BatchStats:
    requests: int = 0
    sentences: int = 0
    batches: int = 0
    largest_batch: int = 0  # sentences


class Batcher:
    """Collects jobs that arrive within `max_wait` of the first (up to `max_batch_size`
    sentences) and hands them to `work` in a worker thread. While the worker computes, new jobs
    queue up and form the next batch: the busier the server, the larger its batches."""

    def __init__(self, work: Callable[[list[Job]], list], max_batch_size: int, max_wait: float):
        self.work, self.max_batch_size, self.max_wait = work, max_batch_size, max_wait
        self.queue: asyncio.Queue[Job] = asyncio.Queue()
        self.stats = BatchStats()
        self._carry: Job | None = None  # the job that did not fit into the last batch
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="heedful-translate")
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, job: Job) -> list[Output]:
        await self.queue.put(job)
        return await job.future

    async def _next_batch(self) -> list[Job]:
        first = self._carry or await self.queue.get()
        self._carry = None
        batch, size = [first], len(first.texts)
        deadline = asyncio.get_running_loop().time() + self.max_wait
        while size < self.max_batch_size:
            remaining = deadline - asyncio.get_running_loop().time()
            try:
                job = (
                    self.queue.get_nowait()
                    if remaining <= 0
                    else await asyncio.wait_for(self.queue.get(), remaining)
                )
            except (asyncio.QueueEmpty, asyncio.TimeoutError):
                break
            if size + len(job.texts) > self.max_batch_size:
                self._carry = job
                break
            batch.append(job)
            size += len(job.texts)
        return [job for job in batch if not job.future.done()]  # timed-out jobs are dropped

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._next_batch()
            if not batch:
                continue
            sentences = sum(len(job.texts) for job in batch)
            self.stats.requests += len(batch)
            self.stats.sentences += sentences
            self.stats.batches += 1
            self.stats.largest_batch = max(self.stats.largest_batch, sentences)
            try:
                results = await loop.run_in_executor(self._executor, self.work, batch)
            except Exception as error:  # noqa: BLE001 - a failed batch fails its jobs, not us
                results = [error] * len(batch)
            for job, result in zip(batch, results):
                if job.future.done():
                    continue
                if isinstance(result, Exception):
                    job.future.set_exception(result)
                else:
                    job.future.set_result(result)


# ---------------------------------------------------------------------------------------------
# Reading a request: query string and body (JSON, urlencoded or multipart form), never more
# than max_body_bytes, never slower than body_timeout
# ---------------------------------------------------------------------------------------------


async def read_body(request, limit: int) -> bytes:
    """The body, or ApiError(413) as soon as it passes `limit` (declared or streamed)."""
    from starlette.requests import ClientDisconnect

    declared = request.headers.get("content-length", "")
    too_large = ApiError(413, f"the request body is over {limit:,} bytes (--max-body-bytes)")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
    except ClientDisconnect:  # the client's doing, not a fault of ours: one line, no traceback
        client = request.client
        log.info(
            "client %s disconnected after %d bytes of its request body",
            f"{client.host}:{client.port}" if client else "?",
            size,
        )
        raise ApiError(400, "the client disconnected before its body was complete") from None
    return b"".join(chunks)


async def read_timely_body(request, limits: ServerLimits) -> bytes:
    """read_body within --body-timeout: a client that stalls mid-body gets 408 and its
    connection is closed (it cannot be reused with a body half read)."""
    try:
        return await asyncio.wait_for(
            read_body(request, limits.max_body_bytes), limits.body_timeout
        )
    except asyncio.TimeoutError:
        raise ApiError(
            408,
            f"the request body did not arrive within {limits.body_timeout:g} s (--body-timeout)",
            {"Connection": "close"},
        ) from None


def _form_fields(pairs) -> dict[str, Any]:
    """Form fields as a dict; `q` given several times is a list, as in LibreTranslate."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if not isinstance(value, str):
            raise ApiError(400, f"form field {key[:40]} must be text, not a file")
        if key == "q" and "q" in data:
            data["q"] = (data["q"] if isinstance(data["q"], list) else [data["q"]]) + [value]
        else:
            data[key] = value
    return data


# Fields one request may have, unknown ones included (clients of LibreTranslate send extras
# such as api_key); the schema says so as maxProperties. A form repeats a field once per value
# (q once per text), so its raw pairs are only capped to bound the parsing, far above what a
# valid request needs; the limits that matter apply to the fields it collapses to.
MAX_FIELDS = 16
_MAX_FORM_PAIRS = 10_000


def _capped(data: dict, where: str) -> dict:
    if len(data) > MAX_FIELDS:
        raise ApiError(400, f"{where} has {len(data)} fields; the limit is {MAX_FIELDS}")
    return data


def _urlencoded(raw: bytes, what: str) -> dict[str, Any]:
    """The fields of a query string or an urlencoded form, which must be UTF-8."""
    try:
        pairs = parse_qsl(
            raw.decode("utf-8"),
            keep_blank_values=True,
            errors="strict",
            max_num_fields=_MAX_FORM_PAIRS,
        )
    except ValueError as error:  # bad UTF-8, or too many fields
        raise ApiError(400, f"invalid {what}: {str(error)[:200]}") from None
    return _form_fields(pairs)


def _not_a_number(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _json_object(body: bytes) -> dict:
    """A JSON object, strictly: UTF-8 (RFC 8259 §8.1), and no NaN or Infinity, which Python
    would read but JSON does not have."""
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_not_a_number)
    except UnicodeDecodeError as error:
        raise ApiError(
            400, f"invalid JSON: not UTF-8 ({error.reason} at byte {error.start})"
        ) from None
    except (ValueError, RecursionError) as error:
        raise ApiError(400, f"invalid JSON: {str(error)[:200]}") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"the body must be a JSON object, got {type(data).__name__}")
    return data


def _media_type(headers) -> str:
    """The Content-Type without its parameters; a charset other than UTF-8 is refused (415)
    rather than read as UTF-8 and misunderstood."""
    kind, *parameters = headers.get("content-type", "").split(";")
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        charset = value.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
            raise ApiError(415, f"unsupported charset {charset[:20]!r}: send UTF-8")
    return kind.strip().lower()


async def decode_body(headers, body: bytes) -> dict:
    """The body's fields: a JSON object, or a form's fields through typed_text_fields."""
    return _capped(await _decode_body(headers, body), "the body")


async def _decode_body(headers, body: bytes) -> dict:
    kind = _media_type(headers)
    if kind in ("", "application/json") or kind.endswith("+json"):
        return _json_object(body)
    if kind == "application/x-www-form-urlencoded":
        return typed_text_fields(_urlencoded(body, "form"))
    if kind == "multipart/form-data":
        from starlette.formparsers import MultiPartException, MultiPartParser

        async def stream():
            yield body

        try:
            form = await MultiPartParser(
                headers, stream(), max_files=0, max_fields=_MAX_FORM_PAIRS
            ).parse()
        except (MultiPartException, ValueError) as error:
            raise ApiError(400, f"invalid form: {str(error)[:200]}") from None
        return typed_text_fields(_form_fields(form.multi_items()))
    raise ApiError(
        415,
        f"unsupported Content-Type {kind[:60]!r}: send application/json or a form "
        "(application/x-www-form-urlencoded, multipart/form-data)",
    )


@dataclass(frozen=True)
class Fields:
    """A request's fields from its query string and from its body (either may be empty)."""

    query: dict
    body: dict

    def readings(self) -> list[dict]:
        """The fields as used: the body's value where both give one. When both do, the other
        way round as well, for the checks: every value sent must be valid."""
        used = {**self.query, **self.body}
        if self.query.keys() & self.body.keys():
            return [used, {**self.body, **self.query}]
        return [used]


async def read_fields(request, limits: ServerLimits, required: tuple[str, ...]) -> Fields:
    """The query string's fields and the body's. A request with a body carries the `required`
    fields in it (the query string may add others); one without a body, as deep-translator
    sends them, has them all in the query string."""
    raw_query = request.scope.get("query_string", b"")
    query = typed_text_fields(_capped(_urlencoded(raw_query, "query string"), "the query string"))
    body = await read_timely_body(request, limits)
    if not body:  # no body (Content-Length: 0), whatever its Content-Type says
        return Fields(query, {})
    fields = await decode_body(request.headers, body)
    for name in required:
        if name not in fields and name in query:
            raise ApiError(
                400,
                f"missing field {name} in the body (it is in the query string): a request with "
                f"a body carries {', '.join(required)} in it",
            )
    return Fields(query, fields)


# ---------------------------------------------------------------------------------------------
# The web page at GET /: a form, and the viewer of heedful.visualize.html in an iframe
# ---------------------------------------------------------------------------------------------

_SOURCE_SLOT, _OUTPUT_SLOT = "heedful-slot-source-7f3a", "heedful-slot-output-7f3a"
_TRACE_TAG = '<script type="application/json" id="trace-data">'


def viewer_template() -> list:
    """render_html's page cut at the places that change per trace: strings to keep and
    {"slot": "source" | "output" | "trace"} for the page's JavaScript to fill in."""
    from heedful.visualize.html import render_html

    hypothesis = {
        "text": _OUTPUT_SLOT,
        "tokens": [],
        "score": 0.0,
        "finished": True,
        "cross_attention": None,
        "decoder_self_attention": None,
        "top_k": [],
        "rnn": None,
    }
    page = render_html(
        {
            "format": "heedful-trace",
            "version": 1,
            "model": {},
            "search": {},
            "source": _SOURCE_SLOT,
            "source_tokens": [],
            "encoder_self_attention": None,
            "hypotheses": [hypothesis],
        }
    )
    head, found, rest = page.partition(_TRACE_TAG)
    if not found or "</script>" not in rest:
        raise RuntimeError("the viewer page has no embedded trace to replace (visualize/html.py)")
    tail = rest.split("</script>", 1)[1]
    parts: list = []
    slots = {_SOURCE_SLOT: "source", _OUTPUT_SLOT: "output"}
    for piece in re.split(f"({_SOURCE_SLOT}|{_OUTPUT_SLOT})", head):
        parts.append({"slot": slots[piece]} if piece in slots else piece)
    return parts + [_TRACE_TAG, {"slot": "trace"}, "</script>" + tail]


def _script_json(data: Any) -> str:
    """JSON that cannot end or confuse the <script> element that holds it."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    unsafe = {
        "<": "\\u003c",
        ">": "\\u003e",
        "&": "\\u0026",
        "\u2028": "\\u2028",
        "\u2029": "\\u2029",
    }
    return re.sub("[<>&\u2028\u2029]", lambda m: unsafe[m.group()], text)


def _language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


def index_page(languages: tuple[str, str], limits: ServerLimits, default_beams: int) -> str:
    src, tgt = languages
    data = {"source": src, "target": tgt, "viewer": viewer_template()}
    beams = "".join(
        f'<option value="{n}"{" selected" if n == default_beams else ""}>{n}</option>'
        for n in range(1, limits.max_num_beams + 1)
    )
    parts = {
        "PAIR": escape(f"{_language_name(src)} → {_language_name(tgt)}"),
        "SRC": escape(src),
        "MAXCHARS": str(limits.max_chars),
        "BEAMS": beams,
        "DATA": _script_json(data),
    }
    return re.sub(r"@@([A-Z]+)@@", lambda match: parts[match.group(1)], _PAGE)  # one pass


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>heedful · translate</title>
<link rel="icon" href="data:,">
<style>
body { margin: 0 auto; max-width: 1320px; padding: 16px 24px 48px; background: #f4f6fa;
  color: #1d2433; font: 15px/1.45 system-ui, "DejaVu Sans", sans-serif; }
.brand { margin: 0; color: #2b59c3; font-weight: 600; font-size: 13px; letter-spacing: .05em;
  text-transform: uppercase; }
h1 { font-size: 21px; font-weight: 600; margin: 4px 0 12px; }
textarea { width: 100%; box-sizing: border-box; font: 16px/1.4 ui-monospace, "DejaVu Sans Mono",
  monospace; padding: 8px; border: 1px solid #d9dee8; border-radius: 6px; }
.controls { display: flex; gap: 12px; align-items: center; margin: 8px 0 16px; }
button { font: inherit; font-weight: 600; padding: 6px 18px; border-radius: 6px; cursor: pointer;
  background: #2b59c3; color: #fff; border: 1px solid #2b59c3; }
button:disabled { opacity: .6; cursor: progress; }
select { font: inherit; padding: 3px 6px; }
#translation { font-size: 19px; margin: 0 0 12px; }
.error { color: #a4161a; font-weight: 600; }
#status { color: #5b6478; }
iframe { width: 100%; min-height: 900px; border: 1px solid #d9dee8; border-radius: 6px;
  background: #fff; }
[hidden] { display: none !important; }
</style>
</head>
<body>
<p class="brand">heedful · translate</p>
<h1>@@PAIR@@</h1>
<form id="translate-form">
  <label for="source-input">Text (@@SRC@@)</label>
  <textarea id="source-input" rows="4" maxlength="@@MAXCHARS@@" required></textarea>
  <div class="controls">
    <label>Beams <select id="num-beams">@@BEAMS@@</select></label>
    <button type="submit" id="translate-button">Translate</button>
    <span id="status" aria-live="polite"></span>
  </div>
</form>
<p id="error" class="error" role="alert" hidden></p>
<section id="result" hidden>
  <p id="translation"></p>
  <iframe id="viewer-frame" title="Attention viewer"></iframe>
</section>
<script type="application/json" id="page-data">@@DATA@@</script>
<script>
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const page = JSON.parse($("page-data").textContent);
  const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (c) =>
    ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;" })[c]);
  const scriptJson = (data) => JSON.stringify(data).replace(/[<>&\\u2028\\u2029]/g, (c) =>
    "\\\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
  // the viewer page of heedful.visualize.html, with this trace in its slots
  function viewerPage(trace) {
    const values = { source: escapeHtml(trace.source), trace: scriptJson(trace),
      output: escapeHtml(trace.hypotheses[0].text) };
    const fill = (part) => (typeof part === "string" ? part : values[part.slot]);
    return page.viewer.map(fill).join("");
  }
  function fit(frame) {
    const doc = frame.contentDocument;
    if (!doc || !doc.documentElement) return;
    frame.style.height = doc.documentElement.scrollHeight + 24 + "px";
  }
  const frame = $("viewer-frame");
  frame.addEventListener("load", () => {
    fit(frame);
    if (frame.contentDocument && window.ResizeObserver) {
      new ResizeObserver(() => fit(frame)).observe(frame.contentDocument.body);
    }
  });
  function showError(message) {
    $("error").textContent = message;
    $("error").hidden = false;
  }
  async function translate(event) {
    event.preventDefault();
    const text = $("source-input").value;
    $("error").hidden = true;
    $("translate-button").disabled = true;
    $("status").textContent = "translating\\u2026";
    try {
      const response = await fetch("translate", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ q: text, source: page.source, target: page.target,
          num_beams: +$("num-beams").value, return_attention: true }),
      });
      const answer = await response.json();
      if (!response.ok) return showError(answer.error || "HTTP " + response.status);
      $("translation").textContent = answer.translatedText;
      $("result").hidden = false;
      frame.srcdoc = viewerPage(answer.attention);
      window.heedfulPage.last = answer;
    } catch (error) {
      showError("the server did not answer: " + error);
    } finally {
      $("translate-button").disabled = false;
      $("status").textContent = "";
    }
  }
  $("translate-form").addEventListener("submit", translate);
  window.heedfulPage = { last: null, viewerPage };
})();
</script>
</body>
</html>
"""


# ---------------------------------------------------------------------------------------------
# The application
# ---------------------------------------------------------------------------------------------


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
    service: TranslationService | None = None
    load_error: BaseException | None = None
    in_flight: int = 0


async def _load(state: _State, model_dir: Path, config, limits, on_error, runtime: dict) -> None:
    """Load the model off the event loop, so /health answers while it loads."""
    from heedful.runtime import load_translator

    try:
        translator = await asyncio.to_thread(load_translator, model_dir, **runtime)
        state.service = TranslationService(translator, config, limits)
        log.info(
            "model %s loaded: %s→%s (%s engine%s)",
            model_dir,
            *translator.languages,
            translator.engine,
            f", {runtime['quantize']}" if runtime.get("quantize") else "",
        )
    except Exception as error:  # noqa: BLE001 - reported by /ready and the serve command
        state.load_error = error
        log.error("could not load %s: %s", model_dir, error)
        if on_error:
            on_error(error)


def create_app(
    model_dir: str | Path,
    limits: ServerLimits = ServerLimits(),
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

    model_dir = Path(model_dir)
    meta, config = read_model_config(model_dir)
    languages = (meta.get("src_lang", "src"), meta.get("tgt_lang", "tgt"))
    state = _State()

    def work(jobs: list[Job]) -> list:
        return state.service.run(jobs)  # type: ignore[union-attr]

    batcher = Batcher(work, limits.max_batch_size, limits.max_wait_ms / 1000)

    @asynccontextmanager
    async def lifespan(app):
        batcher.start()
        runtime = {"engine": engine, "quantize": quantize}
        loading = asyncio.create_task(
            _load(state, model_dir, config, limits, on_load_error, runtime)
        )
        yield
        loading.cancel()
        await batcher.stop()

    app = FastAPI(
        title="heedful",
        summary="Translate with an attention seq2seq model; LibreTranslate-compatible.",
        version=_version(),
        lifespan=lifespan,
    )
    app.state.heedful = state
    _add_error_handlers(app)
    _add_routes(app, state, batcher, languages, limits, model_dir)
    return app


def _version() -> str:
    from heedful import __version__

    return __version__


def _ready(state: _State) -> TranslationService:
    if state.service is None:
        raise ApiError(503, _not_ready(state), {"Retry-After": "1"})
    return state.service


@contextmanager
def _in_flight(state: _State, limits: ServerLimits) -> Iterator[None]:
    """Count a request from its queueing to its answer; 503 at once past --max-in-flight.
    Only requests whose body has arrived get here: a client slow to send one holds no room."""
    if state.in_flight >= limits.max_in_flight:
        raise ApiError(
            503,
            f"the server is saturated: {state.in_flight} requests in flight, the limit is "
            f"{limits.max_in_flight} (--max-in-flight); retry shortly",
            {"Retry-After": "1"},
        )
    state.in_flight += 1
    try:
        yield
    finally:
        state.in_flight -= 1


def _get(app, path: str, **options) -> Callable:
    """A GET route that answers HEAD as well (uvicorn sends HEAD's headers without the body)."""

    def register(endpoint):
        app.head(path, **options)(endpoint)
        return app.get(path, **options)(endpoint)

    return register


def _add_routes(app, state: _State, batcher: Batcher, languages, limits, model_dir) -> None:
    from fastapi import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response

    src, tgt = languages
    schemas = _openapi_schemas(languages, limits)
    page: list[str] = []  # built on first request (the model's default beam size is known then)

    @app.post(
        "/translate",
        responses=_responses(schemas, "TranslateResponse"),
        openapi_extra=_request_body(schemas, "TranslateRequest"),
    )
    async def translate(request: Request):
        """Translate `q` (a string, or a list of strings) from `source` to `target`."""
        service = _ready(state)
        fields = await read_fields(request, limits, ("q", "source", "target"))
        parsed, *shadowed = [parse_request(data, limits, languages) for data in fields.readings()]
        searches, attention = service.plan(parsed)
        for other in shadowed:  # a query value the body overrides must be valid all the same
            service.plan(other)
        future = asyncio.get_running_loop().create_future()
        with _in_flight(state, limits):
            try:
                outputs = await asyncio.wait_for(
                    batcher.submit(Job(parsed.texts, searches, attention, future)),
                    limits.request_timeout,
                )
            except asyncio.TimeoutError:
                raise ApiError(
                    504,
                    f"the request took longer than {limits.request_timeout:g} s "
                    "(--request-timeout)",
                ) from None
        return Response(response_body(parsed, outputs), media_type="application/json")

    @app.post(
        "/detect",
        responses=_responses(schemas, "Detections", (400, 408, 413, 415)),
        openapi_extra=_request_body(schemas, "DetectRequest"),
    )
    async def detect(request: Request):
        """The language of `q` (LibreTranslate's /detect). This model reads one language, so
        that is the answer, with confidence 100: no other was considered."""
        fields = await read_fields(request, limits, ("q",))
        for data in fields.readings():
            parse_detect(data, limits)
        return JSONResponse([{"language": src, "confidence": 100.0}])

    @_get(app, "/languages", responses=_responses(schemas, "Languages", ()))
    async def languages_list():
        """The languages this model reads and writes (LibreTranslate's format)."""
        listed = [{"code": src, "name": _language_name(src), "targets": [tgt]}]
        if tgt != src:
            listed.append({"code": tgt, "name": _language_name(tgt), "targets": []})
        return JSONResponse(listed)

    @_get(app, "/health", responses=_responses(schemas, "Health", ()))
    async def health():
        """Alive; with how many requests are in flight and how they were batched."""
        stats = batcher.stats
        return JSONResponse(
            {
                "status": "ok",
                "ready": state.service is not None,
                "in_flight": state.in_flight,
                "requests": stats.requests,
                "sentences": stats.sentences,
                "batches": stats.batches,
                "largest_batch": stats.largest_batch,
            }
        )

    @_get(app, "/ready", responses=_responses(schemas, "Ready", (503,)))
    async def ready():
        """200 once the model is loaded and translating; 503 before."""
        _ready(state)
        return JSONResponse({"status": "ready", "model": model_dir.name, "languages": [src, tgt]})

    @_get(app, "/", include_in_schema=False)
    async def index():
        service = _ready(state)
        if not page:
            page.append(index_page(languages, limits, service.translator.generation.num_beams))
        return HTMLResponse(page[0])


def _not_ready(state: _State) -> str:
    if state.load_error is not None:
        return f"the model could not be loaded: {state.load_error}"
    return "the model is still loading; GET /ready answers 200 when it is done"


# ---------------------------------------------------------------------------------------------
# The OpenAPI description of /translate, with this server's limits and languages in it
# ---------------------------------------------------------------------------------------------


def _json(schema: dict) -> dict:
    return {"application/json": {"schema": schema}}


def _openapi_schemas(languages: tuple[str, str], limits: ServerLimits) -> dict[str, dict]:
    src, tgt = languages
    text = {"type": "string", "minLength": 1, "maxLength": limits.max_chars, "pattern": _NOT_BLANK}
    strings = {"type": "array", "items": {"type": "string"}}
    q = {
        "anyOf": [
            text,
            {"type": "array", "items": text, "minItems": 1, "maxItems": limits.max_items},
        ]
    }
    api_key = {"type": "string", "description": "accepted and ignored"}
    request = {
        "type": "object",
        "required": ["q", "source", "target"],
        "maxProperties": MAX_FIELDS,
        "properties": {
            "q": q,
            "source": {"type": "string", "enum": [src, "auto"], "description": "auto: " + src},
            "target": {"type": "string", "enum": [tgt]},
            "format": {"type": "string", "enum": ["text"], "default": "text"},
            "alternatives": {
                "type": "integer",
                "minimum": 0,
                "maximum": limits.max_num_beams - 1,
                "default": 0,
            },
            "num_beams": {
                "type": "integer",
                "minimum": 1,
                "maximum": limits.max_num_beams,
                "description": "1: greedy search; raised to alternatives + 1 when smaller",
            },
            "max_new_tokens": {"type": "integer", "minimum": 1, "maximum": limits.max_new_tokens},
            "return_attention": {"type": "boolean", "default": False},
            "api_key": api_key,
        },
    }
    detect = {
        "type": "object",
        "required": ["q"],
        "maxProperties": MAX_FIELDS,
        "properties": {"q": q, "api_key": api_key},
    }
    response = {
        "type": "object",
        "required": ["translatedText"],
        "properties": {
            "translatedText": {"anyOf": [{"type": "string"}, strings]},
            "alternatives": {"anyOf": [strings, {"type": "array", "items": strings}]},
            "attention": {
                "description": "the attention trace of docs/trace-schema.md (a list for a list q)",
                "anyOf": [{"type": "object"}, {"type": "array", "items": {"type": "object"}}],
            },
        },
    }
    integer = {"type": "integer", "minimum": 0}
    return {
        "TranslateRequest": request,
        "TranslateResponse": response,
        "DetectRequest": detect,
        "Detections": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["language", "confidence"],
                "properties": {
                    "language": {"type": "string", "enum": [src]},
                    "confidence": {"type": "number", "minimum": 0, "maximum": 100},
                },
            },
        },
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {"error": {"type": "string"}},
        },
        "Languages": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["code", "name", "targets"],
                "properties": {
                    "code": {"type": "string"},
                    "name": {"type": "string"},
                    "targets": strings,
                },
            },
        },
        "Health": {
            "type": "object",
            "required": ["status", "ready", "in_flight"],
            "properties": {
                "status": {"type": "string"},
                "ready": {"type": "boolean"},
                "in_flight": integer,
                "requests": integer,
                "sentences": integer,
                "batches": integer,
                "largest_batch": integer,
            },
        },
        "Ready": {
            "type": "object",
            "required": ["status"],
            "properties": {"status": {"type": "string"}},
        },
    }


_ERRORS = {
    400: "invalid input: a missing or wrong field, an empty text, an unsupported language "
    "pair, a text or batch over its limit, invalid JSON",
    408: "the body did not arrive within --body-timeout",
    413: "the body is over --max-body-bytes",
    415: "the body is neither JSON nor a form, or not UTF-8",
    503: "saturated (--max-in-flight) or the model is still loading",
    504: "the request took longer than --request-timeout",
}


def _responses(schemas: dict, ok: str, statuses=tuple(_ERRORS)) -> dict:
    """The OpenAPI `responses` of a route: 200 with the schema named `ok`, and its errors."""
    answers = {200: {"description": "OK", "content": _json(schemas[ok])}}
    for status in statuses:
        answers[status] = {"description": _ERRORS[status], "content": _json(schemas["Error"])}
    return answers


def _request_body(schemas: dict, name: str) -> dict:
    """The fields of request `name`, in the body (JSON or a form) or in the query string.

    Where a field comes from is beyond JSON Schema, so the query parameters are all optional
    here and the body is required: every request this describes is answered as it says. (A
    request without a body, all its fields in the query string, is served too.)"""
    schema = schemas[name]
    query = [
        {
            "name": field_name,
            "in": "query",
            "required": False,
            # a list q is q repeated: ?q=a&q=b; the schema of one value is the string's
            "schema": field_schema["anyOf"][0] if field_name == "q" else field_schema,
        }
        for field_name, field_schema in schema["properties"].items()
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


# ---------------------------------------------------------------------------------------------
# Connections: a deadline for each request's headers, and idle ones make room for new ones
# ---------------------------------------------------------------------------------------------


def _http_protocol(limits: ServerLimits) -> type:
    """uvicorn's HTTP/1.1 protocol (h11) with a deadline for a request's headers.

    uvicorn's keep-alive timer starts only after an answer and stops at any byte, so a
    connection that never sends a request, or sends it a byte at a time, stays open for ever;
    256 of them filled --max-connections and every real request got 503. Here a connection
    waiting for a request is closed --header-timeout seconds after it began waiting, whatever
    it sends meanwhile, and a new connection past --max-connections closes the longest-idle one.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadlineProtocol(H11Protocol):
        idle_since: float | None = None  # when it began waiting for a request's headers
        deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self.watch()
            if len(self.connections) > limits.max_connections:
                self.make_room()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self.watch()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self.watch()

        def connection_lost(self, exc: Exception | None) -> None:
            self.stop_watching()
            super().connection_lost(exc)

        def watch(self) -> None:
            """Start the deadline when the connection begins to wait for a request (h11: the
            client is IDLE), stop it once a request's headers are in."""
            waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
            if waiting and self.deadline is None:
                self.idle_since = self.loop.time()
                self.deadline = self.loop.call_later(limits.header_timeout, self.close_idle)
            elif not waiting:
                self.stop_watching()

        def stop_watching(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
            self.deadline = self.idle_since = None

        def close_idle(self) -> None:
            self.stop_watching()
            self.timeout_keep_alive_handler()  # uvicorn's: ends the h11 connection, closes it

        def make_room(self) -> None:
            idle = [c for c in self.connections if getattr(c, "idle_since", None) is not None]
            idle = [c for c in idle if c is not self]
            if idle:  # none idle: uvicorn answers this connection's request with 503
                min(idle, key=lambda c: c.idle_since).close_idle()
                log.debug("over --max-connections: closed the longest-idle connection")

    return HeaderDeadlineProtocol


def uvicorn_config(app, limits: ServerLimits, **options):
    """uvicorn's settings for `app` within `limits`; `options` (host, port, log_level, ...)
    go to uvicorn.Config as they are."""
    import uvicorn

    return uvicorn.Config(
        app,
        http=_http_protocol(limits),
        # uvicorn refuses a request when the open connections, its own included, reach this;
        # idle ones close to make room, so --max-connections requests can be under way at once
        limit_concurrency=limits.max_connections + 1,
        timeout_keep_alive=limits.header_timeout,  # (the protocol's deadline is the stricter)
        timeout_graceful_shutdown=math.ceil(limits.body_timeout + limits.request_timeout) + 5,
        **options,
    )


# ---------------------------------------------------------------------------------------------
# heedful serve
# ---------------------------------------------------------------------------------------------


def serve(
    model_dir: str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: ServerLimits = ServerLimits(),
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
    config = uvicorn_config(
        app, limits, host=host, port=port, log_level=log_level, access_log=access_log
    )
    server.append(uvicorn.Server(config))
    server[0].run()
    if failed.is_set():
        raise app.state.heedful.load_error
