"""What the server's tests share: limits, answers checked, and three ways to run the app.

- client(): create_app behind FastAPI's TestClient, in this process, no socket (most tests);
- InProcessServer: uvicorn with uvicorn_config in a thread of this process, on 127.0.0.1
  (tests that need a real socket and still reach into the app or read its log);
- Server: `python -m heedful serve` in its own process (SIGTERM, clients from PyPI, fuzzing,
  the browser).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path

import pytest
import requests
from ports import free_port

from heedful.server import ServerLimits, create_app, uvicorn_config

OFFSET = 4  # generation.json of the tests' model: output limit = 1.0 · source length + 4
# Small limits, so that fuzzing with any schema-valid request stays fast.
LIMITS = ServerLimits(
    max_chars=50, max_items=4, max_num_beams=4, max_new_tokens=64, max_body_bytes=4000,
    max_wait_ms=20,
)  # fmt: skip
GOOD = {"q": "abc", "source": "en", "target": "de"}


def flags(limits: ServerLimits) -> list[str]:
    """The command-line flags of `heedful serve` that set `limits` (those not at default)."""
    default = ServerLimits()
    return [
        part
        for spec in fields(limits)
        if getattr(limits, spec.name) != getattr(default, spec.name)
        for part in ("--" + spec.name.replace("_", "-"), str(getattr(limits, spec.name)))
    ]


def ok(response) -> dict:
    """A 200 JSON answer's body (a requests or an httpx response)."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def error(response, status: int, fragment: str) -> None:
    """An error answer: the status, JSON with one field `error`, and a short message naming
    what to change."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert list(body) == ["error"] and fragment in body["error"], body
    assert len(body["error"]) < 300, body  # a message quotes what was sent, it does not echo it


@contextmanager
def client(model_dir: Path, limits: ServerLimits = LIMITS, **options) -> Iterator:
    """A TestClient of create_app(model_dir, limits, **options), once its model has loaded."""
    from fastapi.testclient import TestClient

    with TestClient(create_app(model_dir, limits, **options)) as test_client:
        deadline = time.monotonic() + 60
        while test_client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline, test_client.get("/ready").text
            time.sleep(0.02)
        yield test_client


class InProcessServer:
    """create_app served by uvicorn with uvicorn_config, as `heedful serve` does, but in a
    thread of this process: a test can reach into the app (replace its service) and read the
    log records of both. uvicorn leaves logging alone (log_config=None)."""

    def __init__(self, model_dir: Path, limits: ServerLimits):
        import uvicorn

        self.app = create_app(model_dir, limits)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn_config(self.app, limits, host="127.0.0.1", port=self.port, log_config=None)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.ready():
            assert self.thread.is_alive() and time.monotonic() < deadline, "server not ready"
            time.sleep(0.05)

    def ready(self) -> bool:
        try:
            return requests.get(self.url + "/ready", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    def health(self) -> dict:
        """The server's counters (in_flight, requests, ...): GET /ready, /health being
        LibreTranslate's bare {"status": "ok"}."""
        return requests.get(self.url + "/ready", timeout=10).json()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        assert not self.thread.is_alive(), "the server thread did not end"


class Server:
    """`python -m heedful serve MODEL_DIR --port P ...` in its own process, ready when started."""

    def __init__(self, model_dir: Path, log: Path, *flags: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        command = [sys.executable, "-m", "heedful", "serve", str(model_dir), "--port",
                   str(self.port), *flags]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        with open(log, "wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.wait_ready()

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"server exited with {self.process.returncode}:\n{self.output()}")
            try:
                if requests.get(self.url + "/ready", timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"server not ready after {timeout} s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def post(self, **body) -> requests.Response:
        return requests.post(self.url + "/translate", json=body, timeout=60)

    def health(self) -> dict:
        """The server's counters (in_flight, requests, ...): GET /ready, /health being
        LibreTranslate's bare {"status": "ok"}."""
        return requests.get(self.url + "/ready", timeout=10).json()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


def assert_clean_exit(server: Server, returncode: int) -> None:
    """Uvicorn shuts down gracefully on SIGTERM; recent versions then re-raise the signal to
    end the process (so a supervisor sees why it ended): exit status 0 or -SIGTERM."""
    assert returncode in (0, -signal.SIGTERM), (returncode, server.output())
    assert "Application shutdown complete" in server.output(), server.output()
