"""int8 per CPU: BLEU and speed of every int8 path, on this CPU and with AVX2 forced.

    python benchmarks/int8_per_cpu.py --model runs/transformer/best      # ~10 minutes
    python benchmarks/int8_per_cpu.py --model ... --sentences 300         # a quick look

One trained Multi30k Transformer translates test2016 (batch 64, greedy and beam 5, 2 threads)
in each of these ways, each instruction set in its own process (the libraries read their caps
when they load):

- torch float32; torch --quantize int8 as heedful does it now (one scale per output row) and
  as it did before (one scale per matrix);
- CTranslate2 float32; CTranslate2 computing in int8 (int8_float32) whatever the CPU; and
  CTranslate2 with --quantize int8 as heedful now chooses it (heedful.cpu: int8 only with VNNI).

"native" is the CPU as it is; "avx2" sets ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2,
MKL_ENABLE_INSTRUCTIONS=AVX2 and CT2_FORCE_CPU_ISA=AVX2, which is how an AVX2-only machine of
our kind is reproduced. fbgemm (torch's int8 kernels) reads no such cap: it picks its kernels
from the CPU's own flags, so torch int8 runs the same kernels in both columns.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

from report import machine, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "multi30k"
REPORT = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "benchmarks" / "results" / "int8-per-cpu.json"
BEGIN, END = "<!-- int8-per-cpu:begin -->", "<!-- int8-per-cpu:end -->"
AVX2 = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "CT2_FORCE_CPU_ISA": "AVX2",
}
WAYS = [
    "torch",
    "torch int8",
    "torch int8 per matrix",
    "ct2",
    "ct2 int8 always",
    "ct2 --quantize int8",
]


def translator(way: str, model: Path):
    """The translator for one way of running the model, and the compute it ended up using."""
    import torch

    from heedful.inference.runtime import CTranslate2Translator, load_translator
    from heedful.inference.translator import Translator

    if way == "torch":
        return load_translator(model), "float32"
    if way == "torch int8":
        return load_translator(model, quantize="int8"), "int8, per row"
    if way == "torch int8 per matrix":
        t = Translator.load(model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            names = {n for n, m in t.model.named_modules() if isinstance(m, torch.nn.Linear)}
            t.model = torch.ao.quantization.quantize_dynamic(t.model, names, dtype=torch.qint8)
        return t, "int8, per matrix"
    if way == "ct2":
        t = load_translator(model, engine="ctranslate2")
    elif way == "ct2 int8 always":
        import ctranslate2

        t = load_translator(model, engine="ctranslate2")
        t.ct2 = _reopened(ctranslate2, t.ct2, model, "int8_float32")
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = CTranslate2Translator.load(model, quantize="int8")
    return t, t.ct2.compute_type


def _reopened(ctranslate2, ct2, model: Path, compute_type: str):
    """The same CTranslate2 model with another compute type (export once, to a temp dir)."""
    import tempfile

    from heedful.checkpoint.model_dir import CTRANSLATE2_DIR
    from heedful.inference.export import export_ctranslate2

    tmp = Path(tempfile.mkdtemp(prefix="heedful-int8-"))
    export_ctranslate2(model, tmp / "export")
    return ctranslate2.Translator(
        str(tmp / "export" / CTRANSLATE2_DIR),
        device="cpu",
        compute_type=compute_type,
        inter_threads=1,
        intra_threads=2,
    )


def measure(model: Path, sentences: int) -> dict:
    import sacrebleu
    import torch

    from heedful.cpu import int8_support

    torch.set_num_threads(2)
    sources = (CORPUS / "test2016.en").read_text(encoding="utf-8").splitlines()[:sentences]
    refs = [(CORPUS / "test2016.de").read_text(encoding="utf-8").splitlines()[:sentences]]
    rows = {}
    for way in WAYS:
        t, compute = translator(way, model)
        rows[way] = {"compute": compute}
        for beams in (1, 5):
            t.translate(sources[:64], num_beams=beams)  # warm-up
            start = time.perf_counter()
            out = [x.text for x in t.translate(sources, num_beams=beams, batch_size=64)]
            seconds = time.perf_counter() - start
            rows[way][f"beam{beams}"] = {
                "sentences_per_s": len(sources) / seconds,
                "bleu": sacrebleu.corpus_bleu(out, refs).score,
                "outputs": out,
            }
        print(way, compute, {b: round(rows[way][b]["bleu"], 2) for b in ("beam1", "beam5")},
              file=sys.stderr, flush=True)  # fmt: skip
    support = int8_support()
    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "int8_fast": support.fast,
        "int8_reason": support.reason,
        "rows": rows,
    }


def report(results: dict, sentences: int, command: str) -> str:
    lines = [
        BEGIN,
        "## int8 per CPU",
        "",
        f"{datetime.date.today().isoformat()}, {machine()}; otherwise idle.",
        "",
        f"    {command}",
        "",
        f"The Multi30k Transformer (benchmarks/work, trained as configs/multi30k/transformer.yaml"
        f" says) on the first {sentences} sentences of test2016, batch 64, 2 threads. Speed: "
        "sentences/s and the ratio to float32 on the same engine; BLEU: sacreBLEU, and its "
        "change from float32 on the same engine. Same: outputs equal to float32's.",
        "",
    ]
    for isa, result in results.items():
        lines += [
            f"**{isa}** (torch's kernels: {result['cpu_capability']}; heedful.cpu: "
            f"{result['int8_reason']}, so int8 is "
            f"{'used' if result['int8_fast'] else 'not used by CTranslate2'})",
            "",
            "| way | computes in | greedy sent/s | beam 5 sent/s | BLEU greedy | BLEU beam 5 "
            "| same (greedy / beam 5) |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        rows = result["rows"]
        for way, row in rows.items():
            base = rows["torch" if way.startswith("torch") else "ct2"]
            cells = []
            for b in ("beam1", "beam5"):
                rate, ref = row[b]["sentences_per_s"], base[b]["sentences_per_s"]
                cells.append(f"{rate:.1f} ({rate / ref:.2f}x)")
            for b in ("beam1", "beam5"):
                delta = row[b]["bleu"] - base[b]["bleu"]
                cells.append(f"{row[b]['bleu']:.2f} ({delta:+.2f})")
            same = [
                sum(x == y for x, y in zip(row[b]["outputs"], base[b]["outputs"]))
                / len(row[b]["outputs"])
                for b in ("beam1", "beam5")
            ]
            cells.append(f"{same[0]:.0%} / {same[1]:.0%}")
            lines.append(f"| {way} | {row['compute']} | " + " | ".join(cells) + " |")
        lines += ["", verdict(rows), ""]
    lines.append(END)
    return "\n".join(lines)


def verdict(rows: dict) -> str:
    """Whether heedful's choices (torch int8; CTranslate2 --quantize int8 as heedful.cpu picks
    it) keep within 0.5 BLEU of float32 and are no slower, greedy and beam 5."""
    words = []
    for way, base in (("torch int8", "torch"), ("ct2 --quantize int8", "ct2")):
        loss = max(rows[base][b]["bleu"] - rows[way][b]["bleu"] for b in ("beam1", "beam5"))
        speed = min(
            rows[way][b]["sentences_per_s"] / rows[base][b]["sentences_per_s"]
            for b in ("beam1", "beam5")
        )
        words.append(
            f"`{way}` ({rows[way]['compute']}) loses at most {max(loss, 0):.2f} BLEU and runs "
            f"at {speed:.2f}x float32 or better"
        )
    return "heedful's choices here: " + "; ".join(words) + "."


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.model, args.sentences)))
        return
    results = {}
    for isa, caps in (("native", {}), ("avx2 forced", AVX2)):
        env = {**os.environ, **caps}
        command = [sys.executable, __file__, "--child", "--model", str(args.model),
                   "--sentences", str(args.sentences)]  # fmt: skip
        out = subprocess.run(command, env=env, check=True, stdout=subprocess.PIPE, text=True)
        results[isa] = json.loads(out.stdout.strip().splitlines()[-1])
    shown = f"python benchmarks/int8_per_cpu.py --model {args.model} --sentences {args.sentences}"
    write_section(REPORT, BEGIN, END, report(results, args.sentences, shown))
    for result in results.values():  # the numbers stay; the 1,000s of outputs do not
        for row in result["rows"].values():
            for b in ("beam1", "beam5"):
                row[b].pop("outputs")
    RESULTS.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {REPORT}")


if __name__ == "__main__":
    main()
