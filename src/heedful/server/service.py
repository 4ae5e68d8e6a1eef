"""The model's side of the server: plan a request's searches, run batches of them (in the
worker thread), and write LibreTranslate's answer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from heedful.config.search import SearchSettings, beams_for
from heedful.inference.engine import HTTP, check_supported
from heedful.safejson import dumps
from heedful.server.limits import ApiError, ServerLimits
from heedful.server.schema import TranslateRequest, check_limits
from heedful.visualize.trace import build_trace, estimated_json_bytes


@dataclass(frozen=True)
class Search:
    """One text's search: its settings, which decide which texts may share a batch."""

    settings: SearchSettings
    # the request of a sampled search: a seeded request draws the same samples whatever else
    # the batch holds, so it shares its batch with no other
    owner: int | None = None
    prefix: str | None = field(default=None, compare=False)  # this text's; any prefixes batch
    # the heads switched off (inference/heads.py): only texts with the same ones share a call,
    # which masks them for its length alone, so no other request sees them
    masked: tuple = ()


@dataclass(eq=False)
class Job:
    """One request in the queue: its texts, their searches and where the answer goes."""

    texts: list[str]
    searches: list[Search]
    attention: bool
    future: asyncio.Future
    # set when the request gives up (504, --request-timeout): the worker, in its own thread,
    # begins nothing more of it, so that work past its deadline does not hold up the next
    abandoned: threading.Event = field(default_factory=threading.Event)


class Abandoned(Exception):
    """The result of a job whose request gave up before the worker had finished it."""


@dataclass
class Output:
    text: str
    alternatives: list[str]
    trace_json: str | None = None  # the trace (docs/trace-schema.md), serialized in the worker


