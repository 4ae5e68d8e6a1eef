"""Beam-5 BLEU on Multi30k val and test2016 at several GNMT length penalties (alpha), for
trained models; no retraining. Writes benchmarks/results/length-penalty.json and its section
of docs/benchmarks.md.

    python benchmarks/length_penalty.py runs/sweep/linear/latest runs/sweep/linear-sliced/latest
    python benchmarks/length_penalty.py --name transformer-tiny \\
        runs/bench/transformer-tiny-seed1/latest

--name keeps a recipe's result beside the others (length-penalty-NAME.json and its own section).

The default (generation.length_penalty 1.0) is chosen on val; test2016 is reported beside it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
from pathlib import Path

from report import machine, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "multi30k"
RESULTS = ROOT / "benchmarks" / "results"
REPORT = ROOT / "docs" / "benchmarks.md"
SETS = ("val", "test2016")


def scores(model_dir: Path, alphas: list[float], beam: int) -> dict[str, dict[str, float]]:
    """{set: {alpha: BLEU}} for one model."""
    from heedful.evaluation import corpus_scores
    from heedful.inference.translator import Translator

    translator = Translator.load(model_dir)
    found: dict[str, dict[str, float]] = {}
    for name in SETS:
        sources = (CORPUS / f"{name}.en").read_text(encoding="utf-8").splitlines()
        references = (CORPUS / f"{name}.de").read_text(encoding="utf-8").splitlines()
        found[name] = {}
        for alpha in alphas:
            outputs = translator.translate(sources, num_beams=beam, length_penalty=alpha)
            bleu = corpus_scores([t.text for t in outputs], references).bleu
            found[name][str(alpha)] = round(bleu, 2)
            print(model_dir, name, alpha, found[name][str(alpha)], flush=True)
    return found


def tag(name: str | None) -> str:
    """The result file's stem and the section's marker: one per --name."""
    return "length-penalty" + (f"-{name}" if name else "")


def markers(name: str | None) -> tuple[str, str]:
    return f"<!-- {tag(name)}:begin -->", f"<!-- {tag(name)}:end -->"


def section(result: dict) -> str:
    models = list(result["models"])
    begin, end = markers(result.get("name"))
    title = f": {result['name']}" if result.get("name") else " (issue 16)"
    head = "| alpha | " + " | ".join(f"{s}: {', '.join(models)}" for s in SETS) + " |"
    rows = [head, "|---:|" + "---|" * len(SETS)]
    for alpha in result["alphas"]:
        cells = [", ".join(str(result["models"][m][s][str(alpha)]) for m in models) for s in SETS]
        rows.append(f"| {alpha} | " + " | ".join(cells) + " |")
    return "\n".join([
        begin,
        f"### Length penalty at beam 5{title}",
        "",
        f"Beam {result['beam']}, sacreBLEU (detokenized, case-sensitive), full val and test2016;"
        " ranking by log P(Y) / ((5 + |Y|) / 6) ** alpha. Machine: "
        f"{result['machine']}; {result['date']}; `{result['command']}`.",
        "",
        *rows,
        end,
    ])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path, help="trained model directories")
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.6, 1.0, 1.5, 2.0])
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--name", help="a result and section of its own, e.g. the recipe's name")
    args = parser.parse_args()
    result = {
        "name": args.name,
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "command": shlex.join(["python", "benchmarks/length_penalty.py", *sys.argv[1:]]),
        "beam": args.beam,
        "alphas": args.alphas,
        "models": {str(m): scores(m, args.alphas, args.beam) for m in args.models},
    }
    (RESULTS / f"{tag(args.name)}.json").write_text(
        json.dumps(result, indent=2) + "\n", encoding="utf-8"
    )
    write_section(REPORT, *markers(args.name), section(result))


if __name__ == "__main__":
    main()
