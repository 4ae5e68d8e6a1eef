"""Fresh pages in a training step: what keeping freed memory and slicing the output layer buy.

    python benchmarks/training_memory.py --tokenizers runs/sweep/rnn-base/latest
    python benchmarks/training_memory.py --report        # only rewrite docs/benchmarks.md

torch's CPU allocator caches nothing: every tensor is a malloc and a free, and glibc returns
large blocks to the kernel, so the next step's tensors are fresh pages the kernel must fault in
and zero. Two changes remove most of them, and each arm here turns one of them off:

- as shipped: glibc keeps blocks up to 32 MiB (`heedful.allocator.reuse_freed_memory`), and both
  models apply the output layer and the loss in slices (output_loss.py);
- malloc default: glibc's own thresholds and arenas (the allocator calls made no-ops);
- logits whole: the (positions x 8,000) logits and their gradient made whole, as before.

Each arm trains `--steps` steps of the Multi30k config from scratch in its own process, on one
vocabulary (`--tokenizers`: a model directory's tokenizer.src/tgt, so no arm trains its own);
arms alternate within each round. Per arm, the medians over rounds of: target tokens/s (the
median over logging intervals after `--warmup` steps), page faults per second, and the kernel's
share of the process's CPU time, both sampled from /proc every 0.5 s over the middle half of
the run. vs shipped: the shipped arm's tokens/s over this arm's, per round, median.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from report import machine, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "benchmarks" / "work" / "training-memory"
RESULT = ROOT / "benchmarks" / "results" / "training-memory.json"
REPORT = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- training-memory:begin -->", "<!-- training-memory:end -->"
CONFIGS = ("transformer", "rnn-bahdanau")
# Each arm patches heedful before its CLI runs (the patch precedes the import that binds it).
ARMS = {
    "as shipped": "",
    "malloc default": (
        "import heedful.allocator as a; "
        "a.reuse_freed_memory = a.one_malloc_arena = lambda environ=None: False"
    ),
    "logits whole": (
        "import heedful.training.loop as t; t.defers_output_layer = lambda model: False"
    ),
}


def sample(pid: int, samples: list, done: threading.Event) -> None:
    """(time, minor faults, user ticks, system ticks) of `pid` every 0.5 s."""
    while not done.is_set():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            # after the command name: minflt is field 10, utime 14, stime 15 (proc(5))
            samples.append((time.perf_counter(), int(fields[7]), int(fields[11]), int(fields[12])))
        except (OSError, IndexError, ValueError):
            pass
        done.wait(0.5)


def middle_half(samples: list) -> tuple[float, float]:
    """Page faults per second and the system share of CPU time, over the middle half."""
    n = len(samples)
    if n < 4:
        raise RuntimeError("the run was too short to sample: train more --steps")
    (t0, f0, u0, s0), (t1, f1, u1, s1) = samples[n // 4], samples[3 * n // 4]
    return (f1 - f0) / (t1 - t0), (s1 - s0) / max(1, (u1 - u0) + (s1 - s0))


def tokens_per_second(run_dir: Path, warmup: int) -> float:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    points = [(r["step"], r["tokens"], r["seconds"]) for r in records if "tokens" in r]
    after = [p for p in points if p[0] >= warmup]
    rates = [(b[1] - a[1]) / (b[2] - a[2]) for a, b in zip(after, after[1:]) if b[2] > a[2]]
    if not rates:
        raise RuntimeError(f"{run_dir}: no logging intervals after step {warmup}")
    return statistics.median(rates)


def run_arm(config: str, arm: str, tokenizers: Path, steps: int, warmup: int) -> dict:
    run_dir = WORK / f"{config}-{arm.replace(' ', '-')}"
    prelude = f"{ARMS[arm]}; " if ARMS[arm] else ""
    code = f"import sys; {prelude}from heedful.cli import main; sys.argv[0] = 'heedful'; main()"
    command = [
        sys.executable, "-c", code, "train", str(ROOT / "configs" / "multi30k" / f"{config}.yaml"),
        "--run-dir", str(run_dir), "--force", "--no-progress",
        "--set", f"train.max_steps={steps}", "--set", "train.max_time=null",
        "--set", "train.eval_every=1000000000", "--set", "train.log_every=5",
        "--set", f"data.source.tokenizer={tokenizers / 'tokenizer.src'}",
        "--set", f"data.tgt_tokenizer={tokenizers / 'tokenizer.tgt'}",
    ]  # fmt: skip
    samples: list = []
    done = threading.Event()
    WORK.mkdir(parents=True, exist_ok=True)
    with (WORK / f"{run_dir.name}.log").open("w") as log:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        watcher = threading.Thread(target=sample, args=(proc.pid, samples, done), daemon=True)
        watcher.start()
        proc.wait()
        done.set()
        watcher.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{config}, {arm}: training failed, see {log.name}")
    faults, system = middle_half(samples)
    rate = tokens_per_second(run_dir, warmup)
    return {"tokens_per_s": rate, "faults_per_s": faults, "system_share": system}


def report(result: dict) -> str:
    lines = [
        BEGIN,
        "## Fresh pages in a training step (issue 16)",
        "",
        f"{result['date']}, {result['machine']}; {result['steps']} steps per arm from scratch, "
        f"{result['rounds']} rounds, arms alternated; 1-minute load average {result['load'][0]}"
        f" at the start, {result['load'][1]} at the end. `{result['command']}`",
        "",
        "| config | arm | target tokens/s | vs shipped | page faults/s | kernel share of CPU |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for config, arms in result["configs"].items():
        shipped = arms["as shipped"]["rounds"]
        for arm, row in arms.items():
            ratios = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(shipped, row["rounds"])]
            lines.append(
                f"| {config} | {arm} | {row['tokens_per_s']:.0f} | "
                f"{statistics.median(ratios):.2f}x | {row['faults_per_s']:,.0f} | "
                f"{row['system_share']:.0%} |"
            )
    return "\n".join([*lines, END])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizers", type=Path, help="a model directory (tokenizer.src/tgt)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=15, help="steps left out of the rate")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    parser.add_argument("--report", action="store_true", help="only rewrite docs/benchmarks.md")
    args = parser.parse_args()
    if args.report:
        write_section(REPORT, BEGIN, END, report(json.loads(RESULT.read_text())))
        return
    if args.tokenizers is None:
        parser.error("--tokenizers is required to run")
    load_start = os.getloadavg()[0]
    runs = {c: {arm: [] for arm in ARMS} for c in args.configs}
    for round_ in range(args.rounds):
        for config in args.configs:
            for arm in ARMS:
                runs[config][arm].append(
                    run_arm(config, arm, args.tokenizers, args.steps, args.warmup)
                )
                print(round_, config, arm, runs[config][arm][-1], flush=True)
    configs = {
        config: {
            arm: {
                **{k: statistics.median(r[k] for r in rounds) for k in rounds[0]},
                "rounds": rounds,
            }
            for arm, rounds in arms.items()
        }
        for config, arms in runs.items()
    }
    shown = " ".join(["python benchmarks/training_memory.py", *sys.argv[1:]])
    result = {"date": datetime.date.today().isoformat(), "machine": machine(),
              "command": shown.replace(f"{ROOT}/", ""), "steps": args.steps,
              "rounds": args.rounds, "load": [round(load_start, 2),
              round(os.getloadavg()[0], 2)], "configs": configs}  # fmt: skip
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    write_section(REPORT, BEGIN, END, report(result))


if __name__ == "__main__":
    main()
