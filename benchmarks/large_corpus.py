"""Large corpora: `heedful prepare` and training from memory-mapped shards, on 5 million pairs.

    python benchmarks/large_corpus.py            # about 25 minutes on 2 cores; idle machine

The corpus is synthetic but real text: each pair is one Multi30k training pair, or (half of
them) two joined, both drawn with a seeded generator, so lengths and vocabulary are Multi30k's
(../shared/corpora, the README there). Measured, each in its own process:
1. `prepare` with its SentencePiece model trained on a sample (data.tokenizer_sample), then,
   with that model given, with 1 and with 2 workers: seconds, tokens/s, peak RSS.
2. Peak RSS of `train` (configs/multi30k/transformer.yaml's model, 60 steps): Multi30k in memory
   against the 5M-pair prepared directory (target: within 1.5 GB).
3. Time to the first training step (`train` with max_steps=1, wall clock from the command's
   start, the prepared directory already up to date; target: under 10 s).
4. Training tokens/s, Multi30k in memory against the same corpus prepared (the same batches,
   so any difference is the data path), alternated, two rounds each.
Writes benchmarks/results/large-corpus.json and its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import subprocess
import sys
import time
from pathlib import Path

from report import machine, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
MULTI30K = ROOT.parent / "shared" / "corpora" / "multi30k"
WORK = ROOT / "benchmarks" / "work" / "large-corpus"
RESULT = ROOT / "benchmarks" / "results" / "large-corpus.json"
REPORT = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- large-corpus:begin -->", "<!-- large-corpus:end -->"
PAIRS = 5_000_000


def make_corpus(pairs: int) -> None:
    """WORK/train.{en,de}: `pairs` recombined Multi30k pairs (made once, then reused)."""
    src, tgt = (WORK / "train.en", WORK / "train.de")
    if src.exists() and sum(1 for _ in open(src, "rb")) == pairs:
        return
    WORK.joinpath("train.de").unlink(missing_ok=True)
    en = (MULTI30K / "train.en").read_text(encoding="utf-8").splitlines()
    de = (MULTI30K / "train.de").read_text(encoding="utf-8").splitlines()
    rng = random.Random(13)
    with open(src, "w", encoding="utf-8") as fs, open(tgt, "w", encoding="utf-8") as ft:
        for _ in range(pairs):
            i = rng.randrange(len(en))
            if rng.random() < 0.5:
                fs.write(en[i] + "\n")
                ft.write(de[i] + "\n")
            else:
                j = rng.randrange(len(en))
                fs.write(f"{en[i]} {en[j]}\n")
                ft.write(f"{de[i]} {de[j]}\n")


def config(name: str, train_src: Path, train_tgt: Path, **data: str) -> Path:
    """configs/multi30k/transformer.yaml with other training files and more `data` keys."""
    text = (ROOT / "configs" / "multi30k" / "transformer.yaml").read_text(encoding="utf-8")
    text = text.replace("../shared/corpora/multi30k/train.en", str(train_src))
    text = text.replace("../shared/corpora/multi30k/train.de", str(train_tgt))
    text = text.replace("../shared/corpora/multi30k/", f"{MULTI30K}/")
    keys = "".join(f"  {key}: {value}\n" for key, value in data.items())
    path = WORK / f"{name}.yaml"
    path.write_text(text.replace("data:\n", "data:\n" + keys, 1), encoding="utf-8")
    return path


def measured(*args: str) -> dict:
    """Run `heedful ARGS` in a process of its own: wall seconds and the peak RSS (MiB) of the
    largest process it ran (itself or a worker), as GNU time reports it."""
    start = time.perf_counter()
    command = ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "heedful", *args]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"heedful {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    peak_kib = int(done.stderr.strip().splitlines()[-1])
    return {
        "seconds": round(seconds, 2),
        "peak_rss_mib": round(peak_kib / 1024),
        "out": done.stdout,
    }


def manifest_tokens(directory: Path) -> int:
    split = json.loads((directory / "manifest.json").read_text())["splits"]["train"]
    return split["src_tokens"] + split["tgt_tokens"]


def tokens_per_s(run_dir: Path) -> float:
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if "tokens_per_s" in r]
    a, b = records[len(records) // 4], records[-1]  # the first quarter warms up
    return (b["tokens"] - a["tokens"]) / (b["seconds"] - a["seconds"])


def train_args(cfg: Path, run: str, steps: int) -> list[str]:
    return ["train", str(cfg), "--run-dir", str(WORK / run), "--force", "--no-progress",
            "--set", f"train.max_steps={steps}", "--set", "train.eval_every=100000",
            "--set", "train.log_every=5"]  # fmt: skip


def run(pairs: int) -> dict:
    WORK.mkdir(parents=True, exist_ok=True)
    make_corpus(pairs)
    big = config("big", WORK / "train.en", WORK / "train.de", prepared=str(WORK / "prep"))
    result: dict = {"pairs": pairs}
    first = measured("prepare", str(big), "--workers", "2", "--force", "--no-progress")
    result["prepare_with_tokenizer_training"] = {k: first[k] for k in ("seconds", "peak_rss_mib")}
    tokens = manifest_tokens(WORK / "prep")
    given = {
        f"{side}_tokenizer": str(WORK / "prep" / f"tokenizer.{side}") for side in ("src", "tgt")
    }
    encode_only = config("big-given", WORK / "train.en", WORK / "train.de",
                         prepared=str(WORK / "prep-given"), **given)  # fmt: skip
    for workers in (1, 2):
        m = measured("prepare", str(encode_only), "--workers", str(workers), "--force",
                     "--no-progress")  # fmt: skip
        result[f"prepare_{workers}_workers"] = {
            "seconds": m["seconds"], "peak_rss_mib": m["peak_rss_mib"],
            "tokens_per_s": round(tokens / m["seconds"]),
        }  # fmt: skip
    result["tokens"] = tokens
    small = config("small", MULTI30K / "train.en", MULTI30K / "train.de")
    small_prepared = config("small-prepared", MULTI30K / "train.en", MULTI30K / "train.de",
                            prepared=str(WORK / "prep-small"))  # fmt: skip
    measured("prepare", str(small_prepared), "--no-progress")
    for name, cfg in (("multi30k_in_memory", small), ("5m_prepared", big)):
        m = measured(*train_args(cfg, f"rss-{name}", 60))
        result[f"train_{name}"] = {
            "peak_rss_mib": m["peak_rss_mib"],
            "seconds_60_steps": m["seconds"],
        }
        first = measured(*train_args(cfg, f"first-{name}", 1))
        result[f"train_{name}"]["seconds_to_first_step"] = first["seconds"]
    result["rss_difference_mib"] = (
        result["train_5m_prepared"]["peak_rss_mib"]
        - result["train_multi30k_in_memory"]["peak_rss_mib"]
    )
    rates = {"in_memory": [], "prepared": []}
    for _ in range(2):
        for name, cfg in (("in_memory", small), ("prepared", small_prepared)):
            measured(*train_args(cfg, f"rate-{name}", 120))
            rates[name].append(round(tokens_per_s(WORK / f"rate-{name}")))
    result["multi30k_tokens_per_s"] = rates
    result["prepared_over_in_memory"] = round(sum(rates["prepared"]) / sum(rates["in_memory"]), 3)
    return result


def _prepare_cell(m: dict) -> str:
    rate = f", {m['tokens_per_s']:,} tokens/s" if "tokens_per_s" in m else ""
    return f"{m['seconds']:.0f} s{rate}, peak RSS {m['peak_rss_mib']} MiB"


def section(r: dict) -> str:
    mem, big = r["train_multi30k_in_memory"], r["train_5m_prepared"]
    rates = r["multi30k_tokens_per_s"]
    rows = [
        ("`prepare`: SentencePiece on a 1M-sentence sample, then encoding (2 workers)",
         _prepare_cell(r["prepare_with_tokenizer_training"]), ""),
        ("`prepare`: encoding only, 1 worker", _prepare_cell(r["prepare_1_workers"]), ""),
        ("`prepare`: encoding only, 2 workers", _prepare_cell(r["prepare_2_workers"]), ""),
        ("`train` peak RSS, Multi30k in memory (60 steps)", f"{mem['peak_rss_mib']} MiB", ""),
        ("`train` peak RSS, 5M pairs prepared (60 steps)",
         f"{big['peak_rss_mib']} MiB ({r['rss_difference_mib']:+} MiB)", "within 1.5 GB"),
        ("time to the first step, Multi30k in memory", f"{mem['seconds_to_first_step']:.1f} s", ""),
        ("time to the first step, 5M pairs prepared", f"{big['seconds_to_first_step']:.1f} s",
         "under 10 s"),
        ("training tokens/s, Multi30k prepared / in memory",
         f"{r['prepared_over_in_memory']:.3f} ({rates['prepared']} vs {rates['in_memory']})",
         "equal within noise"),
    ]  # fmt: skip
    table = "\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows)
    return f"""{BEGIN}
