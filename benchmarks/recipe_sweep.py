"""The Multi30k recipe sweep (issue 16): one point = one 30-minute run of a config with some
settings changed, scored three ways and written to that config's sweep table in docs/benchmarks.md.

    python benchmarks/recipe_sweep.py --name linear --set train.schedule=linear
    python benchmarks/recipe_sweep.py --name base --run-dir runs/bench/transformer  # score only
    python benchmarks/recipe_sweep.py --name rnn-base --config configs/multi30k/rnn-bahdanau.yaml
    python benchmarks/recipe_sweep.py --report                   # only rewrite the tables

A point's checkpoints are scored with beam 5 on the full validation set (1,014 sentences) and
on test2016 (1,000): the last checkpoint, the best by training's own validation (greedy, 500
sentences), and the average of the last two kept (`heedful average`). The winner is chosen by
validation BLEU, and test2016 is reported beside it, so the test set does not pick the recipe.
Each point needs the machine to itself (the budget is wall-clock time); the load average is
sampled while it trains and printed with the row.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from multi30k_quality import LoadSampler  # benchmarks/multi30k_quality.py
from report import machine, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "multi30k"
RESULTS = ROOT / "benchmarks" / "results"
REPORT = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- recipe-sweep:begin -->", "<!-- recipe-sweep:end -->"
SETS = ("val", "test2016")  # file stems under CORPUS


def train(config: Path, run_dir: Path, budget: float, settings: list[str], threads: int | None):
    """`heedful train` with the budget and the point's settings; (command, wall s, load)."""
    command = [sys.executable, "-m", "heedful", "train", str(config), "--run-dir", str(run_dir),
               "--force", "--no-progress", "--set", f"train.max_time={budget}"]  # fmt: skip
    for setting in settings:
        command += ["--set", setting]
    if threads is not None:
        command += ["--threads", str(threads)]
    start = time.perf_counter()
    with LoadSampler() as load:
        subprocess.run(command, cwd=ROOT, check=True)
    shown = " ".join(["heedful", *command[3:]]).replace(f"{ROOT}/", "")
    return shown, round(time.perf_counter() - start, 1), load.summary()


def checkpoints(run_dir: Path) -> dict[str, Path]:
    """last, best, and the average of the last two kept checkpoints (made here if missing)."""
    kept = sorted((run_dir / "checkpoints").glob("step-*"))
    found = {"last": (run_dir / "latest").resolve(), "best": (run_dir / "best").resolve()}
    if len(kept) >= 2:
        average = run_dir / f"average-{kept[-2].name}-{kept[-1].name}"
        if not average.exists():
            subprocess.run([sys.executable, "-m", "heedful", "average", str(kept[-2]),
                            str(kept[-1]), "-o", str(average)], cwd=ROOT, check=True)  # fmt: skip
        found["average of last 2"] = average
    return found


def score(model_dir: Path, beam: int) -> dict:
    """Beam search on each set: BLEU, and test2016's decoding rate (loading excluded)."""
    from heedful.evaluation import corpus_scores
    from heedful.inference.translator import Translator

    translator = Translator.load(model_dir)
    result = {"checkpoint": model_dir.name}
    for name in SETS:
        sources = (CORPUS / f"{name}.en").read_text(encoding="utf-8").splitlines()
        references = (CORPUS / f"{name}.de").read_text(encoding="utf-8").splitlines()
        start = time.perf_counter()
        outputs = [t.text for t in translator.translate(sources, num_beams=beam, batch_size=64)]
        seconds = time.perf_counter() - start
        scores = corpus_scores(outputs, references)
        result[name] = round(scores.bleu, 2)
        if name == "test2016":
            result["sentences_per_second"] = round(len(sources) / seconds, 1)
            result["signature"] = scores.signatures["bleu"]
    return result


def steps_of(run_dir: Path) -> int:
    """The final checkpoint's step (metrics.jsonl logs only every train.log_every steps)."""
    return int((run_dir / "latest").resolve().name.removeprefix("step-"))


def _settings(point: dict) -> str:
    text = ", ".join(f"`{s}`" for s in point["settings"]) or "(the config as is)"
    return f"{text}; {point['note']}" if point.get("note") else text


def _config_of(point: dict) -> str:
    """The point's config file; the first points, written before RNN rows, were all Transformer."""
    return point.get("config", "configs/multi30k/transformer.yaml")


