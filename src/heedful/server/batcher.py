"""The dynamic batcher: one queue, one worker thread.

Concurrent requests meet in one queue. The batcher takes whatever arrived within `max_wait` of
the first (up to `max_batch_size` sentences) and translates it in one worker thread, so the
event loop keeps answering while the model computes and throughput grows with load. A job whose
request timed out is left out if still queued, and the worker stops it at its next text or call
if not (service.py): work past its deadline does not hold up the requests behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from heedful.server.service import Job, Output


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
        """The job's outputs. Cancelled (--request-timeout), the job is marked abandoned: left
        out of the next batch if still queued, and the worker begins no more of it if not."""
        await self.queue.put(job)
        try:
            return await job.future
        except asyncio.CancelledError:
            job.abandoned.set()
            raise

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
