"""One model for English→German and English→French against one model per direction, on
Multi30k, at the same number of training steps.

    python benchmarks/multilingual.py                  # 6,000 steps per run (hours on 2 cores)
    python benchmarks/multilingual.py --steps 200      # a quick look
    python benchmarks/multilingual.py --beams 1        # greedy: faster scoring

Every run is configs/multi30k/multilingual.yaml with `data.corpora` cut to its pairs: the
multilingual model reads both corpora (each source after <2de> or <2fr>), each one-direction
model one corpus (its sources all after the one token, so the only difference is the data).
Each model is then scored on test2016 into its language(s) with sacreBLEU. Equal steps mean
the multilingual model sees each direction half as often: the question is how much one shared
model costs, or gains, per direction. Results: benchmarks/results/multilingual.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "multi30k" / "multilingual.yaml"
CORPUS = ROOT.parent / "shared" / "corpora" / "multi30k"
RESULT = ROOT / "benchmarks" / "results" / "multilingual.json"
RUNS = {"en-de+en-fr": ("de", "fr"), "en-de": ("de",), "en-fr": ("fr",)}


def train_run(name: str, targets: tuple[str, ...], steps: int, work: Path) -> Path:
    """Train the config with the corpora of `targets` for `steps` steps; its model directory."""
    from heedful.config import load_config, to_dict
    from heedful.training.experiment import train_from_config

    full = to_dict(load_config(CONFIG))["data"]["corpora"]
    corpora = [c for c in full if c["target"] in targets]
    overrides = [
        f"data.corpora={json.dumps(corpora)}",
        f"train.max_steps={steps}",
        f"train.eval_every={steps}",  # one validation, at the end: the step budget is training
        "train.max_time=null",
    ]
    config = load_config(CONFIG, overrides)
    train_from_config(config, work / name, progress=False, echo=lambda m: print(f"[{name}] {m}"))
    return work / name / "latest"


def score(model_dir: Path, target: str, beams: int) -> dict:
    from heedful.data.corpus import read_parallel
    from heedful.evaluation import corpus_scores
    from heedful.inference.translator import Translator

    pairs = read_parallel(CORPUS / "test2016.en", CORPUS / f"test2016.{target}", "src", "ref")
    translator = Translator.load(model_dir)
    sources = [s for s, _ in pairs]
    outputs = [t.text for t in translator.translate(sources, num_beams=beams, target=target)]
    scores = corpus_scores(outputs, [r for _, r in pairs])
    return {"bleu": scores.bleu, "chrf": scores.chrf}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6000, help="training steps of each run")
    parser.add_argument("--beams", type=int, default=4, help="beam size when scoring")
    parser.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "work" / "multilingual")
    args = parser.parse_args()
    os.chdir(ROOT)  # the config's corpus paths are relative to the repository root
    rows = []
    for name, targets in RUNS.items():
        model_dir = train_run(name, targets, args.steps, args.work)
        for target in targets:
            rows.append({"run": name, "target": target, **score(model_dir, target, args.beams)})
            print(f"{name} → {target}: BLEU {rows[-1]['bleu']:.2f}, chrF {rows[-1]['chrf']:.2f}")
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    date = datetime.date.today().isoformat()
    data = {"date": date, "steps": args.steps, "beams": args.beams, "rows": rows}
    RESULT.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print("| run | into | BLEU | chrF |\n|---|---|---:|---:|")
    for row in rows:
        print(f"| {row['run']} | {row['target']} | {row['bleu']:.2f} | {row['chrf']:.2f} |")


if __name__ == "__main__":
    main()
