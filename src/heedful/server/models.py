"""The models a server holds, and which one answers a request.

`heedful serve A B C` loads each model directory with its own batcher (one queue and worker
thread each, so a slow model does not hold up another); a multilingual model (data.corpora)
serves every pair it was trained on. /translate goes to the model that has the request's
source → target pair, as LibreTranslate routes between its language models, and a
multilingual model reads that target's token first (<2de>, data/languages.py). /languages
lists every pair in LibreTranslate's format.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from heedful.data.languages import LanguagePairs, tagged
from heedful.server.batcher import Batcher
from heedful.server.limits import ApiError, ServerLimits
from heedful.server.page import language_name
from heedful.server.schema import RequestSchema, TranslateRequest, unsupported
from heedful.server.service import TranslationService

log = logging.getLogger("heedful.server.app")  # the log lines app.py wrote before


@dataclass
class ModelState:
    """One model directory of the server: its pairs, batcher, and service once loaded."""

    model_dir: Path
    languages: tuple[str, str]  # its first pair (the page at /, /detect)
    limits: ServerLimits
    pairs: LanguagePairs = ()
    target_tokens: bool = False  # multilingual: reads <2xx> before each text
    batcher: Batcher | None = None
    service: TranslationService | None = None
    load_error: BaseException | None = None
    in_flight: int = 0


def model_state(model_dir: Path, limits: ServerLimits) -> ModelState:
    """A model directory's state, from its config.json alone (a wrong path fails here); the
    weights load later (load)."""
    from heedful.inference.translator import directions

    pairs, tokens = directions(model_dir)
    state = ModelState(model_dir, pairs[0], limits, pairs, tokens)
    state.batcher = Batcher(
        lambda jobs: state.service.run(jobs),  # type: ignore[union-attr]
        limits.max_batch_size,
        limits.max_wait_ms / 1000,
    )
    return state


async def load(state: ModelState, on_error, runtime: dict) -> None:
    """Load the model off the event loop, so /health answers while it loads."""
    from heedful.inference.runtime import load_translator

    try:
        translator = await asyncio.to_thread(load_translator, state.model_dir, **runtime)
        state.service = TranslationService(translator, state.limits)
        log.info(
            "model %s loaded: %s (%s engine%s)",
            state.model_dir,
            ", ".join(f"{s}→{t}" for s, t in state.pairs),
            translator.engine,
            f", {runtime['quantize']}" if runtime.get("quantize") else "",
        )
    except Exception as error:  # noqa: BLE001 - reported by /ready and the serve command
        state.load_error = error
        log.error("could not load %s: %s", state.model_dir, error)
        if on_error:
            on_error(error)


def ready(state: ModelState) -> TranslationService:
    if state.service is not None:
        return state.service
    if state.load_error is not None:
        message = f"the model could not be loaded: {state.load_error}"
    else:
        message = "the model is still loading; GET /ready answers 200 when it is done"
    raise ApiError(503, message, {"Retry-After": "1"})


@contextmanager
def in_flight(state: ModelState) -> Iterator[None]:
    """Count a request from its queueing to its answer; 503 at once past --max-in-flight
    (per model). Only requests whose body has arrived get here: a client slow to send one
    holds no room."""
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


def check_prefix(state: ModelState, prefix: str | None) -> None:
    """A prefix this model's outputs could not start with as typed (prefix.prefix_ids: a
    character its target vocabulary lacks, a target token, a normalised spelling) is a 400
    naming the field, here where the model is first known, before any text is planned. A
    model still loading is answered 503 after this; other engines refuse any prefix."""
    translator = None if state.service is None else state.service.translator
    if not prefix or translator is None or not translator.capabilities.prefixes:
        return
    from heedful.search.prefix import PrefixError  # torch's: importing the server loads none

    try:
        translator.prefix_ids(prefix, "prefix")
    except PrefixError as error:
        raise ApiError(400, str(error)) from None


class Routes:
    """Every pair the server's models translate, and which model has each."""

    def __init__(self, states: list[ModelState]):
        self.states, self.owner = states, {}
        for state in states:
            for pair in state.pairs:
                if pair in self.owner:
                    other = self.owner[pair].model_dir
                    raise ValueError(
                        f"{other} and {state.model_dir} both translate {pair[0]}→{pair[1]}: "
                        "serve one model per language pair"
                    )
                self.owner[pair] = state
        self.pairs: LanguagePairs = tuple(self.owner)

    def route(self, request: TranslateRequest, schema: RequestSchema):
        """(the model state, the request as it reads it: texts after the target token for a
        multilingual model); a pair no model has is a 400 naming those there are."""
        source, target = self.source_of(request), request.target
        state = self.owner.get((source, target))
        if state is None:
            raise unsupported(request.source, target, schema["source"])
        check_prefix(state, request.prefix)
        if not state.target_tokens:
            return state, request
        return state, replace(request, texts=tagged(request.texts, target))

    def source_of(self, request: TranslateRequest) -> str:
        """The request's source; for auto, the one source that translates into its target
        (if there is one: else auto, which no pair has)."""
        source, target = request.source, request.target
        if source != "auto":
            return source
        sources = [s for s, t in self.pairs if t == target]
        if len(sources) > 1:
            raise ApiError(
                400,
                f"source auto is ambiguous for target {target[:20]}: this server translates "
                f"{', '.join(f'{s}→{target}' for s in sources)}; name the source",
            )
        return sources[0] if sources else source

    def languages(self) -> list[dict]:
        """LibreTranslate's /languages: each code the server reads or writes, with the codes
        it translates that one into."""
        codes = dict.fromkeys([s for s, _ in self.pairs] + [t for _, t in self.pairs])
        return [
            {
                "code": code,
                "name": language_name(code),
                "targets": [t for s, t in self.pairs if s == code],
            }
            for code in codes
        ]

    def sources(self) -> list[str]:
        return list(dict.fromkeys(s for s, _ in self.pairs))
