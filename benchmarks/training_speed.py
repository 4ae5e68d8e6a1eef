"""Training speed of a config under this heedful and under another source tree, in short runs
that alternate, so that what else runs on the machine falls on both alike.

    git archive HEAD src | tar -x -C /tmp/heedful-head
    python benchmarks/training_speed.py --baseline /tmp/heedful-head/src \\
        --config configs/multi30k/transformer-tiny.yaml --steps 120 --rounds 3
    python benchmarks/training_speed.py --baseline /tmp/heedful-head/src \\
        --set train.output_products=bfloat16     # a setting for this tree's runs only
    python benchmarks/training_speed.py --report     # only rewrite docs/benchmarks.md
    python benchmarks/training_speed.py --report --cpu amd-epyc-avx2   # another CPU's section

Each round runs `heedful train CONFIG` for --steps steps once with each tree (which goes first
alternates), the same seed, 2 threads pinned (the free-core logic would otherwise change the
thread count mid-run), no validation and no checkpoint before the end. A run's rate is the
target tokens a second between the first record at or after step --skip and the last, from
metrics.jsonl's running totals: tokenizer training, start-up and the first steps (memory
still growing) are left out. The ratio is the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from report import machine, variant, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "benchmarks" / "results" / "training-speed.json"
REPORT = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- training-speed:begin -->", "<!-- training-speed:end -->"
SETTINGS = {  # None: the run's step count
    "train.max_steps": None,
    "train.max_time": "null",
    "train.eval_every": None,  # one validation and checkpoint, at the end
    "train.log_every": 10,
    "train.snapshot_sentences": 0,
}


def rate(
    config: Path, steps: int, skip: int, src: Path, args=("--threads", "2"), env=None
) -> float:
    """Target tokens/s of one short run of `config` with heedful imported from `src`, `args`
    added to the command (by default 2 threads pinned) and `env` to the environment."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        command = [sys.executable, "-m", "heedful", "train", str(config), "--no-progress"]
        command += ["--run-dir", str(run_dir), *args]
        for key, value in SETTINGS.items():
            command += ["--set", f"{key}={value if value is not None else steps}"]
        env = dict(env if env is not None else os.environ, PYTHONPATH=str(src.resolve()))
        subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    steps_seen = [r for r in records if "tokens" in r]
    first = next(r for r in steps_seen if r["step"] >= skip)
    last = steps_seen[-1]
    return (last["tokens"] - first["tokens"]) / (last["seconds"] - first["seconds"])


def run(args) -> dict:
    trees = {"this": ROOT / "src", "baseline": args.baseline}
    rates: dict[str, list[float]] = {name: [] for name in trees}
    extra = {"this": [a for kv in args.set for a in ("--set", kv)], "baseline": []}
    load = os.getloadavg()[0]
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for name in order:
            more = ("--threads", "2", *extra[name])
            rates[name].append(rate(args.config, args.steps, args.skip, trees[name], more))
            print(f"round {round_ + 1} {name}: {rates[name][-1]:.0f} target tok/s", flush=True)
    config = Path(os.path.abspath(args.config)).relative_to(ROOT).as_posix()
    return {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "load": [load, os.getloadavg()[0]],
        "command": shlex.join(["python", "benchmarks/training_speed.py", *sys.argv[1:]]),
        "config": config,
        "note": args.note,
        "cpu": args.cpu,
        "rates": rates,
        "ratio": statistics.median(a / b for a, b in zip(rates["this"], rates["baseline"])),
    }


def _load(load: list[float]) -> str:
    """The 1-minute load average before the first run says what else ran; the one at the end
    counts the runs' own two threads too."""
    start, end = load
    return (
        f"1-minute load average {start:.1f} before the first run, {end:.1f} at the end (the "
        "runs' own 2 threads included)."
    )


def report(result: dict) -> str:
    r = result["rates"]
    rows = [
        f"| {name} | {' / '.join(f'{x:,.0f}' for x in r[name])} | "
        f"{statistics.median(r[name]):,.0f} |"
        for name in r
    ]
    return "\n".join(
        [
            BEGIN,
            "## Training speed against the code before a change"
            + (f", {result['cpu']}" if result.get("cpu") else ""),
            "",
            f"{result['date']}, {result['machine']}. {_load(result['load'])}",
            "",
            f"    {result['command']}",
            "",
            f"`{result['config']}`, short runs alternating between the two source trees "
            "(benchmarks/training_speed.py says how the rate is read). " + result["note"],
            "",
            "| tree | target tok/s per round | median |",
            "|---|---|---:|",
            *rows,
            "",
            f"This tree against the baseline: **{result['ratio']:.2f}x** (median of the per-round "
            "ratios).",
            END,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="another heedful src/ tree")
    parser.add_argument(
        "--config", type=Path, default=ROOT / "configs/multi30k/transformer-tiny.yaml"
    )
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--skip", type=int, default=40, help="steps left out of the rate")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--note", default="", help="what the baseline is, for the report")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for this tree's runs only (one the baseline may not know)",
    )
    parser.add_argument("--report", action="store_true", help="only rewrite docs/benchmarks.md")
    parser.add_argument("--cpu", help="a name for this CPU: its own result file and section")
    args = parser.parse_args()
    path, begin, end = variant(RESULT, BEGIN, END, args.cpu)
    if args.report:
        result = json.loads(path.read_text())
    else:
        if args.baseline is None:
            parser.error("--baseline is needed to measure")
        result = run(args)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
    section = report(result).replace(BEGIN, begin).replace(END, end)
    write_section(REPORT, begin, end, section)
    print(f"wrote {path} and its section of {REPORT}")


if __name__ == "__main__":
    main()