class TranslationService:
    """A loaded Translator (either engine) with the server's limits: plans requests and
    translates batches of them."""

    def __init__(self, translator, limits: ServerLimits):
        self.translator, self.limits = translator, limits
        config = translator.config
        learned = config.arch == "transformer" and config.positional == "learned"
        # a learned positional table ends at max_positions; sinusoidal ones extend on the fly
        self.max_positions = config.max_positions if learned else None

    def plan(self, request: TranslateRequest) -> tuple[list[Search], bool]:
        """The search of every text, with beams and output lengths within the limits."""
        limits, translator = self.limits, self.translator
        check_limits(request, limits)
        n_best = request.alternatives + 1
        beams = request.num_beams
        if beams is None:
            beams = min(translator.generation.num_beams, limits.max_num_beams)
        beams = beams_for(beams, n_best)  # n alternatives need a beam of n + 1
        try:
            given = request.settings or {}  # SearchSettings fields asked for
            asked = translator.generation.but(num_beams=beams, n_best=n_best, **given)
            check_supported(
                translator.engine,
                translator.capabilities,
                asked,
                prefixes=bool(request.prefix),
                attention=request.return_attention,
                names=HTTP,
                masks=bool(request.mask_heads),
            )
        except ValueError as error:  # Unsupported, or settings out of range (ConfigError)
            raise ApiError(400, str(error)) from None
        self._check_heads(request.mask_heads)
        if translator.source.kind == "image":  # it reads no text
            raise ApiError(400, "this is an image captioning model: POST a picture to /caption")
        searches, attention_bytes = [], 0
        for i, text in enumerate(request.texts):
            source_tokens = translator.source.length(text)
            if self.max_positions is not None and source_tokens > self.max_positions:
                where = f"q[{i}]" if request.is_list else "q"
                raise ApiError(
                    400,
                    f"{where} is {source_tokens} tokens long; this model reads at most "
                    f"{self.max_positions}",
                )
            search, output_limit = self._plan_search(source_tokens, asked, request)
            search = self._decoding(search, request, i, output_limit)
            searches.append(search)
            attention_bytes += estimated_json_bytes(
                translator.config,
                source_tokens,
                output_limit + 1,
                n_best,  # + </s>
            )
        if request.return_attention and attention_bytes > limits.max_attention_bytes:
            raise ApiError(
                400,
                f"the attention of this request could take {attention_bytes:,} bytes; the limit "
                f"is {limits.max_attention_bytes:,} (--max-attention-bytes): send shorter or "
                "fewer texts, fewer alternatives, or drop return_attention",
            )
        return searches, request.return_attention

    def _check_heads(self, heads: tuple) -> None:
        """The heads to switch off, each one the model has; a 400 names the first it lacks."""
        if not heads:
            return
        from heedful.inference.heads import HeadError, check_heads

        try:
            check_heads(self.translator.model, heads)
        except HeadError as error:
            raise ApiError(400, f"mask_heads: {error}") from None

    def _plan_search(
        self, source_tokens: int, asked: SearchSettings, request: TranslateRequest
    ) -> tuple[Search, int]:
        """The search and its output limit: the model's (ratio · S + offset), capped by the
        request and the server; a cap that binds becomes a limit of its own (ratio 0,
        offset = the cap)."""
        natural = asked.max_output_length(source_tokens)
        caps = [self.limits.max_new_tokens, request.max_new_tokens, self.max_positions]
        cap = min(c for c in caps if c is not None)
        if natural <= cap:
            return Search(asked), natural
        return Search(replace(asked, max_len_ratio=0.0, max_len_offset=cap)), cap

    def _decoding(self, search: Search, request: TranslateRequest, i: int, limit: int) -> Search:
        """The search with the prefix (within text i's output limit) and the sampling."""
        prefix = request.prefix
        forced = len(self.translator.prefix_ids(prefix)) if prefix else 0
        if forced > limit:
            where = f"the output of q[{i}]" if request.is_list else "the output"
            raise ApiError(
                400, f"prefix is {forced} tokens long, more than {where} may be ({limit} tokens)"
            )
        owner = id(request) if search.settings.sample else None
        return replace(search, owner=owner, prefix=prefix, masked=request.mask_heads)

    # -- in the worker thread ------------------------------------------------------------------

    def run(self, jobs: list[Job]) -> list[list[Output] | Exception]:
        """Translate a batch of jobs: the texts that share a Search in one call; a job with
        attention one text at a time (each trace has its own search and teacher-forced pass).
        Before each call and each trace, what belongs to requests that gave up is left out."""
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
            members = [(j, i) for j, i in members if not jobs[j].abandoned.is_set()]
            if not members:
                continue
            texts = [jobs[j].texts[i] for j, i in members]
            prefixes = [jobs[j].searches[i].prefix for j, i in members]
            outputs = self._guard(lambda s=search, t=texts, p=prefixes: self._translate(s, t, p))
            for k, (j, i) in enumerate(members):
                if isinstance(outputs, Exception):
                    results[j] = outputs
                elif isinstance(results[j], list):
                    results[j][i] = outputs[k]
        gave_up = Abandoned("the request gave up before its texts were translated")
        return [gave_up if job.abandoned.is_set() else r for job, r in zip(jobs, results)]

    @staticmethod
    def _guard(work: Callable[[], list[Output]]) -> list[Output] | Exception:
        try:
            return work()
        except Exception as error:  # noqa: BLE001 - the job's answer, not the worker's end
            return error

    def _translate(self, search: Search, texts: list[str], prefixes: list) -> list[Output]:
        from heedful.inference.heads import masked

        with masked(self.translator.model, search.masked) if search.masked else nullcontext():
            results = self.translator.translate(
                texts,
                batch_size=self.limits.max_batch_size,
                prefixes=prefixes if any(prefixes) else None,
                settings=search.settings,
            )
        return [Output(r.text, [a.text for a in r.alternatives or []]) for r in results]

    def _traces(self, job: Job) -> list[Output]:
        outputs, size = [], 0
        for text, search in zip(job.texts, job.searches):
            if job.abandoned.is_set():
                raise Abandoned(f"left after {len(outputs)} of {len(job.texts)} traces")
            trace = build_trace(
                self.translator,
                text,
                prefix=search.prefix,
                settings=search.settings,
                mask_heads=search.masked,
            )
            trace_json = dumps(trace.to_dict())
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


def response_body(
    request: TranslateRequest, outputs: list[Output], detected: dict | None = None
) -> bytes:
    """LibreTranslate's answer: a string per string, a list per list; detectedLanguage with
    source auto (one per text of a list, as LibreTranslate answers); plus our attention."""

    def shaped(values):
        return values if request.is_list else values[0]

    body: dict[str, Any] = {"translatedText": shaped([o.text for o in outputs])}
    if detected is not None:
        body["detectedLanguage"] = shaped([detected] * len(outputs))
    if request.alternatives:
        body["alternatives"] = shaped([o.alternatives for o in outputs])
    text = dumps(body)
    if request.return_attention:  # the traces are JSON already: splice them in, not re-encode
        traces = [o.trace_json or "null" for o in outputs]
        attention = "[" + ",".join(traces) + "]" if request.is_list else traces[0]
        text = text[:-1] + ',"attention":' + attention + "}"
    return text.encode("utf-8")
