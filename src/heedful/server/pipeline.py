"""A translation request from its parsed fields to its answer: the texts read into documents
(documents.py), their slots routed to a model, queued for its batcher, and put back together.

/translate (plain text or format=html) and /translate_file (a .txt or .html file) go the same
way, so a file is translated exactly as its text would be by /translate.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from heedful.server.documents import Document, markup, plain
from heedful.server.limits import ApiError
from heedful.server.models import Routes, in_flight, ready
from heedful.server.schema import RequestSchema, TranslateRequest
from heedful.server.service import Job, Output


def documents(request: TranslateRequest) -> list[Document]:
    """Each text of q as a document: one slot (or none, blank) in plain text, its text nodes
    with format=html."""
    read = markup if request.format == "html" else plain
    return [read(text) for text in request.texts]


def slots_request(request: TranslateRequest, docs: list[Document]) -> TranslateRequest:
    """The request the model runs: the documents' slots as its texts. HTML gives no
    alternatives (one text node's alternatives say nothing of the document's, and
    LibreTranslate answers none for html either)."""
    texts = [slot.text for doc in docs for slot in doc.slots]
    alternatives = request.alternatives if request.format == "text" else 0
    return replace(request, texts=texts, alternatives=alternatives)


def detected(request: TranslateRequest, routes: Routes) -> dict | None:
    """LibreTranslate's detectedLanguage for source=auto: the one source the server reads
    into the target, certain (no other was considered), for each text of a list."""
    if request.source != "auto":
        return None
    return {"confidence": 100.0, "language": routes.source_of(request)}


def assembled(docs: list[Document], outputs: list[Output], html: bool) -> list[Output]:
    """One output per document: its slots' translations in place. A plain text, one slot
    and nothing else, keeps its alternatives and trace; a blank text is answered as it came."""
    given = iter(outputs)
    answers = []
    for doc in docs:
        mine = [next(given) for _ in doc.slots]
        if len(doc.parts) == 1 and mine and not html:  # the text is its one slot
            answers.append(mine[0])
        else:
            answers.append(Output(doc.fill([o.text for o in mine]), []))
    return answers


async def translate_documents(
    routes: Routes,
    schema: RequestSchema,
    request: TranslateRequest,
    docs: list[Document],
    shadowed: tuple[TranslateRequest, ...] = (),
) -> list[Output]:
    """The documents translated by the model of the request's pair: one output each.
    shadowed: readings of the request whose values the body overrides (body.py), which
    must be valid all the same."""
    state, routed = routes.route(slots_request(request, docs), schema)
    service = ready(state)
    searches, attention = service.plan(routed)
    for other in shadowed:
        ready(state).plan(routes.route(slots_request(other, documents(other)), schema)[1])
    outputs: list[Output] = []
    if routed.texts:  # only blank texts: nothing to queue
        outputs = await _queued(state, Job(routed.texts, searches, attention, _future()))
    return assembled(docs, outputs, request.format == "html")


def _future() -> asyncio.Future:
    return asyncio.get_running_loop().create_future()


async def _queued(state, job: Job) -> list[Output]:
    limits = state.limits
    with in_flight(state):
        try:
            return await asyncio.wait_for(state.batcher.submit(job), limits.request_timeout)
        except asyncio.TimeoutError:
            raise ApiError(
                504,
                f"the request took longer than {limits.request_timeout:g} s (--request-timeout)",
            ) from None
