"""Load benchmark of `heedful serve`: concurrent clients on the loopback interface, bounded in
time and count, against a dynamically batching server and a one-at-a-time one.

    python benchmarks/serve_load.py                                  # 16 and 64 clients, 60 s each
    python benchmarks/serve_load.py --model runs/bench/transformer/best --beam 5
    python benchmarks/serve_load.py --clients 4 --duration 3 --doc /tmp/smoke.md   # a smoke run

For each scenario a fresh server process starts on 127.0.0.1 (a free port), gets a short
warm-up, then N clients each send one request after another for D seconds (a client that gets
503 waits 50 ms before its next request). Reported: requests/s, sentences/s, latency
percentiles of the successful requests, errors by status, and the server's peak resident memory
(VmHWM in /proc/PID/status). The scenarios: the default server (dynamic batching) at each client
count, and `--max-batch-size 1` (one request at a time) at 16 clients; batching should give at
least 2x its sentences/s. Results go to docs/benchmarks.md between the serve-load markers, with
date, machine and command, and to benchmarks/results/serve-load.json. It needs the machine to
itself: server and clients share the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from report import machine, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = ROOT / "runs" / "bench" / "transformer" / "best"  # multi30k_quality.py's
DEFAULT_SENTENCES = ROOT.parent / "shared" / "corpora" / "multi30k" / "test2016.en"
RESULTS = ROOT / "benchmarks" / "results" / "serve-load.json"
REPORT = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- serve-load:begin -->", "<!-- serve-load:end -->"
TARGET_SPEEDUP = 2.0
BACKOFF = 0.05  # seconds a client waits after a 503 (saturation), so it does not spin


# ---- the server under test ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`heedful serve` on 127.0.0.1 in its own process."""

    def __init__(self, model: Path, flags: list[str], log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [
            sys.executable,
            "-m",
            "heedful",
            "serve",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *flags,
        ]
        with open(log, "wb") as out:
            self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT)
        self.log = log

    def wait_ready(self, timeout: float = 300.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                sys.exit(f"server exited ({self.process.returncode}):\n{self.log.read_text()}")
            try:
                if httpx.get(self.url + "/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        sys.exit(f"server not ready within {timeout:.0f} s:\n{self.log.read_text()}")

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB -> MiB
        return float("nan")

    def health(self) -> dict:
        import httpx

        return httpx.get(self.url + "/health", timeout=10).json()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


# ---- clients ----------------------------------------------------------------------------------


@dataclass
class Load:
    clients: int
    duration: float
    latencies: list[float] = field(default_factory=list)  # seconds, successful requests
    statuses: Counter = field(default_factory=Counter)
    sentences: int = 0
    elapsed: float = 0.0


async def _client(http, url, body_of, load: Load, deadline: float, budget: list[int]) -> None:
    import httpx

    while time.monotonic() < deadline and budget[0] > 0:
        budget[0] -= 1
        body = body_of()
        start = time.monotonic()
        try:
            response = await http.post(url, json=body)
            status = response.status_code
        except httpx.HTTPError as error:
            status = type(error).__name__
        load.statuses[status] += 1
        if status == 200:
            load.latencies.append(time.monotonic() - start)
            load.sentences += len(body["q"])
        elif status == 503:
            await asyncio.sleep(BACKOFF)


async def run_load(
    url: str, sentences: list[str], clients: int, duration: float, args, max_requests: int
) -> Load:
    """`clients` concurrent clients for `duration` seconds (and at most `max_requests`)."""
    import httpx

    rng = random.Random(0)
    pair = args.languages

    def body_of() -> dict:
        q = [rng.choice(sentences) for _ in range(args.items)]
        return {"q": q, "source": pair[0], "target": pair[1], "num_beams": args.beam}

    load = Load(clients, duration)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    timeout = httpx.Timeout(args.request_timeout + 10)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as http:
        start = time.monotonic()
        deadline, budget = start + duration, [max_requests]
        await asyncio.gather(
            *(
                _client(http, url + "/translate", body_of, load, deadline, budget)
                for _ in range(clients)
            )
        )
        load.elapsed = time.monotonic() - start
    return load


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def summary(name: str, load: Load, server: Server, batches: dict) -> dict:
    ok = load.statuses.get(200, 0)
    return {
        "scenario": name,
        "clients": load.clients,
        "seconds": round(load.elapsed, 1),
        "requests": sum(load.statuses.values()),
        "requests_per_s": round(ok / load.elapsed, 1),
        "sentences_per_s": round(load.sentences / load.elapsed, 1),
        "p50_ms": round(percentile(load.latencies, 50) * 1000, 1),
        "p95_ms": round(percentile(load.latencies, 95) * 1000, 1),
        "p99_ms": round(percentile(load.latencies, 99) * 1000, 1),
        "errors": {str(k): v for k, v in sorted(load.statuses.items(), key=str) if k != 200},
        "mean_batch": round(batches["sentences"] / max(batches["batches"], 1), 2),
        "peak_rss_mib": round(server.peak_rss_mib(), 1),
    }


def scenario(name, model, flags, clients, sentences, args, log_dir: Path) -> dict:
    """A fresh server, a warm-up, then the measured load; the server is stopped after."""
    server = Server(model, flags, log_dir / f"serve-{name}-{clients}.log")
    try:
        server.wait_ready()
        url = server.url
        asyncio.run(run_load(url, sentences, min(clients, 4), args.warmup, args, 10_000))
        before = server.health()
        load = asyncio.run(
            run_load(url, sentences, clients, args.duration, args, args.max_requests)
        )
        after = server.health()
        batches = {k: after[k] - before[k] for k in ("sentences", "batches")}
        return summary(name, load, server, batches)
    finally:
        server.stop()


# ---- the report -------------------------------------------------------------------------------


def report(results: dict) -> str:
    rows = results["scenarios"]
    lines = [
        BEGIN,
        "## HTTP serving under load",
        "",
        f"`heedful serve` on 127.0.0.1 with `{results['model']}`, beam {results['beam']}, "
        f"{results['items']} sentence(s) per request drawn from `{results['sentences']}`; "
        f"each client sends its next request as soon as the last is answered, for "
        f"{results['duration']:g} s after a {results['warmup']:g} s warm-up (a 503 makes it "
        f"wait {BACKOFF * 1000:.0f} ms). Latency percentiles are of successful requests.",
        "",
        "| server | clients | requests/s | sentences/s | p50 ms | p95 ms | p99 ms | errors "
        "| mean batch | peak RSS MiB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for r in rows:
        errors = ", ".join(f"{k}: {v}" for k, v in r["errors"].items()) or "0"
        lines.append(
            f"| {r['scenario']} | {r['clients']} | {r['requests_per_s']} | "
            f"{r['sentences_per_s']} | {r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} | "
            f"{errors} | {r['mean_batch']} | {r['peak_rss_mib']} |"
        )
    speedup = results.get("speedup")
    if speedup is not None:
        verdict = "met" if speedup >= TARGET_SPEEDUP else "NOT met"
        lines += [
            "",
            f"Dynamic batching at {results['baseline_clients']} clients: {speedup:.2f}x the "
            "sentences/s of one request "
            f"at a time (target >= {TARGET_SPEEDUP:g}x: {verdict}).",
        ]
    lines += [
        "",
        f"{results['date']}; {results['machine']}; `{results['command']}`",
        END,
    ]
    return "\n".join(lines)


def write_report(results: dict, path: Path) -> None:
    write_section(path, BEGIN, END, report(results))


def read_sentences(path: Path, limit: int = 5000) -> list[str]:
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line][:limit]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="a model directory")
    parser.add_argument("--sentences", type=Path, default=DEFAULT_SENTENCES)
    parser.add_argument("--clients", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per scenario")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring")
    parser.add_argument("--max-requests", type=int, default=200_000, help="per scenario")
    parser.add_argument("--beam", type=int, default=1, help="num_beams of every request")
    parser.add_argument("--items", type=int, default=1, help="sentences per request")
    parser.add_argument("--request-timeout", type=float, default=30.0)
    parser.add_argument(
        "--baseline-clients",
        type=int,
        default=16,
        help="clients for the one-at-a-time server (0: skip it)",
    )
    parser.add_argument("--doc", type=Path, default=REPORT, help="where the report goes")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    if not (args.model / "config.json").is_file():
        sys.exit(
            f"no model directory at {args.model}: train one (benchmarks/multi30k_quality.py)"
            " or pass --model"
        )
    if not args.sentences.is_file():
        sys.exit(f"no sentences at {args.sentences}: pass --sentences FILE (one per line)")
    config = json.loads((args.model / "config.json").read_text(encoding="utf-8"))
    args.languages = (config.get("src_lang", "src"), config.get("tgt_lang", "tgt"))
    sentences = read_sentences(args.sentences)
    common = ["--request-timeout", str(args.request_timeout)]
    log_dir = Path(os.environ.get("TMPDIR", "/tmp"))
    rows = []
    for clients in args.clients:
        rows.append(scenario("batching", args.model, common, clients, sentences, args, log_dir))
        print(json.dumps(rows[-1]), flush=True)
    if args.baseline_clients:
        one = [*common, "--max-batch-size", "1"]
        rows.append(
            scenario(
                "one-at-a-time", args.model, one, args.baseline_clients, sentences, args, log_dir
            )
        )
        print(json.dumps(rows[-1]), flush=True)
    by = {(r["scenario"], r["clients"]): r for r in rows}
    base = by.get(("one-at-a-time", args.baseline_clients))
    batched = by.get(("batching", args.baseline_clients))
    speedup = None
    if base and batched and base["sentences_per_s"] > 0:
        speedup = batched["sentences_per_s"] / base["sentences_per_s"]
    results = {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "command": shlex.join(["python", "benchmarks/serve_load.py", *sys.argv[1:]]),
        "model": str(args.model),
        "sentences": str(args.sentences),
        "beam": args.beam,
        "items": args.items,
        "duration": args.duration,
        "warmup": args.warmup,
        "scenarios": rows,
        "baseline_clients": args.baseline_clients,
        "speedup": None if speedup is None else round(speedup, 2),
    }
    print(report(results))
    if not args.no_write:
        write_report(results, args.doc)
        if args.doc == REPORT:
            RESULTS.parent.mkdir(parents=True, exist_ok=True)
            RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