def _cpu(point: dict) -> str:
    """The CPU's name from the machine line ("AMD EPYC, 2 cores, ..." -> "AMD EPYC")."""
    return point["machine"].split(",")[0].replace("(R)", "")


def _table(config: str, points: list[dict]) -> list[str]:
    """One config's rows, its machine line and its commands."""
    lines = [
        f"### `{config}`",
        "",
        "| point | settings | steps | load (mean/max) | val: last / best / avg "
        "| test2016: last / best / avg | sent/s | CPU | date |",
        "|---|---|---:|---|---|---|---:|---|---|",
    ]
    for p in points:
        by = {s["kind"]: s for s in p["scores"]}
        cells = []
        for name in SETS:
            cells.append(" / ".join(
                f"{by[k][name]:.2f}" if k in by else "-"
                for k in ("last", "best", "average of last 2")
            ))  # fmt: skip
        load = p.get("load") or {}
        lines.append(
            f"| {p['name']} | {_settings(p)} | {p['steps']} "
            f"| {load.get('mean', '-')}/{load.get('max', '-')} | {cells[0]} | {cells[1]} "
            f"| {by['last']['sentences_per_second']} | {_cpu(p)} | {p['date']} |"
        )
    machines = sorted({p["machine"] for p in points})
    lines += ["", f"Machine: {'; '.join(machines)}. Signature: "
              f"`{points[-1]['scores'][0]['signature']}`.", "", "Commands:", ""]  # fmt: skip
    lines += [f"- {q['name']}: `{q['command']}`" for q in points]
    return [*lines, ""]


def report() -> str:
    points = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("sweep-*.json"))]
    points.sort(key=lambda p: p["date"] + p["name"])
    lines = [
        BEGIN,
        "## The Multi30k recipe sweeps (issue 16)",
        "",
        "Each row: the table's config with the row's settings, trained for the row's budget; "
        "beam 5, sacreBLEU detokenized and case-sensitive on the full validation set (1,014 "
        "sentences: what picks the recipe) and on test2016 (1,000: reported beside it). last = "
        "the final checkpoint; best = best by training's greedy validation; avg = the average "
        "of the last two kept checkpoints. sent/s: test2016 beam-5 decoding of the 'last' model "
        "(batch 64, loading excluded). Compare steps and sent/s only between rows of one CPU: "
        "the same code runs at different speeds on different machines of our kind.",
        "",
    ]
    for config in sorted({_config_of(p) for p in points}, reverse=True):  # transformer first
        lines += _table(config, [p for p in points if _config_of(p) == config])
    return "\n".join([*lines[:-1], END])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--name", help="the point's name (its results file and row)")
    parser.add_argument(
        "--set", dest="settings", action="append", default=[], help="as heedful train --set"
    )
    parser.add_argument("--config", type=Path, default=ROOT / "configs/multi30k/transformer.yaml")
    parser.add_argument("--budget", type=float, default=1800.0, help="training seconds")
    parser.add_argument("--threads", type=int, help="heedful train --threads")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--run-dir", type=Path, help="score this finished run instead of training")
    parser.add_argument("--note", default="", help="what else differs (code, how it ran)")
    parser.add_argument("--report", action="store_true", help="only rebuild docs/benchmarks.md")
    args = parser.parse_args()
    if not args.report:
        if not args.name:
            parser.error("--name is required to run or score a point")
        run_dir = args.run_dir or ROOT / "runs" / "sweep" / args.name
        command, wall, load = "(scored from an earlier run)", None, None
        if args.run_dir is None:
            command, wall, load = train(args.config, run_dir, args.budget, args.settings,
                                        args.threads)  # fmt: skip
        scores = []
        for kind, model_dir in checkpoints(run_dir).items():
            scores.append({"kind": kind, **score(model_dir, args.beam)})
            print(kind, scores[-1], flush=True)
        # as given (configs/ is a link to src/heedful/recipes/: not resolved, the name users run)
        config = Path(os.path.abspath(args.config)).relative_to(ROOT).as_posix()
        result = {"name": args.name, "config": config, "settings": args.settings,
                  "note": args.note, "date": datetime.date.today().isoformat(),
                  "machine": machine(), "command": command, "train_wall_seconds": wall,
                  "load": load, "steps": steps_of(run_dir), "budget_seconds": args.budget,
                  "scores": scores}  # fmt: skip
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"sweep-{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    write_section(REPORT, BEGIN, END, report())


if __name__ == "__main__":
    main()
