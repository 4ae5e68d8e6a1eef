"""Hugging Face models on a CUDA device: what the CPU tests check, on the GPU.

    PYTHONPATH=src:tests python benchmarks/hf_gpu_check.py [cuda|cpu]

The tiny random models of tests/hf (Marian, BART, mBART, M2M100, T5, T5 v1.1) load with
device="cuda"; our greedy and beam search must give transformers' generate() outputs on the
same device, the trace and explain must run there, and the export round trip must hold (a
random heedful Transformer exported to Marian, both on the GPU, greedy token for token).
Prints one line per check and exits non-zero if any fails.
"""

from __future__ import annotations

import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch


def main(device: str = "cuda") -> int:
    warnings.simplefilter("ignore")
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    from hf.builders import BUILDERS, TEXTS, build_t5_v1_1
    from hf.test_search import generate, ours

    import heedful
    from heedful.visualize.explain import explain
    from heedful.visualize.trace import build_trace

    failures = 0
    builders = {**BUILDERS, "t5-v1.1": build_t5_v1_1}
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in builders.items():
            start = time.perf_counter()
            translator = heedful.load(build(Path(tmp) / name), device=device)
            assert next(translator.model.parameters()).device.type == device
            same = all(ours(translator, TEXTS, b) == generate(translator, TEXTS, b) for b in (1, 4))
            trace = build_trace(translator, TEXTS[0], num_beams=3, n_best=3)
            e = explain(translator, TEXTS[0], layer=2, head=2, position=2, kind="cross")
            ok = same and len(trace.hypotheses) == 3 and e.weights.numel() > 0
            failures += not ok
            print(f"{name}: search == generate() on {device}: {same}; trace and explain ran: "
                  f"{ok}; {time.perf_counter() - start:.1f} s")  # fmt: skip
        failures += not export_round_trip(Path(tmp), device)
    print("all passed" if not failures else f"{failures} failed")
    return 1 if failures else 0


def export_round_trip(tmp: Path, device: str) -> bool:
    import transformers
    from hf.test_export import heedful_model_dir, texts

    from heedful.hf.export import export_huggingface
    from heedful.inference.translator import Translator

    model_dir = heedful_model_dir(tmp / "heedful")
    export = export_huggingface(model_dir, tmp / "marian")
    ours = Translator.load(model_dir, device=device)
    tokenizer = transformers.MarianTokenizer.from_pretrained(export)
    marian = transformers.MarianMTModel.from_pretrained(export).eval().to(device)
    same = 0
    for text in texts():
        ids = ours.src_tokenizer.encode(text)
        [[hyp]] = ours.search(torch.tensor([ids], device=device), 1, 1)
        batch = tokenizer(text, add_special_tokens=False, return_tensors="pt").to(device)
        limit = ours.generation.max_output_length(len(ids))
        out = marian.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=limit)
        same += out[0, 1:].tolist()[: len(hyp.produced(2))] == hyp.produced(2)
    print(f"export round trip on {device}: {same}/{len(texts())} greedy outputs identical")
    return same == len(texts())


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
