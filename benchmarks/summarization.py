"""The summarization recipes on the generated headline corpus: does copying help?

    python benchmarks/summarization.py      # about a minute on two cores

Trains configs/summarization/headlines-pointer.yaml and headlines-attention.yaml, shrunk to
train in seconds (SMALL), on 1,200 generated pairs (heedful.tasks.headlines), scores 300 unseen
ones with `heedful evaluate --jsonl ... --metric rouge`, and writes the table into
docs/benchmarks.md. It is a check of the recipe and the copy mechanism, not a summarization
result: no public corpus (Gigaword, CNN/DailyMail) is available offline here.
"""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
from pathlib import Path

from report import machine, write_section  # benchmarks/report.py

from heedful.tasks.headlines import generate_headlines, write_jsonl

ROOT = Path(__file__).resolve().parents[1]
WORK = Path("benchmarks/work/summarization")  # relative to ROOT, where the commands run
RECIPES = ("headlines-pointer", "headlines-attention")
SMALL = (  # the recipes' sizes shrunk as tests/test_summarization.py shrinks them
    "data.vocab_size=120", "data.valid_max_sentences=40", "model.d_model=32",
    "model.hidden_size=64", "model.dropout=0.0", "train.batch_tokens=900", "train.max_steps=220",
    "train.eval_every=220", "train.log_every=50", "train.lr=0.005", "train.warmup_steps=20",
    "generation.num_beams=1",
)  # fmt: skip
BEGIN, END = "<!-- summarization:begin -->", "<!-- summarization:end -->"


def heedful(*args: str) -> str:
    command = [sys.executable, "-m", "heedful", *args]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def run(recipe: str, data: Path) -> dict:
    sets = [f"data.train_jsonl={data / 'train.jsonl'}",
            f"data.valid_jsonl={data / 'valid.jsonl'}", *SMALL]  # fmt: skip
    train = ["train", f"configs/summarization/{recipe}.yaml", "--run-dir", str(WORK / recipe),
             "--force", "--no-progress", "--threads", "1",
             *(a for s in sets for a in ("--set", s))]  # fmt: skip
    log = heedful(*train)
    seconds = re.search(r"stopped by max_steps at step \d+ \((\d+) s\)", log).group(1)
    scores = heedful("evaluate", str(WORK / recipe / "best"), "--jsonl",
                     str(data / "test.jsonl"), "--metric", "rouge", "--threads", "1")  # fmt: skip
    rouge = re.search(r"ROUGE-1 = (\S+)  ROUGE-2 = (\S+)  ROUGE-L = (\S+)  \((.+)\)", scores)
    bleu = re.search(r"BLEU = (\S+)", scores).group(1)
    return {"recipe": recipe, "seconds": seconds, "rouge": rouge.groups()[:3],
            "signature": rouge.group(4), "bleu": bleu, "command": " ".join(train)}  # fmt: skip


def main() -> None:
    data = WORK / "data"
    (ROOT / data).mkdir(parents=True, exist_ok=True)
    for split, n, seed in (("train", 1200, 1), ("valid", 40, 2), ("test", 300, 3)):
        write_jsonl(ROOT / data / f"{split}.jsonl", generate_headlines(n, seed))
    rows = [run(recipe, data) for recipe in RECIPES]
    lines = [
        BEGIN,
        "## Summarization recipe on a generated headline corpus",
        "",
        "No public summarization corpus is available offline here (`../shared/corpora` holds "
        "Multi30k only), so there is no Gigaword or CNN/DailyMail number yet. This checks the "
        "recipe and the copy mechanism instead: `configs/summarization/` shrunk (`SMALL` in "
        "`benchmarks/summarization.py`) and trained for 220 steps on 1,200 generated "
        "first-sentence/headline pairs (`heedful.tasks.headlines`, whose names are random "
        "syllables, mostly unseen), greedy search on 300 unseen pairs.",
        "",
        "| recipe | train s | ROUGE-1 | ROUGE-2 | ROUGE-L | BLEU |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        *(
            f"| {r['recipe']} | {r['seconds']} | {' | '.join(r['rouge'])} | {r['bleu']} |"
            for r in rows
        ),
        "",
        f"{datetime.date.today().isoformat()}, {machine()}, each run with `--threads 1`; "
        f"ROUGE `{rows[0]['signature']}`. From the repository root (then `python -m heedful "
        "evaluate RUN/best --jsonl test.jsonl --metric rouge --threads 1`):",
        "",
        *(f"- `python -m heedful {r['command']}`" for r in rows),
        END,
    ]
    write_section(ROOT / "docs" / "benchmarks.md", BEGIN, END, "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
