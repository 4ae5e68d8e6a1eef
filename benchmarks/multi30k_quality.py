"""Quality benchmark: each Multi30k config trained for a fixed wall-clock budget on this machine,
then scored on test2016 with beam search (detokenized, case-sensitive sacreBLEU).

    python benchmarks/multi30k_quality.py                       # all configs, 30 min each
    python benchmarks/multi30k_quality.py --configs transformer --budget 600
    python benchmarks/multi30k_quality.py --configs transformer --seeds 2 3 --steps 1930 --add
    python benchmarks/multi30k_quality.py --configs transformer --set train.bf16=false
    python benchmarks/multi30k_quality.py --report               # only rewrite docs/benchmarks.md
    python benchmarks/multi30k_quality.py --configs transformer-tiny --cpu amd-epyc-avx512 \
        --trained runs/tiny30-s1                                 # score a run made by hand

Each config's result goes to benchmarks/results/multi30k-<name>.json (with --cpu NAME,
multi30k-<name>-NAME.json and a section of its own); the report in docs/benchmarks.md is
rebuilt from every result file present, so configs can be run one at a time. A run with a time
budget needs the machine to itself; with --steps (the count an idle run reached in the budget)
several seeds can share the cores, and --add keeps the seeds already in the result.
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

from multi30k_report import BEGIN, END, RESULTS, plot_buckets, write_report
from report import machine, variant  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "multi30k"


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
    trained = {
        "seed": seed,
        "command": " ".join(["python", "-m", "heedful", *command[3:]]).replace(f"{ROOT}/", ""),
        "budget_seconds": budget.seconds,
        "budget_steps": budget.steps,
        "train_wall_seconds": round(time.perf_counter() - start, 1),
        "load": load.summary(),
    }
    return score(name, run_dir, beam, trained)


def trained_before(name: str, run_dir: Path, beam: int) -> dict:
    """Score a run `heedful train` made before, by hand, on this machine (--trained): its seed
    and time budget from its config.yaml, its training time as it measured it; the load while
    it trained was not sampled."""
    import yaml

    train = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))["train"]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trained = {
        "seed": train["seed"],
        "command": f"heedful train configs/multi30k/{name}.yaml, earlier, into {run_dir}",
        "budget_seconds": train["max_time"],
        "budget_steps": None if train["max_time"] else train["max_steps"],
        "train_wall_seconds": round(metrics[-1]["seconds"], 1),
        "load": None,
    }
    return score(name, run_dir, beam, trained)


def score(name: str, run_dir: Path, beam: int, trained: dict) -> dict:
    """The result of the run in `run_dir`: how it trained (`trained`, what run_config or
    trained_before knows) and test2016 translated from its best checkpoint."""
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
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        **trained,
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


def with_seeds(runs: list[dict]) -> dict:
    """One config's result: the fields of the run with the median BLEU, and every run whole
    under "seeds"."""
    runs = [{k: v for k, v in r.items() if k != "seeds"} for r in runs]
    median = sorted(runs, key=lambda r: r["bleu"])[(len(runs) - 1) // 2]
    return {**median, "seeds": runs}


def result_path(name: str, cpu: str | None) -> Path:
    return variant(RESULTS / f"multi30k-{name}.json", BEGIN, END, cpu)[0]


def earlier_runs(name: str, seeds: list[int | None], cpu: str | None) -> list[dict]:
    """The runs of the config's result file with other seeds than these (--add), a result
    from before --seeds being its one run."""
    path = result_path(name, cpu)
    if not path.exists():
        return []
    result = json.loads(path.read_text())
    return [r for r in result.get("seeds", [result]) if r.get("seed") not in seeds]


def same_precision(runs: list[dict], earlier: list[dict]) -> list[dict]:
    """The earlier runs that trained in the new runs' precision (float32 before it was
    recorded): a median over seeds compares one recipe."""
    wanted = {r["precision"] for r in runs}
    return [r for r in earlier if r.get("precision", "float32") in wanted]


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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--configs", nargs="+", default=["transformer", "rnn-bahdanau", "rnn-none"])
    parser.add_argument("--budget", type=float, default=1800.0, help="training seconds per config")
    parser.add_argument("--steps", type=int, help="train this many steps, with no time limit")
    parser.add_argument("--add", action="store_true", help="keep the result's other seeds")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--seeds", nargs="+", type=int, help="train once per seed [the config's]")
    parser.add_argument("--run-root", type=Path, default=ROOT / "runs" / "bench")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config override"
    )
    parser.add_argument(
        "--trained",
        type=Path,
        action="append",
        default=[],
        metavar="RUN_DIR",
        help="score a run `heedful train` made before on this machine, as one more seed",
    )
    parser.add_argument("--cpu", help="name another CPU's run: its own result file and section")
    parser.add_argument("--report", action="store_true", help="only rebuild docs/benchmarks.md")
    args = parser.parse_args()
    if args.trained and len(args.configs) != 1:
        sys.exit("--trained RUN_DIR scores runs of one config: give it with --configs")
    seeds = args.seeds or ([] if args.trained else [None])
    if not args.report:
        if not CORPUS.is_dir():
            sys.exit(f"Multi30k not found at {CORPUS} (see ../shared/corpora/README.md)")
        RESULTS.mkdir(parents=True, exist_ok=True)
        for name in args.configs:
            budget = Budget(args.budget, args.steps)
            runs = [run_config(name, budget, args.beam, args.run_root, s, args.set) for s in seeds]
            runs += [trained_before(name, run_dir, args.beam) for run_dir in args.trained]
            runs = [{**run, "cpu": args.cpu} for run in runs]
            kept = [r["seed"] for r in runs]
            earlier = earlier_runs(name, kept, args.cpu) if args.add else []
            result = with_seeds(runs + same_precision(runs, earlier))
            result_path(name, args.cpu).write_text(json.dumps(result, indent=2) + "\n")
            print(json.dumps({k: result[k] for k in ("config", "steps", "bleu", "signature")}))
            write_report(args.cpu)
    write_report(args.cpu)
    plot_buckets()


if __name__ == "__main__":
    main()
