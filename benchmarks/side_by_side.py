"""CTranslate2 with its batches side by side: what its inter_threads do, for decode_speed.py.

heedful's Translator decodes a CPU's batches side by side, one thread each (heedful.cpu,
in_streams). CTranslate2 does the same when it is given inter_threads (one model replica
per thread, each with intra_threads = 1) and more than one batch at a time. Our runtime
wrapper hands CTranslate2 one batch per call, so this benchmark runs that configuration
itself: one replica per thread, each behind one thread of a pool that takes the batches in
turn, in the wrapper's own order (by source length), so every way decodes the same batches.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


class SideBySide:
    """translate() as the runtime's CTranslate2Translator, `threads` batches at a time."""

    def __init__(self, model: Path, threads: int):
        from heedful.inference.runtime import load_translator

        self.replicas = [load_translator(model, "ctranslate2", threads=1) for _ in range(threads)]
        free, self.mine = list(self.replicas), threading.local()

        def take() -> None:  # each pool thread's own replica, for as long as the pool lives
            self.mine.replica = free.pop()  # list.pop is atomic under the GIL

        self.pool = ThreadPoolExecutor(threads, initializer=take)

    def translate(self, sources: list[str], num_beams: int, batch_size: int) -> list:
        encode = self.replicas[0].src_tokenizer.encode
        order = sorted(range(len(sources)), key=lambda i: len(encode(sources[i])))
        batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]

        def one(batch: list[int]) -> list:
            texts = [sources[i] for i in batch]
            return self.mine.replica.translate(texts, num_beams=num_beams, batch_size=batch_size)

        out: list = [None] * len(sources)
        for batch, found in zip(batches, self.pool.map(one, batches)):
            for i, translation in zip(batch, found):
                out[i] = translation
        return out
