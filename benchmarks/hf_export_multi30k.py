"""Export round trip on Multi30k: a heedful Transformer exported to Hugging Face Marian
(`heedful export --format huggingface`) must write our greedy outputs on test2016.

    python benchmarks/hf_export_multi30k.py                  # train a post-norm model, 900 s
    python benchmarks/hf_export_multi30k.py --budget 1200
    python benchmarks/hf_export_multi30k.py --model DIR      # a post-norm model you have
    python benchmarks/hf_export_multi30k.py --report         # only rewrite docs/benchmarks.md

Marian's layers are post-norm, so the model is configs/multi30k/transformer.yaml with
model.norm=post (and a lower peak learning rate, which post-norm needs, reached in 200 steps).
Our greedy search (Translator.search) and transformers' greedy generate() on the export each
translate the 1,000 sentences of test2016.en under our output limit (ratio · source length +
offset; sentences of one limit batched together), sources tokenized as the export's tokenizer
does (no </s>: our models read none). An output counts as identical when the
token ids are, </s> included. The result goes to benchmarks/results/hf-export.json and its
section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from report import machine, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "multi30k"
RESULT = ROOT / "benchmarks" / "results" / "hf-export.json"
REPORT = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- hf-export:begin -->", "<!-- hf-export:end -->"
POST_NORM = [
    "--set",
    "model.norm=post",
    "--set",
    "train.lr=0.0007",
    "--set",
    "train.warmup_steps=200",
]


def train(run_dir: Path, budget: float) -> tuple[Path, list[str]]:
    config = ROOT / "configs" / "multi30k" / "transformer.yaml"
    command = [sys.executable, "-m", "heedful", "train", str(config), "--run-dir", str(run_dir)]
    command += ["--force", "--no-progress", *POST_NORM, "--set", f"train.max_time={budget}"]
    subprocess.run(command, cwd=ROOT, check=True)
    best = run_dir / "best"  # the best validated checkpoint; none if the budget ended first
    return (best if best.exists() else run_dir / "latest"), command


def ours(model_dir: Path, sources: list[str]) -> tuple[list[list[int]], list[int]]:
    """Our greedy outputs (ids, </s> included when finished) and each sentence's limit."""
    import torch

    from heedful.data.tokenizers import EOS_ID
    from heedful.inference.translator import Translator

    translator = Translator.load(model_dir)
    outputs, limits = [], []
    for text in sources:
        ids = translator.src_tokenizer.encode(text)
        [[hyp]] = translator.search(torch.tensor([ids]), 1, 1)
        outputs.append(hyp.produced(EOS_ID))
        limits.append(translator.generation.max_output_length(len(ids)))
    return outputs, limits


def theirs(export: Path, sources: list[str], limits: list[int]) -> list[list[int]]:
    """transformers' greedy generate() on the export, batched by output limit."""
    import torch
    import transformers as hf

    tokenizer = hf.AutoTokenizer.from_pretrained(export)
    model = hf.AutoModelForSeq2SeqLM.from_pretrained(export).eval()
    eos, by_limit = model.config.eos_token_id, defaultdict(list)
    for i, limit in enumerate(limits):
        by_limit[limit].append(i)
    out: list[list[int]] = [[] for _ in sources]
    with torch.no_grad():
        for limit, rows in sorted(by_limit.items()):
            for start in range(0, len(rows), 64):
                chunk = rows[start : start + 64]
                batch = tokenizer([sources[i] for i in chunk], add_special_tokens=False,
                                  padding=True, return_tensors="pt")  # fmt: skip
                generated = model.generate(**batch, num_beams=1, do_sample=False,
                                           max_new_tokens=limit)  # fmt: skip
                for i, row in zip(chunk, generated[:, 1:].tolist()):
                    out[i] = row[: row.index(eos) + 1] if eos in row else row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="a post-norm heedful Transformer")
    parser.add_argument("--budget", type=float, default=900.0, help="training seconds")
    parser.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "work" / "hf-export")
    parser.add_argument("--report", action="store_true", help="only rewrite docs/benchmarks.md")
    args = parser.parse_args()
    if args.report:
        write_section(REPORT, BEGIN, END, section(json.loads(RESULT.read_text(encoding="utf-8"))))
        return
    command = [sys.executable, *sys.argv]
    model_dir = args.model
    if model_dir is None:
        model_dir, _ = train(args.work / "run", args.budget)
    from heedful.hf.export import export_huggingface

    export = export_huggingface(model_dir, args.work / "marian")
    sources = (CORPUS / "test2016.en").read_text(encoding="utf-8").splitlines()
    start = time.perf_counter()
    expected, limits = ours(model_dir, sources)
    ours_seconds = time.perf_counter() - start
    start = time.perf_counter()
    got = theirs(export, sources, limits)
    theirs_seconds = time.perf_counter() - start
    same = sum(a == b for a, b in zip(expected, got))
    result = {
        "date": datetime.date.today().isoformat(), "machine": machine(),
        "command": " ".join(Path(c).name if i == 0 else c for i, c in enumerate(command)),
        "model": str(model_dir.relative_to(ROOT) if model_dir.is_relative_to(ROOT) else model_dir),
        "sentences": len(sources), "identical": same,
        "identical_percent": round(100 * same / len(sources), 2),
        "finished": sum(bool(e) and e[-1] == 2 for e in expected),
        "ours_seconds": round(ours_seconds, 1), "transformers_seconds": round(theirs_seconds, 1),
        "differing": [i for i, (a, b) in enumerate(zip(expected, got)) if a != b][:20],
        "note": "" if args.model else f" (trained here for {args.budget:.0f} s)",
    }  # fmt: skip
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    write_section(REPORT, BEGIN, END, section(result))
    print(json.dumps(result, indent=2))


def section(r: dict) -> str:
    identical = f"{r['identical']} ({r['identical_percent']}%)"
    times = f"{r['ours_seconds']} s | {r['transformers_seconds']} s"
    return f"""{BEGIN}
## Export to Hugging Face Marian: the same greedy outputs

`heedful export --format huggingface` (heedful.hf.export) on a post-norm Multi30k Transformer;
transformers' greedy `generate()` on the export against our greedy search, test2016 (1,000
sentences), token ids compared, </s> included:

| sentences | identical | finished with </s> | ours, 1 at a time | transformers, ≤ 64 at a time |
|---:|---:|---:|---:|---:|
| {r["sentences"]} | {identical} | {r["finished"]} | {times} |

{r["machine"]}, {r["date"]}; model `{r["model"]}`{r.get("note", "")}.
Command: `{r["command"]}`.
{END}"""


if __name__ == "__main__":
    main()
