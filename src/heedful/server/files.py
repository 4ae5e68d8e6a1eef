"""The translated files of /translate_file, kept in memory until /download_file takes them.

LibreTranslate writes each translated file to disk and answers its URL; here they are held in
memory, within bounds that no client can push: at most KEEP_FILES files and KEEP_BYTES bytes
in all (the oldest go first), each for KEEP_SECONDS. A download does not remove a file, as
LibreTranslate's does not: a browser may ask twice.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from heedful.server.limits import ApiError

KEEP_FILES = 100
KEEP_BYTES = 64 << 20
KEEP_SECONDS = 600.0


@dataclass(frozen=True)
class StoredFile:
    name: str  # the name the download gives it: the uploaded file's, made safe
    data: bytes
    media_type: str
    stored_at: float


def safe_name(filename: str) -> str:
    """A file name safe in a URL and a Content-Disposition header: its last path part, ASCII
    letters, digits, dot, dash and underscore (others become _), at most 100 characters."""
    base = re.split(r"[\\/]", filename)[-1]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", base).lstrip(".")[-100:]
    return name or "file"


class FileStore:
    """Files by key, oldest first, within the bounds; `clock` (seconds) for the expiry."""

    def __init__(
        self,
        max_files: int = KEEP_FILES,
        max_bytes: int = KEEP_BYTES,
        max_age: float = KEEP_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_files, self.max_bytes = max_files, max_bytes
        self.max_age, self.clock = max_age, clock
        self.files: OrderedDict[str, StoredFile] = OrderedDict()
        self.size = 0

    def put(self, filename: str, data: bytes, media_type: str) -> str:
        """Keep a file; its key (a random id and its name, as LibreTranslate's URLs have)."""
        if len(data) > self.max_bytes:
            raise ApiError(
                413,
                f"the translated file is {len(data):,} bytes; at most {self.max_bytes:,} "
                "are kept: send a shorter file",
            )
        self._expire()
        while self.files and (
            len(self.files) >= self.max_files or self.size + len(data) > self.max_bytes
        ):
            self._drop(next(iter(self.files)))
        name = safe_name(filename)
        key = f"{uuid.uuid4().hex}.{name}"
        self.files[key] = StoredFile(name, data, media_type, self.clock())
        self.size += len(data)
        return key

    def get(self, key: str) -> StoredFile:
        self._expire()
        stored = self.files.get(key)
        if stored is None:
            raise ApiError(
                404,
                f"no translated file {key[:60]!r}: it expired or never was (files are kept "
                f"{self.max_age:g} s, the last {self.max_files})",
            )
        return stored

    def _expire(self) -> None:
        now = self.clock()
        for key in [k for k, f in self.files.items() if now - f.stored_at > self.max_age]:
            self._drop(key)

    def _drop(self, key: str) -> None:
        self.size -= len(self.files.pop(key).data)
