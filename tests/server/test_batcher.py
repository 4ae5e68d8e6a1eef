"""The dynamic batcher in this process, on asyncio with a recording worker: what arrives
together is worked together, up to max_batch_size sentences, in a thread of its own; a batch's
failure is its jobs' answer; jobs whose request has given up are left out."""

from __future__ import annotations

import asyncio
import threading

import pytest

from heedful.server.batcher import Batcher
from heedful.server.service import Job


class Worker:
    """Answers each job with its texts upper-cased, and records every batch and its thread."""

    def __init__(self, fail: Exception | None = None):
        self.batches: list[list[list[str]]] = []
        self.threads: set[int] = set()
        self.fail = fail

    def __call__(self, jobs: list[Job]) -> list:
        self.batches.append([job.texts for job in jobs])
        self.threads.add(threading.get_ident())
        if self.fail:
            raise self.fail
        return [[text.upper() for text in job.texts] for job in jobs]


def job(*texts: str) -> Job:
    return Job(list(texts), [], False, asyncio.get_running_loop().create_future())


def run(scenario, worker: Worker, max_batch_size: int = 8, max_wait: float = 0.05):
    """Run `scenario(batcher)` on a fresh event loop with a started batcher."""

    async def main():
        batcher = Batcher(worker, max_batch_size, max_wait)
        batcher.start()
        try:
            return await scenario(batcher)
        finally:
            await batcher.stop()

    return asyncio.run(main())


def test_jobs_that_arrive_together_are_one_batch_in_a_worker_thread():
    worker = Worker()

    async def scenario(batcher):
        jobs = [job("a"), job("b", "c"), job("d")]
        answers = await asyncio.gather(*(batcher.submit(j) for j in jobs))
        return answers, batcher.stats

    answers, stats = run(scenario, worker)
    assert answers == [["A"], ["B", "C"], ["D"]]  # each job gets its own answer
    assert worker.batches == [[["a"], ["b", "c"], ["d"]]]
    assert (stats.requests, stats.sentences, stats.batches, stats.largest_batch) == (3, 4, 1, 4)
    assert threading.get_ident() not in worker.threads  # the event loop's thread stays free


def test_a_job_that_does_not_fit_waits_for_the_next_batch():
    worker = Worker()

    async def scenario(batcher):
        jobs = [job("a", "b"), job("c", "d"), job("e")]  # 2 + 2 > 3: [a b], then [c d] + [e]
        return await asyncio.gather(*(batcher.submit(j) for j in jobs))

    assert run(scenario, worker, max_batch_size=3) == [["A", "B"], ["C", "D"], ["E"]]
    assert worker.batches == [[["a", "b"]], [["c", "d"], ["e"]]]  # in order of arrival


def test_jobs_after_the_wait_form_the_next_batch():
    worker = Worker()

    async def scenario(batcher):
        first = asyncio.ensure_future(batcher.submit(job("a")))
        await asyncio.sleep(0.3)  # six times max_wait: the first batch has gone
        return [await first, await batcher.submit(job("b"))]

    assert run(scenario, worker) == [["A"], ["B"]]
    assert worker.batches == [[["a"]], [["b"]]]


def test_a_job_whose_request_gave_up_is_left_out():
    worker = Worker()

    async def scenario(batcher):
        abandoned, kept = job("a"), job("b")
        abandoned.future.cancel()  # as asyncio.wait_for does on --request-timeout
        await batcher.queue.put(abandoned)
        return await batcher.submit(kept)

    assert run(scenario, worker) == ["B"]
    assert worker.batches == [[["b"]]]


def test_a_failed_batch_is_the_answer_of_each_of_its_jobs():
    worker = Worker(fail=RuntimeError("the model broke"))

    async def scenario(batcher):
        jobs = [job("a"), job("b")]
        results = await asyncio.gather(*(batcher.submit(j) for j in jobs), return_exceptions=True)
        worker.fail = None
        return results, await batcher.submit(job("c"))  # and the batcher goes on

    results, after = run(scenario, worker)
    assert [str(r) for r in results] == ["the model broke"] * 2
    assert after == ["C"]


@pytest.mark.parametrize("max_wait", [0.0, 0.02])
def test_no_wait_still_batches_what_is_already_queued(max_wait):
    worker = Worker()

    async def scenario(batcher):
        jobs = [job(t) for t in "abcd"]
        for j in jobs:
            batcher.queue.put_nowait(j)  # queued before the batcher looks
        return [await j.future for j in jobs]

    assert run(scenario, worker, max_batch_size=3, max_wait=max_wait) == [
        ["A"],
        ["B"],
        ["C"],
        ["D"],
    ]
    assert worker.batches == [[["a"], ["b"], ["c"]], [["d"]]]
