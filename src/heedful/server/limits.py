"""What one request, and the server as a whole, may ask for; and the answer when it asks more."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from heedful.config import MAX_OUTPUT_OFFSET


def _limit(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ServerLimits:
    """What one request, and the server as a whole, may ask for, and which web pages may ask
    (cors_origins, the one field that is not a number). `heedful serve --help` lists each
    field as a flag (max_chars -> --max-chars) with the help text below."""

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
    send_timeout: float = _limit(
        30.0,
        "Seconds a client may take to receive an answer once it reads slower than the server "
        "writes (part of the answer waits unsent); then its connection is dropped.",
    )
    max_batch_size: int = _limit(32, "Sentences translated together (1: one at a time).")
    max_wait_ms: float = _limit(5.0, "How long a batch waits for more requests to join it.")
    max_connections: int = _limit(
        256,
        "Open connections. A new one past it closes the longest-idle connection (one with no "
        "request under way), or else the one whose answer has waited longest for its client "
        "to read it; when neither is there, a request gets 503. GET and HEAD of /health and "
        "/ready have 8 connections more.",
    )
    cors_origins: str = _limit(
        "*",
        "Origins whose web pages may call the API, comma-separated (https://a.example,"
        "http://localhost:8080); * any, as LibreTranslate allows; an empty string none "
        "(no CORS headers).",
    )

    def __post_init__(self) -> None:
        origins(self.cors_origins)  # a wrong origin fails at start, naming it
        for spec in fields(self):
            if spec.name == "cors_origins":
                continue
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
        if self.max_new_tokens > MAX_OUTPUT_OFFSET:  # a cap that binds becomes a search's offset
            raise ValueError(
                f"ServerLimits.max_new_tokens must be at most {MAX_OUTPUT_OFFSET:,} (the largest "
                f"output limit a search takes), got {self.max_new_tokens}"
            )


def origins(setting: str) -> list[str]:
    """The origins of --cors-origins: ["*"], [] (none), or each scheme://host[:port] as a
    browser sends it in its Origin header (lower case, no path, no trailing slash)."""
    if not isinstance(setting, str):
        raise ValueError(f"ServerLimits.cors_origins must be text, got {setting!r}")
    listed = [origin.strip() for origin in setting.split(",") if origin.strip()]
    if listed == ["*"]:
        return listed
    for origin in listed:
        scheme, sep, host = origin.partition("://")
        if (
            scheme not in ("http", "https")
            or not sep
            or not host
            or "/" in host
            or origin != origin.lower()
        ):
            raise ValueError(
                f"ServerLimits.cors_origins: {origin[:60]!r} is not an origin: write "
                "scheme://host[:port] in lower case, such as http://localhost:8080, or *"
            )
    return listed


DEFAULT_LIMITS = ServerLimits()


class ApiError(Exception):
    """An answer other than 200: the status a client expects and a message a person can act on."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}
