"""Quality benchmark: each Multi30k config trained for a fixed wall-clock budget on this machine,
then scored on test2016 with beam search (detokenized, case-sensitive sacreBLEU).

    python benchmarks/multi30k_quality.py                       # all configs, 30 min each
    python benchmarks/multi30k_quality.py --configs transformer --budget 600
    python benchmarks/multi30k_quality.py --configs transformer --seeds 2 3 --steps 1930 --add
    python benchmarks/multi30k_quality.py --configs transformer --set train.bf16=false
    python benchmarks/multi30k_quality.py --report               # only rewrite docs/benchmarks.md

Each config's result goes to benchmarks/results/multi30k-<name>.json; the report in
docs/benchmarks.md is rebuilt from every result file present, so configs can be run one at a
time. A run with a time budget needs the machine to itself; with --steps (the count an idle
run reached in the budget) several seeds can share the cores, and --add keeps the seeds
already in the result.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from report import machine, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "multi30k"
RESULTS = ROOT / "benchmarks" / "results"
REPORT = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- multi30k-quality:begin -->", "<!-- multi30k-quality:end -->"


def run_config(
    name: str, budget: Budget, beam: int, run_root: Path, seed: int | None, sets: list[str]
) -> dict:
    """Train config `name` (with `seed`, else the config's; `sets`: more --set KEY=VALUE)
    within `budget` into run_root/name[-seed<N>], then score it."""
    config = ROOT / "configs" / "multi30k" / f"{name}.yaml"
    run_dir = run_root / (name if seed is None else f"{name}-seed{seed}")
    command = [
        sys.executable,
        "-m",
        "heedful",
        "train",
        str(config),
        "--run-dir",
        str(run_dir),
        "--force",
        "--no-progress",
        *budget.overrides(),
        *([] if seed is None else ["--set", f"train.seed={seed}"]),
        *(word for setting in sets for word in ("--set", setting)),
    ]
    start = time.perf_counter()
    with LoadSampler() as load:
        subprocess.run(command, cwd=ROOT, check=True)
    train_wall = time.perf_counter() - start

    from heedful.evaluation import bleu_by_length, corpus_scores, tokenized_bleu
    from heedful.inference.translator import Translator

    translator = Translator.load(run_dir / "best")
    sources = (CORPUS / "test2016.en").read_text(encoding="utf-8").splitlines()
    references = (CORPUS / "test2016.de").read_text(encoding="utf-8").splitlines()
    start = time.perf_counter()
    outputs = [t.text for t in translator.translate(sources, num_beams=beam, batch_size=64)]
    translate_seconds = time.perf_counter() - start
    scores = corpus_scores(outputs, references)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_records = [m for m in metrics if "train_loss" in m]
    return {
        "config": name,
        "seed": seed,
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "command": " ".join(["python", "-m", "heedful", *command[3:]]).replace(f"{ROOT}/", ""),
        "budget_seconds": budget.seconds,
        "budget_steps": budget.steps,
        "train_wall_seconds": round(train_wall, 1),
        "load": load.summary(),
        "steps": max((m.get("step", 0) for m in metrics), default=0),  # the last is validated
        "epochs": train_records[-1]["epoch"] if train_records else 0,
        "target_tokens_per_second": round(train_records[-1]["tokens_per_s"])
        if train_records
        else 0,
        "precision": precision(run_dir),
        "best_checkpoint": (run_dir / "best").resolve().name,
        "beam": beam,
        "bleu": round(scores.bleu, 2),
        "chrf": round(scores.chrf, 2),
        "ter": round(scores.ter, 2),
        "signature": scores.signatures["bleu"],
        "tokenized_bleu": tokenized_bleu(outputs, references, "de").record(),  # as papers report
        "translate_seconds": round(translate_seconds, 1),
        "by_length": [
            {
                "bucket": b.label,
                "sentences": b.sentences,
                "bleu": None if b.bleu is None else round(b.bleu, 2),
            }
            for b in bleu_by_length(sources, outputs, references)
        ],
    }


def precision(run_dir: Path) -> str:
    """What the run trained in, as its log says (train.bf16, or a GPU's default)."""
    log = (run_dir / "train.log").read_text(encoding="utf-8")
    return "bfloat16 autocast" if "precision: bfloat16 autocast" in log else "float32"


@dataclass(frozen=True)
class Budget:
    """Seconds of wall-clock time (validation included), or, given `steps`, that many steps
    with the schedule over them and no time limit: runs that share the cores (several seeds
    at once) then train what an idle run would, `steps` being what the idle machine fits in
    the time (an earlier run's count)."""

    seconds: float | None = 1800.0
    steps: int | None = None

    def overrides(self) -> list[str]:
        if self.steps is not None:
            return ["--set", f"train.max_steps={self.steps}", "--set", "train.max_time=null"]
        return ["--set", f"train.max_time={self.seconds}"]

    def label(self) -> str:
        return f"{self.steps:,} steps" if self.steps is not None else f"{self.seconds / 60:.0f} min"


def with_seeds(runs: list[dict]) -> dict:
    """One config's result: the fields of the run with the median BLEU, and every run whole
    under "seeds"."""
    runs = [{k: v for k, v in r.items() if k != "seeds"} for r in runs]
    median = sorted(runs, key=lambda r: r["bleu"])[(len(runs) - 1) // 2]
    return {**median, "seeds": runs}


def budget_of(result: dict) -> Budget:
    return Budget(result.get("budget_seconds"), result.get("budget_steps"))


def earlier_runs(name: str, seeds: list[int | None]) -> list[dict]:
    """The runs of the config's result file with other seeds than these (--add), a result
    from before --seeds being its one run."""
    path = RESULTS / f"multi30k-{name}.json"
    if not path.exists():
        return []
    result = json.loads(path.read_text())
    return [r for r in result.get("seeds", [result]) if r.get("seed") not in seeds]


def same_precision(runs: list[dict], earlier: list[dict]) -> list[dict]:
    """The earlier runs that trained in the new runs' precision (float32 before it was
    recorded): a median over seeds compares one recipe."""
    wanted = {r["precision"] for r in runs}
    return [r for r in earlier if r.get("precision", "float32") in wanted]


TARGETS = {"transformer": 40.0, "transformer-tiny": 40.0, "rnn-bahdanau": 26.0}  # issue 30; issue 3


class LoadSampler:
    """The 1-minute load average every 30 s while a run trains: the budget is wall-clock time,
    so a run on shared cores takes fewer steps, and the report must say how idle it was (a
    training run's own 2 threads make a load of about 2)."""

    def __init__(self, every: float = 30.0):
        self.every, self.samples, self._stop = every, [os.getloadavg()[0]], threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        return {
            "mean": round(sum(self.samples) / len(self.samples), 2),
            "max": round(max(self.samples), 2),
            "samples": len(self.samples),
        }


def _load_note(r: dict) -> str:
    load = r.get("load")
    if load is None:  # runs from before the sampler: the transformer's shared the cores in parts
        return "load not recorded"
    return f"1-minute load average during training: mean {load['mean']}, max {load['max']}"


def report() -> str:
    results = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("multi30k-*.json"))]
    lines = [BEGIN, "## Multi30k quality in a fixed wall-clock budget", ""]
    if not results:
        return "\n".join(
            lines + ["No results yet: run `python benchmarks/multi30k_quality.py`.", END]
        )
    lines += [
        "Each config in `configs/multi30k/` trained for a fixed wall-clock budget (validation "
        "included), or for as many steps as an idle run of it fitted in that budget (runs "
        "sharing the cores, with `--steps`), best checkpoint by validation BLEU, scored on "
        "`test2016` (1,000 sentences) with beam search, detokenized, case-sensitive sacreBLEU. "
        "Several seeds: the table gives the median run, the list below it every run.",
        "",
        "| config | budget | steps | epochs | target tok/s | BLEU | chrF | TER | target | date |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in results:
        target = TARGETS.get(r["config"])
        verdict = (
            "-" if target is None else f">= {target}: {'met' if r['bleu'] >= target else 'NOT met'}"
        )
        bf16 = " (bfloat16)" if r.get("precision") == "bfloat16 autocast" else ""
        lines.append(
            f"| {r['config']}{bf16} | {budget_of(r).label()} | {r['steps']} | {r['epochs']} "
            f"| {r['target_tokens_per_second']} | {r['bleu']} | {r['chrf']} | {r['ter']} "
            f"| {verdict} | {r['date']} |"
        )
    lines += seed_lines(results)
    lines += ["", "BLEU per source length (whitespace words of the English source):", ""]
    buckets = [b["bucket"] for b in results[0]["by_length"]]
    lines.append("| config | " + " | ".join(f"{b} words" for b in buckets) + " |")
    lines.append("| --- |" + " ---: |" * len(buckets))
    for r in results:
        cells = [
            f"{b['bleu']} ({b['sentences']})" if b["bleu"] is not None else "-"
            for b in r["by_length"]
        ]
        lines.append(f"| {r['config']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "(sentences per bucket in parentheses; 2 sentences in 31+ are too few to read)",
        "",
        "![BLEU by source length: the context vector bottleneck of rnn-none beside attention]"
        "(img/bottleneck.png)",
        "",
        "A run's own two threads make a load of about 2; more means the cores were shared and "
        "the run took fewer steps than this machine gives idle.",
        "",
        "Signatures, machines and commands:",
        "",
    ]
    for r in results:
        lines.append(
            f"- {r['config']}: `{r['signature']}`, beam {r['beam']}; {r['machine']}; "
            f"{_load_note(r)}; `{r['command']}`"
        )
    return "\n".join(lines + [END])


def seed_lines(results: list[dict]) -> list[str]:
    """Every run of the configs trained with several seeds (the table gives the median's)."""
    lines = []
    for r in (r for r in results if len(r.get("seeds", [])) > 1):
        runs = "; ".join(f"seed {_seed(s)}: {s['bleu']} ({_run_note(s)})" for s in r["seeds"])
        lines.append(f"- {r['config']}, median of {len(r['seeds'])} seeds: {runs}")
    return ["", *lines] if lines else []


def _seed(run: dict) -> str:
    return "of the config" if run.get("seed") is None else str(run["seed"])


def _run_note(run: dict) -> str:
    note = f"{run['steps']:,} steps, {run['train_wall_seconds'] / 60:.0f} min"
    note += f", {run.get('precision', 'float32')}"
    if (tokenized := run.get("tokenized_bleu")) is not None:
        note += f"; tokenized {tokenized['cased']:.2f} cased, {tokenized['lowercased']:.2f} lc"
    return note


def plot_buckets(path: Path = ROOT / "docs" / "img" / "bottleneck.png") -> Path | None:
    """Grouped bars: test BLEU per source-length bucket, one colour per config."""
    results = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("multi30k-*.json"))]
    if not results:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets = [b["bucket"] for b in results[0]["by_length"]]
    width = 0.8 / len(results)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    for i, r in enumerate(results):
        values = [b["bleu"] or 0.0 for b in r["by_length"]]
        xs = [j + (i - (len(results) - 1) / 2) * width for j in range(len(buckets))]
        ax.bar(xs, values, width, label=f"{r['config']} ({r['bleu']} overall)")
    counts = [b["sentences"] for b in results[0]["by_length"]]
    ax.set_xticks(
        range(len(buckets)), [f"{b} words\n({n} sentences)" for b, n in zip(buckets, counts)]
    )
    ax.set_ylabel("test2016 BLEU")
    ax.set_title("BLEU by source length: Multi30k En→De, 30 min on 2 CPU cores")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def write_report() -> None:
    write_section(REPORT, BEGIN, END, report())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--configs", nargs="+", default=["transformer", "rnn-bahdanau", "rnn-none"])
    parser.add_argument("--budget", type=float, default=1800.0, help="training seconds per config")
    parser.add_argument("--steps", type=int, help="train this many steps, with no time limit")
    parser.add_argument("--add", action="store_true", help="keep the result's other seeds")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument(
        "--seeds", nargs="+", type=int, default=[None], help="train once per seed [the config's]"
    )
    parser.add_argument("--run-root", type=Path, default=ROOT / "runs" / "bench")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config override"
    )
    parser.add_argument("--report", action="store_true", help="only rebuild docs/benchmarks.md")
    args = parser.parse_args()
    if not args.report:
        if not CORPUS.is_dir():
            sys.exit(f"Multi30k not found at {CORPUS} (see ../shared/corpora/README.md)")
        RESULTS.mkdir(parents=True, exist_ok=True)
        for name in args.configs:
            budget = Budget(args.budget, args.steps)
            runs = [
                run_config(name, budget, args.beam, args.run_root, s, args.set) for s in args.seeds
            ]
            earlier = same_precision(runs, earlier_runs(name, args.seeds)) if args.add else []
            result = with_seeds(runs + earlier)
            (RESULTS / f"multi30k-{name}.json").write_text(json.dumps(result, indent=2) + "\n")
            print(json.dumps({k: result[k] for k in ("config", "steps", "bleu", "signature")}))
            write_report()
    write_report()
    plot_buckets()


if __name__ == "__main__":
    main()