## Large corpora: prepared, memory-mapped data (5 million pairs)

`python benchmarks/large_corpus.py` ({r["date"]}; {r["machine"]}). The corpus: {r["pairs"]:,}
recombined Multi30k pairs ({r["tokens"]:,} SentencePiece tokens, both sides), made by the script.

| measure | value | target |
|---|---:|---|
{table}

Times to the first step are the whole `heedful train --set train.max_steps=1` command (Python
and torch start-up, reading the manifest and shards, the first epoch's batch plan, the model,
one step and a checkpoint). Peak RSS is GNU time's maximum resident set of the largest process:
for `prepare` with tokenizer training it is SentencePiece's trainer on its 1M-sentence sample;
for training, the 5M pairs cost their lengths, offsets and each epoch's batch plan (about 16
bytes a pair each), not their ids, which stay memory-mapped.{" " + r["note"] if "note" in r else ""}
{END}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=PAIRS, help="corpus size (a dry run: 20000)")
    parser.add_argument("--note", default=None, help="a sentence on how the machine was used")
    parser.add_argument("--report-only", action="store_true", help="rewrite the section from "
                        "benchmarks/results/large-corpus.json without measuring")  # fmt: skip
    args = parser.parse_args()
    if args.report_only:
        result = json.loads(RESULT.read_text(encoding="utf-8"))
        if args.note:
            result["note"] = args.note
        RESULT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        write_section(REPORT, BEGIN, END, section(result))
        return
    result = run(args.pairs)
    if args.note:
        result["note"] = args.note
    result["machine"] = machine()
    result["date"] = datetime.date.today().isoformat()
    RESULT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    write_section(REPORT, BEGIN, END, section(result))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
