"""The captions task (tasks/scenes.py) learned by the demo's three image models, side by side.

    python benchmarks/captions.py                     # 150 s of training each, as the demo
    python benchmarks/captions.py --steps 1500        # equal steps instead of equal time
    python benchmarks/captions.py --report            # only rewrite docs/benchmarks.md

CNN + RNN decoder with Bahdanau attention (Show, Attend and Tell), CNN + Transformer decoder,
and ViT + Transformer decoder, each trained by `heedful demo --task captions --model NAME`'s
own code (demo/run.py's run_demo, task captions) on 20,000 generated scenes, then scored on the same
1,000 held-out scenes: exact match and BLEU-1..4 (sacreBLEU, one reference per scene).

With a time budget the columns compare what each model learns in that wall-clock time, which
depends on how busy the machine is: the report records the load average before and after each
run and says when the machine was shared. With --steps they compare the models at equal
training. Results: benchmarks/results/captions.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from report import machine, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "benchmarks" / "results" / "captions.json"
REPORT = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- captions:begin -->", "<!-- captions:end -->"
MODELS = ("cnn-rnn-bahdanau", "cnn-transformer", "vit-transformer")


def run(name: str, steps: int | None, seconds: float | None, work: Path) -> dict:
    from heedful.demo.run import run_demo

    load_before, cpu_before = os.getloadavg()[0], time.process_time()
    result = run_demo(
        name, work / name, max_steps=steps, max_time=seconds if steps is None else 10**9,
        progress=False, echo=lambda line: print(f"[{name}] {line}", flush=True), task="captions",
    )  # fmt: skip
    log = [json.loads(line) for line in (work / name / "metrics.jsonl").open()]
    return {
        "model": name,
        "exact_match": result.exact_match,
        "bleu1": result.bleu["bleu1"],
        "bleu4": result.bleu["bleu4"],
        "signature": result.bleu["signature"],
        "steps": result.steps,
        "train_seconds": result.train_seconds,
        "steps_per_second": result.steps / max(result.train_seconds, 1e-9),
        "stopped_by": result.stopped_by,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        # the process's CPU seconds (all threads; scenes, training, scoring): on a shared
        # machine, cpu_seconds / threads estimates the wall-clock time of an idle one
        "cpu_seconds": time.process_time() - cpu_before,
        "threads": torch.get_num_threads(),
        "curve": [  # development exact match by step
            (r["step"], r["seconds"], r["exact_match"]) for r in log if "exact_match" in r
        ],
    }


def report(data: dict) -> str:
    budget = f"{data['steps']} steps" if data["steps"] else f"{data['seconds']:g} s of training"
    # the run's own 2 threads make a load of about 2: more than the 2 cores means other work
    shared = max(max(r["load_before"], r["load_after"]) for r in data["runs"]) > 2.5
    rows = [
        f"| {r['model']} | {r['exact_match']:.1%} | {r['bleu1']:.1f} | {r['bleu4']:.1f} | "
        f"{r['steps']} | {r['train_seconds']:.0f} | {r['steps_per_second']:.2f} | "
        f"{r['load_before']:.1f}-{r['load_after']:.1f} | {r['cpu_seconds'] / r['steps']:.3f} |"
        for r in data["runs"]
    ]
    curves = [
        f"- {r['model']}: " + ", ".join(f"{step}: {match:.0%}" for step, _, match in r["curve"])
        for r in data["runs"]
    ]
    best = max(r["exact_match"] for r in data["runs"])
    target = (
        f"None reaches the demo's target of 95% exact match in {budget} (best: {best:.1%})."
        if best < 0.95
        else "The best reaches the demo's target of 95% exact match."
    )
    note = (
        "**The machine was shared** with other work while this ran (load averages above the "
        "2 cores), so the times and steps/s are lower than an idle machine's."
        if shared
        else "The machine was otherwise idle."
    )
    return "\n".join([
        BEGIN,
        "## Captions of generated scenes: CNN+RNN, CNN+Transformer, ViT+Transformer",
        "",
        f"{data['date']}, {data['machine']}. `{data['command']}`.",
        "",
        f"Each model trained by `heedful demo --task captions`'s code for {budget} (stopping "
        "early once it captions every development scene right), then scored on the same 1,000 "
        "held-out scenes (greedy search): exact match, and sacreBLEU BLEU-1 and BLEU-4 against "
        f"the one reference of each scene; load is the 1-minute load average before and after "
        f"the run. {note}",
        "",
        "| model | exact match | BLEU-1 | BLEU-4 | steps | train s | steps/s | load | CPU s/step |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        "CPU s/step: the process's CPU seconds (all its threads; scenes, training, validation and "
        "scoring) per step, about the wall-clock time of a step on an idle core. "
        f"{target} Development exact match (300 scenes) by step:",
        "",
        *curves,
        "",
        f"Signature: `{data['runs'][0]['signature']}`.",
        END,
    ])  # fmt: skip


def save(data: dict, add: bool) -> None:
    """Write the results; `add` keeps the other models' runs already there (models run in
    separate processes, or at separate times, into one report)."""
    if add and RESULT.exists():
        mine = {r["model"] for r in data["runs"]}
        old = json.loads(RESULT.read_text(encoding="utf-8"))["runs"]
        data = {**data, "runs": [r for r in old if r["model"] not in mine] + data["runs"]}
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="equal steps instead of time")
    parser.add_argument("--seconds", type=float, default=150.0, help="training time each")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--report", action="store_true", help="only rewrite the report")
    parser.add_argument("--add", action="store_true", help="add the runs to the results there")
    args = parser.parse_args()
    if not args.report:
        data = {
            "date": datetime.date.today().isoformat(),
            "machine": machine(),
            "command": "python benchmarks/captions.py " + " ".join(sys.argv[1:]),
            "steps": args.steps,
            "seconds": args.seconds,
            "runs": [],
        }
        with tempfile.TemporaryDirectory() as work:
            for name in args.models:  # written after each model: a long run stopped keeps them
                data["runs"].append(run(name, args.steps, args.seconds, Path(work)))
                save(data, args.add)
    data = json.loads(RESULT.read_text(encoding="utf-8"))
    write_section(REPORT, BEGIN, END, report(data))
    print(report(data))


if __name__ == "__main__":
    main()
