"""Training beside another busy process: how much of the idle rate is left?

    python benchmarks/shared_cores.py      # ~10 minutes on an otherwise idle machine;
                                           # needs ../shared/corpora/multi30k

The Multi30k Transformer of configs/multi30k/transformer.yaml (3+3 layers, d_model 256) trains
on the first 6,000 Multi30k pairs in length-bucketed batches of 3,000 tokens (as
benchmarks/torch_compile.py), each setting in its own process, because OpenMP reads its wait
policy once, when it loads. A setting is a thread count and how a waiting thread waits:
libgomp's default (spin about 300,000 rounds, then sleep: heedful before issue 9), heedful's
GOMP_SPINCOUNT=10000, a shorter spin of 1,000, or OMP_WAIT_POLICY=PASSIVE (sleep at once).
Each runs once on the idle machine and once beside one competing process, a single-threaded
Python busy loop, as a second user's job would be. The
rate is target tokens/s over the steps after 3 of warm-up, for 40 steps or 60 seconds,
whichever ends first.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from report import machine, multi30k_transformer, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "multi30k"
REPORT = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "benchmarks" / "results" / "shared-cores.json"
BEGIN, END = "<!-- shared-cores:begin -->", "<!-- shared-cores:end -->"
# (threads, how OpenMP's threads wait): libgomp's own default spins about 300,000 rounds
# before a waiting thread sleeps (what heedful did before); heedful now asks for 10,000.
WAITING = {
    "libgomp's default": {"GOMP_SPINCOUNT": "300000"},
    "GOMP_SPINCOUNT=10000": {},  # heedful's own setting (heedful.cpu.prefer_brief_spinning)
    "GOMP_SPINCOUNT=1000": {"GOMP_SPINCOUNT": "1000"},
    "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
}
SETTINGS = [(2, w) for w in WAITING] + [(1, "GOMP_SPINCOUNT=10000")]
DEFAULT = (2, "GOMP_SPINCOUNT=10000")  # what `heedful train` does on 2 cores with nothing set
BUSY_LOOP = "while True: pass"


def measure(threads: int) -> dict:
    """One child process: train and report target tokens/s (how to wait is inherited)."""
    import torch

    from heedful.cpu import set_threads
    from heedful.training.loop import sequence_loss

    set_threads(threads)
    model, batches, tensors = multi30k_transformer(CORPUS)
    optimizer = torch.optim.Adam(model.parameters(), 1e-3)

    def step(batch) -> int:
        src_ids, tgt_in, tgt_out = tensors(batch)
        tokens = int((tgt_out != 0).sum())
        loss = sequence_loss(model(src_ids, tgt_in).logits, tgt_out, 0.1, "sum") / tokens
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        return tokens

    for batch in batches[:3]:
        step(batch)
    start, tokens, steps = time.perf_counter(), 0, 0
    for batch in batches[3:43]:
        tokens += step(batch)
        steps += 1
        if time.perf_counter() - start > 60:
            break
    seconds = time.perf_counter() - start
    return {"tokens_per_s": tokens / seconds, "steps": steps, "seconds": seconds}


def run(threads: int, policy: str, busy: bool) -> dict:
    mine = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT")
    env = {k: v for k, v in os.environ.items() if k not in mine} | WAITING[policy]
    rival = subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) if busy else None
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(threads)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        if rival is not None:
            rival.kill()
            rival.wait()
    return json.loads(out.strip().splitlines()[-1])


def report(results: list[dict]) -> str:
    idle = {(r["threads"], r["policy"]): r for r in results if not r["busy"]}
    best_idle = max(r["tokens_per_s"] for r in idle.values())
    rows = []
    for r in results:
        share = r["tokens_per_s"] / best_idle
        default = " (heedful's default)" if (r["threads"], r["policy"]) == DEFAULT else ""
        rows.append(
            f"| {r['threads']} | {r['policy']}{default} | "
            f"{'one busy process' if r['busy'] else 'idle'} | {r['tokens_per_s']:,.0f} | "
            f"{share:.0%} |"
        )
    busy_default = next(r for r in results if r["busy"] and (r["threads"], r["policy"]) == DEFAULT)
    met = busy_default["tokens_per_s"] / best_idle
    own = busy_default["tokens_per_s"] / idle[DEFAULT]["tokens_per_s"]
    return "\n".join([
        BEGIN,
        "## Training on shared cores",
        "",
        f"{datetime.date.today().isoformat()}, {machine()}; otherwise idle.",
        "",
        "    python benchmarks/shared_cores.py",
        "",
        "The Multi30k Transformer (3+3 layers, d_model 256, batches of 3,000 tokens), each "
        "setting alone and beside one single-threaded busy process. Share: of the best idle "
        "rate.",
        "",
        "| threads | waiting | machine | target tok/s | share of idle |",
        "|---:|---|---|---:|---:|",
        *rows,
        "",
        f"Target: at least 60% of the idle rate beside one busy process, with heedful's "
        f"defaults: **{met:.0%}** of the best idle rate in the table "
        f"({'met' if met >= 0.6 else 'not met'}), {own:.0%} of its own idle rate. One run "
        "per row: differences of a few percent are within the noise.",
        "",
        "Why 10,000 rounds and not fewer: shorter spins gain more here, but small models, "
        "whose threads wait often, pay for them. The dates demo's first 600 steps "
        "(`GOMP_SPINCOUNT=N heedful demo --max-steps 600`, 2 threads) took 22-23 s with "
        "libgomp's default, 23-24 s with 10,000 and 31-32 s with 1,000; one thread took 34 s.",
        END,
    ])  # fmt: skip


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        # heedful first, as the `heedful` command imports it: it sets GOMP_SPINCOUNT, which
        # libgomp reads once, when torch loads it
        import heedful  # noqa: F401

        print(json.dumps(measure(int(sys.argv[2]))))
        return
    results = []
    for threads, policy in SETTINGS:
        for busy in (False, True):
            result = {"threads": threads, "policy": policy, "busy": busy}
            result.update(run(threads, policy, busy))
            print(json.dumps(result), flush=True)
            results.append(result)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    write_section(REPORT, BEGIN, END, report(results))
    print(f"wrote {REPORT}")


if __name__ == "__main__":
    main()
