"""Training beside another busy process: how much of the idle rate is left?

    python benchmarks/shared_cores.py      # ~20 minutes on an otherwise idle machine;
                                           # needs ../shared/corpora/multi30k
    python benchmarks/shared_cores.py --model runs/m30k/best   # and decoding, by that model

Training is `heedful train configs/multi30k/transformer.yaml` itself (3+3 layers, d_model 256,
batches of 3,000 tokens), STEPS steps, its rate read from metrics.jsonl after SKIP steps as
benchmarks/training_speed.py reads it. A setting is the threads (2, 1, or heedful's default:
as many as the cores other processes leave free, looked at every 2 s) and the pieces of each
batch (heedful's default: 2 side by side, one thread each, training/streams.py; or 1: the whole
batch on the threads), each in its own process, because OpenMP reads its wait policy once,
when it loads; OpenMP's threads wait as heedful asks (cpu.SPIN_COUNT). Each runs once on the
idle machine and once beside one competing process, a single-threaded Python busy loop, as a
second user's job would be.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from report import machine, variant, write_section  # benchmarks/report.py
from training_speed import rate  # benchmarks/training_speed.py

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "multi30k"
CONFIG = ROOT / "configs" / "multi30k" / "transformer.yaml"
REPORT = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "benchmarks" / "results" / "shared-cores.json"
BEGIN, END = "<!-- shared-cores:begin -->", "<!-- shared-cores:end -->"
STEPS, SKIP = 60, 10
AUTO = 0  # threads as `heedful train` chooses them with nothing set; pieces as it does
# (threads, pieces): heedful's default first; then the whole batch on the threads, following
# the free cores (the default before the pieces), on 2 and on 1
SETTINGS = [(AUTO, AUTO), (AUTO, 1), (2, 1), (1, 1)]
DEFAULT = (AUTO, AUTO)
BUSY_LOOP = "while True: pass"
DECODED = 1000  # sentences of test2016 decoded (with --model)
OWN = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT")  # heedful's own choice, not ours


def training(threads: int, pieces: int) -> dict:
    """The rate of one `heedful train` run with that setting."""
    args = ["--threads", str(threads)] if threads != AUTO else []
    args += ["--set", f"train.pieces={pieces}"] if pieces != AUTO else []
    env = {k: v for k, v in os.environ.items() if k not in OWN}
    return {"tokens_per_s": rate(CONFIG, STEPS, SKIP, ROOT / "src", args, env)}


def measure_decoding(threads: int, model: str) -> dict:
    """One child process: greedy decoding of test2016's first DECODED sentences, batch 64,
    sentences/s (the Translator follows the free cores itself when threads are AUTO)."""
    import torch

    from heedful.cpu import set_threads
    from heedful.inference.translator import Translator

    if threads != AUTO:
        set_threads(threads)
    sources = (CORPUS / "test2016.en").read_text(encoding="utf-8").splitlines()[:DECODED]
    translator = Translator.load(model)
    translator.translate(sources[:64], num_beams=1)  # warm-up
    start = time.perf_counter()
    translator.translate(sources, num_beams=1, batch_size=64)
    seconds = time.perf_counter() - start
    return {"sentences_per_s": len(sources) / seconds, "threads_after": torch.get_num_threads()}


def beside(busy: bool, job, *args):
    """job(*args) alone, or beside a single-threaded busy loop."""
    rival = subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) if busy else None
    try:
        return job(*args)
    finally:
        if rival is not None:
            rival.kill()
            rival.wait()


def decoding(threads: int, model: str) -> dict:
    """measure_decoding in a child process (OpenMP's wait policy is read when it loads)."""
    env = {k: v for k, v in os.environ.items() if k not in OWN}
    out = subprocess.run(
        [sys.executable, __file__, "--child-decode", str(threads), model],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _threads(threads: int) -> str:
    return "following the free cores" if threads == AUTO else str(threads)


def _pieces(threads: int, pieces: int) -> str:
    if pieces == 1:
        return "1: the whole batch on the threads"
    return "2 side by side, a thread each" if threads in (AUTO, 2) else f"2, on {threads} thread"


def report(results: list[dict], begin: str = BEGIN, end: str = END, command: str = "") -> str:
    idle = {(r["threads"], r["pieces"]): r for r in results if not r["busy"]}
    best_idle = max(r["tokens_per_s"] for r in idle.values())
    rows = []
    for r in results:
        setting = (r["threads"], r["pieces"])
        default = " (heedful's default)" if setting == DEFAULT else ""
        rows.append(
            f"| {_threads(r['threads'])} | {_pieces(*setting)}{default} | "
            f"{'one busy process' if r['busy'] else 'idle'} | {r['tokens_per_s']:,.0f} | "
            f"{r['tokens_per_s'] / best_idle:.0%} |"
        )
    busy_default = next(r for r in results if r["busy"] and (r["threads"], r["pieces"]) == DEFAULT)
    met = busy_default["tokens_per_s"] / best_idle
    own = busy_default["tokens_per_s"] / idle[DEFAULT]["tokens_per_s"]
    return "\n".join([
        begin,
        "## Training on shared cores",
        "",
        f"{datetime.date.today().isoformat()}, {machine()}; otherwise idle.",
        "",
        f"    python benchmarks/shared_cores.py{command}",
        "",
        f"`heedful train configs/multi30k/transformer.yaml` (3+3 layers, d_model 256, batches of "
        f"3,000 tokens), {STEPS} steps, the rate after {SKIP}; each setting alone and beside one "
        "single-threaded busy process. Share: of the best idle rate.",
        "",
        "| threads | pieces of a batch | machine | target tok/s | share of idle |",
        "|---:|---|---|---:|---:|",
        *rows,
        "",
        f"Target: at least 60% of the idle rate beside one busy process, with heedful's "
        f"defaults: **{met:.0%}** of the best idle rate in the table "
        f"({'met' if met >= 0.6 else 'not met'}), {own:.0%} of its own idle rate. One run "
        "per row: differences of a few percent are within the noise.",
        "",
        "Pieces side by side (training/streams.py): each batch's pieces run a forward and "
        "backward each on one thread, the clipping and the update run on one thread too, and "
        "the pieces wait for each other once a step, where threads inside one batch wait for "
        "each other at every operator, and the thread that shares its core with the other "
        "process holds its partner back. Following the free cores (heedful.cpu.FreeCores), a "
        "whole batch drops to one thread there.",
        end,
    ])  # fmt: skip


def decoding_report(results: list[dict], model: str) -> list[str]:
    """The decoding table: each thread setting's greedy sentences/s, idle and beside the busy
    loop."""
    best_idle = max(r["sentences_per_s"] for r in results if not r["busy"])
    rows = [
        f"| {_threads(r['threads'])} | {'one busy process' if r['busy'] else 'idle'} | "
        f"{r['sentences_per_s']:,.1f} | {r['sentences_per_s'] / best_idle:.0%} | "
        f"{r['threads_after']} |"
        for r in results
    ]
    return [
        "",
        f"Decoding: greedy, the first {DECODED} sentences of test2016, batch 64, by {model}.",
        "",
        "| threads | machine | sentences/s | share of idle | threads at the end |",
        "|---:|---|---:|---:|---:|",
        *rows,
    ]


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "--child-decode":
        # heedful first, as the `heedful` command imports it: it sets GOMP_SPINCOUNT, which
        # libgomp reads once, when torch loads it
        import heedful  # noqa: F401

        print(json.dumps(measure_decoding(int(sys.argv[2]), sys.argv[3])))
        return
    model = sys.argv[sys.argv.index("--model") + 1] if "--model" in sys.argv else None
    cpu = sys.argv[sys.argv.index("--cpu") + 1] if "--cpu" in sys.argv else None
    path, begin, end = variant(RESULTS, BEGIN, END, cpu)  # --cpu NAME: its own file, section
    results, decoded = [], []
    for threads, pieces in SETTINGS:
        for busy in (False, True):
            result = {"threads": threads, "pieces": pieces, "busy": busy}
            result.update(beside(busy, training, threads, pieces))
            print(json.dumps(result), flush=True)
            results.append(result)
    for threads in dict.fromkeys(t for t, _ in SETTINGS) if model is not None else ():
        for busy in (False, True):
            result = {"threads": threads, "busy": busy}
            result.update(beside(busy, decoding, threads, model))
            print(json.dumps(result), flush=True)
            decoded.append(result)
    path.write_text(json.dumps({"training": results, "decoding": decoded}, indent=1) + "\n")
    lines = report(results, begin, end, "".join(" " + a for a in sys.argv[1:])).split("\n")
    if decoded:
        lines[-1:-1] = decoding_report(decoded, model)
    write_section(REPORT, begin, end, "\n".join(lines))
    print(f"wrote {REPORT}")


if __name__ == "__main__":
    main()
