"""Luong et al. 2015's local attention next to global attention on Multi30k en→de.

    python benchmarks/local_attention.py                     # 1,200 steps each (the default)
    python benchmarks/local_attention.py --steps 300         # a quick look
    python benchmarks/local_attention.py --report            # only rewrite docs/benchmarks.md

One recipe, `configs/multi30k/rnn-luong.yaml` (a GRU encoder-decoder with the 'general' score
and input feeding), trained three times with only `model.decoder.attention` changed: `luong-general`
(global: every source position), `luong-local-m` (a window of D = 10 each side of p_t = t) and
`luong-local-p` (the same window around a predicted p_t, weighted by a Gaussian of σ = D/2).
The paper's §3.2 and Table 1 are the reference for these three.

Each run trains for the same number of **steps** (not the same wall-clock time), so the BLEU
columns compare the attentions at equal training, whatever else the machine was doing; the
tokens/s and decoding columns are wall-clock and only mean something on an idle machine (the
report says whether it was). Test2016 is translated with beam 5 and scored with sacreBLEU,
detokenized, case-sensitive. Results: benchmarks/results/local-attention.json.
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

from report import machine, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "multi30k"
RESULT = ROOT / "benchmarks" / "results" / "local-attention.json"
REPORT = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- local-attention:begin -->", "<!-- local-attention:end -->"
ATTENTIONS = ("luong-general", "luong-local-m", "luong-local-p")


def run(attention: str, steps: int, window: int, beam: int, run_root: Path) -> dict:
    run_dir = run_root / attention
    settings = [
        f"model.decoder.attention={attention}",
        f"model.decoder.local_window={window}",
        f"train.max_steps={steps}",
        "train.max_time=1000000",  # the step count is the budget
        f"train.eval_every={max(steps // 3, 1)}",
    ]
    command = [sys.executable, "-m", "heedful", "train", "configs/multi30k/rnn-luong.yaml",
               "--run-dir", str(run_dir), "--force", "--no-progress"]  # fmt: skip
    for setting in settings:
        command += ["--set", setting]
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True)
    train_seconds = time.perf_counter() - start

    from heedful.evaluation import corpus_scores
    from heedful.inference.translator import Translator

    translator = Translator.load(run_dir / "best")
    sources = (CORPUS / "test2016.en").read_text(encoding="utf-8").splitlines()
    references = (CORPUS / "test2016.de").read_text(encoding="utf-8").splitlines()
    start = time.perf_counter()
    outputs = [t.text for t in translator.translate(sources, num_beams=beam, batch_size=64)]
    decode_seconds = time.perf_counter() - start
    scores = corpus_scores(outputs, references)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "train_loss" in r]
    return {
        "attention": attention,
        "window": window if "local" in attention else None,
        "steps": train[-1]["step"] if train else 0,
        "train_seconds": round(train_seconds, 1),
        "target_tokens_per_second": round(train[-1]["tokens_per_s"]) if train else 0,
        "bleu": round(scores.bleu, 2),
        "chrf": round(scores.chrf, 2),
        "signature": scores.signatures["bleu"],
        "beam": beam,
        "sentences_per_second": round(len(sources) / decode_seconds, 1),
        "command": " ".join(["python", "-m", "heedful", *command[3:]]).replace(f"{ROOT}/", ""),
    }


def report(result: dict) -> str:
    lines = [
        BEGIN,
        "## Local attention (Luong et al. 2015, §3.2) next to global, on Multi30k",
        "",
        f"{result['date']}, {result['machine']}. `python benchmarks/local_attention.py "
        f"--steps {result['steps']}`. {result['note']}",
        "",
        f"`configs/multi30k/rnn-luong.yaml` (GRU, 'general' score, input feeding) trained for "
        f"{result['steps']} steps with only `model.decoder.attention` changed; the best "
        f"checkpoint by validation BLEU translates test2016 with beam {result['runs'][0]['beam']} "
        "(sacreBLEU, detokenized, case-sensitive). Equal steps, so the BLEU column compares the "
        "attentions at equal training; tokens/s and sentences/s are wall-clock.",
        "",
        "| attention | window D | steps | BLEU | chrF | train tok/s | beam-5 sentences/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in result["runs"]:
        window = "-" if r["window"] is None else str(r["window"])
        lines.append(
            f"| {r['attention']} | {window} | {r['steps']} | {r['bleu']} | {r['chrf']} "
            f"| {r['target_tokens_per_second']} | {r['sentences_per_second']} |"
        )
    lines += [
        "",
        "One training run (seed 1) each, so a difference under about 1 BLEU is within what "
        "another seed moves. Luong et al. found local-p with the 'general' score the best of "
        "their attentions on WMT'14 En→De (their Table 4).",
        "",
        f"Signature: `{result['runs'][0]['signature']}`.",
        END,
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--window", type=int, default=10, help="D (the paper's 10)")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--attentions", nargs="+", default=list(ATTENTIONS), choices=ATTENTIONS)
    parser.add_argument("--run-root", type=Path, default=ROOT / "runs" / "bench-local")
    parser.add_argument("--note", default="", help="what else the machine was doing")
    parser.add_argument("--report", action="store_true", help="only rewrite docs/benchmarks.md")
    args = parser.parse_args()
    if not args.report:
        if not CORPUS.is_dir():
            sys.exit(f"Multi30k not found at {CORPUS} (see ../shared/corpora/README.md)")
        runs = []
        for attention in args.attentions:
            runs.append(run(attention, args.steps, args.window, args.beam, args.run_root))
            print(json.dumps(runs[-1]), flush=True)
        # runs of the other attentions at the same step count are kept, so each attention
        # can be (re-)run on its own
        if RESULT.exists():
            earlier = json.loads(RESULT.read_text(encoding="utf-8"))
            if earlier["steps"] == args.steps:
                done = {r["attention"] for r in runs}
                runs += [r for r in earlier["runs"] if r["attention"] not in done]
        runs.sort(key=lambda r: ATTENTIONS.index(r["attention"]))
        result = {
            "date": datetime.date.today().isoformat(),
            "machine": machine(),
            "steps": args.steps,
            "load_average": os.getloadavg(),
            "note": args.note,
            "runs": runs,
        }
        RESULT.parent.mkdir(parents=True, exist_ok=True)
        RESULT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    write_section(REPORT, BEGIN, END, report(json.loads(RESULT.read_text(encoding="utf-8"))))


if __name__ == "__main__":
    main()
