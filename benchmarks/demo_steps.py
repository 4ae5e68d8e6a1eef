"""How many training steps each demo task and model needs to reach its target, counted in steps
(which a busy machine does not change), to set `heedful demo`'s step budgets from.

    python benchmarks/demo_steps.py                        # every task and model (hours)
    python benchmarks/demo_steps.py --only dates:transformer dialogue:rnn-bahdanau
    python benchmarks/demo_steps.py --report               # only rewrite docs/benchmarks.md

Each run is `heedful demo`'s own code (demo/run.py's run_demo) with seed 1, no time limit and
a step cap far above the budget: it stops where the demo stops, once every development pair is
right (the target), or at the cap. Recorded per run: the step it stopped at and why, the
development exact match at each validation, and the held-out exact match. The demos' step
budgets (DemoTask.step_budget: demo/run.py's TextDemo.budgets, demo/captions.py's STEP_BUDGETS)
come from these steps with a margin (docs/benchmarks.md says which). Results:
benchmarks/results/demo-steps.json, one run added at a time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from pathlib import Path

from report import machine, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "benchmarks" / "results" / "demo-steps.json"
REPORT = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- demo-steps:begin -->", "<!-- demo-steps:end -->"
CAPS = {"dates": 8000, "dialogue": 4000, "captions": 3600}  # far above any budget


def run(task: str, name: str, cap: int, work: Path) -> dict:
    from heedful.demo.run import run_demo

    out = work / f"{task}-{name}"
    result = run_demo(
        name, out, max_steps=cap, max_time=None, progress=False, task=task,
        echo=lambda line: print(f"[{task} {name}] {line}", flush=True), snapshots=0,
    )  # fmt: skip
    log = [json.loads(line) for line in (out / "metrics.jsonl").open(encoding="utf-8")]
    curve = [(r["step"], r["exact_match"]) for r in log if "exact_match" in r]
    return {
        "task": task,
        "model": name,
        "cap": cap,
        "steps": result.steps,
        "stopped_by": result.stopped_by,
        "exact_match": result.exact_match,
        "curve": curve,  # development exact match by step
    }


def report(data: dict) -> str:
    rows = [
        f"| {r['task']} | {r['model']} | {r['steps']:,} | {r['stopped_by']} | "
        f"{max((m for _, m in r['curve']), default=0):.1%} | {r['exact_match']:.1%} | "
        f"{data['budgets'].get(r['task'] + ':' + r['model'], '-')} |"
        for r in data["runs"]
    ]
    return "\n".join([
        BEGIN,
        "## The demos' step budgets (issue 28, item 5)",
        "",
        f"{data['date']}, {data['machine']}. `python benchmarks/demo_steps.py`.",
        "",
        "Each demo task and model trained by `heedful demo`'s own code, seed 1, with no time "
        "limit and a step cap far above the budget (dates 8,000, dialogue 4,000, captions 3,600 "
        "steps): steps is where it stopped, by validation (every development pair right: the "
        "target) or at the cap. Steps do not depend on how busy the machine is; seconds would. "
        "budget: the demo's `--max-steps` default for that model (DemoTask.step_budget), "
        f"the steps to the target with a margin. {data.get('rule', '')}",
        "",
        "| task | model | steps | stopped by | best dev | held-out exact match | budget |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: |",
        *rows,
        "",
        "Development exact match by step:",
        "",
        *(
            f"- {r['task']} {r['model']}: "
            + ", ".join(f"{step}: {match:.0%}" for step, match in r["curve"])
            for r in data["runs"]
        ),
        END,
    ])  # fmt: skip


def main() -> None:
    from heedful.cpu import set_threads
    from heedful.demo.run import DEMO_TASKS

    every = [f"{task}:{name}" for task, demo in DEMO_TASKS.items() for name in demo.models]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=every, choices=every, metavar="TASK:MODEL")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each run")
    parser.add_argument("--report", action="store_true", help="only rewrite the report")
    args = parser.parse_args()
    data = json.loads(RESULT.read_text(encoding="utf-8")) if RESULT.exists() else {"runs": []}
    if not args.report:
        set_threads(args.threads)
        data |= {"date": datetime.date.today().isoformat(), "machine": machine()}
        with tempfile.TemporaryDirectory(prefix="heedful-demo-steps-") as work:
            for key in args.only:
                task, name = key.split(":")
                result = run(task, name, CAPS[task], Path(work))
                others = [r for r in data["runs"] if (r["task"], r["model"]) != (task, name)]
                data["runs"] = [*others, result]
                RESULT.parent.mkdir(parents=True, exist_ok=True)
                RESULT.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    order = {key: i for i, key in enumerate(every)}
    data["runs"].sort(key=lambda r: order.get(f"{r['task']}:{r['model']}", len(order)))
    data["budgets"] = {
        f"{task}:{name}": demo.step_budget(name)
        for task, demo in DEMO_TASKS.items()
        for name in demo.models
    }
    write_section(REPORT, BEGIN, END, report(data))
    print(f"wrote {REPORT}", file=sys.stderr)


if __name__ == "__main__":
    main()
