"""How much faster would a deep-encoder, shallow-decoder Transformer decode? (Kasai et al. 2021)

    python benchmarks/deep_shallow.py                  # ~5 minutes on 2 cores
    python benchmarks/deep_shallow.py --report         # only rewrite docs/benchmarks.md

No training: the decode cost of a model does not depend on its weights once the output length
is fixed. Two Transformers of the Multi30k width (d_model 256, 4 heads, d_ff 1024, 8k
vocabulary), 3+3 and 6+1 layers, random weights, translate the first --sentences sources of
test2016 (the Multi30k model's SentencePiece pieces; batch 64, 2 threads) with </s> forbidden,
so every output runs to its limit of source length + 2 tokens, the same for both. They
alternate in rounds; the ratio is the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

from decode_speed_report import shared  # benchmarks/decode_speed_report.py
from report import machine, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "multi30k"
MODEL = ROOT / "benchmarks" / "work" / "m30k-transformer" / "best"
REPORT = ROOT / "docs" / "benchmarks.md"
RESULT = ROOT / "benchmarks" / "results" / "deep-shallow.json"
BEGIN, END = "<!-- deep-shallow:begin -->", "<!-- deep-shallow:end -->"
LAYERS = {"3+3": (3, 3), "6+1": (6, 1)}


def model(encoder_layers: int, decoder_layers: int):
    import torch

    from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig
    from heedful.data.tokenizers import EOS_ID
    from heedful.models.build import build_model

    torch.manual_seed(0)
    sizes = {"d_model": 256, "num_heads": 4, "d_ff": 1024, "norm": "pre"}
    decoder = DecoderConfig(layers=decoder_layers, tie_embeddings=True)
    config = ModelConfig(encoder=TextEncoderConfig(layers=encoder_layers), decoder=decoder, **sizes)
    net = build_model(config, 8000, 8000).eval()
    with torch.no_grad():
        net.decoder.generator.bias[EOS_ID] = -torch.inf  # never ends early: the length is forced
    return net


def measure(args) -> dict:
    import torch

    from heedful.data.batching import pad
    from heedful.data.tokenizers import BOS_ID, EOS_ID, load_tokenizer
    from heedful.search.beam import beam_search
    from heedful.search.decoding import greedy_search

    load = os.getloadavg()[0]
    torch.set_num_threads(args.threads)
    tok = load_tokenizer(MODEL / "tokenizer.src")
    lines = (CORPUS / "test2016.en").read_text(encoding="utf-8").splitlines()[: args.sentences]
    ids = sorted((tok.encode(s) for s in lines), key=len)
    batches = [pad(ids[i : i + 64]) for i in range(0, len(ids), 64)]
    models = {name: model(*layers) for name, layers in LAYERS.items()}
    lengths = {"max_len_ratio": 1.0, "max_len_offset": 2}

    def translate(net, beams: int) -> tuple[float, float]:
        start, cpu = time.perf_counter(), time.process_time()
        with torch.inference_mode():
            for src in batches:
                if beams == 1:
                    greedy_search(net, src, BOS_ID, EOS_ID, **lengths)
                else:
                    beam_search(net, src, BOS_ID, EOS_ID, beams, **lengths)
        return time.perf_counter() - start, time.process_time() - cpu

    times = {(name, b): [] for name in models for b in (1, 5)}
    cpu = {(name, b): [] for name in models for b in (1, 5)}
    for name in models:  # warm-up
        translate(models[name], 1)
    for r in range(args.rounds):
        for beams in (1, 5):
            order = list(models)[r % 2 :] + list(models)[: r % 2]
            for name in order:
                seconds, cpu_seconds = translate(models[name], beams)
                times[(name, beams)].append(seconds)
                cpu[(name, beams)].append(cpu_seconds)
                print(f"round {r + 1} beam {beams} {name}: {times[(name, beams)][-1]:.2f} s")
    out = {}
    for beams in (1, 5):
        base, cpu_base = times[("3+3", beams)], cpu[("3+3", beams)]
        out[str(beams)] = {
            name: {
                "sentences_per_s": len(ids) / statistics.median(times[(name, beams)]),
                "vs_3_3": statistics.median(b / t for b, t in zip(base, times[(name, beams)])),
                "cpu_vs_3_3": statistics.median(
                    b / t for b, t in zip(cpu_base, cpu[(name, beams)])
                ),
            }
            for name in models
        }
    return {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "load": [load, os.getloadavg()[0]],
        "command": " ".join(["python", "benchmarks/deep_shallow.py", *sys.argv[1:]]),
        "sentences": len(ids),
        "rounds": args.rounds,
        "threads": args.threads,
        "searches": out,
    }


def report(result: dict) -> str:
    lines = [
        BEGIN,
        "## Deep encoder, shallow decoder: the decode cost",
        "",
        f"{result['date']}, {result['machine']}; {result['sentences']} sentences, "
        f"{result['rounds']} rounds. {shared(result)}",
        "",
        f"    {result['command']}",
        "",
        "Random weights, </s> forbidden so that every output has source length + 2 tokens in "
        "both models (d_model 256, 4 heads, d_ff 1024, 8k vocabulary, batch 64). vs 3+3: the "
        "median of the per-round ratios of time, above 1 is faster; CPU time: the same ratio "
        f"of CPU seconds, which the other work on the machine disturbs less. "
        f"{result.get('threads', 2)} thread(s).",
        "",
        "| search | layers | sentences/s | vs 3+3 | CPU time: vs 3+3 |",
        "|---|---|---:|---:|---:|",
    ]
    for beams, row in result["searches"].items():
        search = "greedy" if beams == "1" else f"beam {beams}"
        for name, entry in row.items():
            cpu = f"{entry['cpu_vs_3_3']:.2f}x" if "cpu_vs_3_3" in entry else "n/a"
            speed = f"{entry['sentences_per_s']:.1f} | {entry['vs_3_3']:.2f}x"
            lines.append(f"| {search} | {name} | {speed} | {cpu} |")
    lines.append(END)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--report", action="store_true", help="only rewrite docs/benchmarks.md")
    args = parser.parse_args()
    if not args.report:
        RESULT.parent.mkdir(parents=True, exist_ok=True)
        RESULT.write_text(json.dumps(measure(args), indent=2) + "\n")
    write_section(REPORT, BEGIN, END, report(json.loads(RESULT.read_text())))
    print(f"wrote {REPORT}")


if __name__ == "__main__":
    main()
