"""Decode-shaped float32 products: is the matrix library why decoding differs between CPUs?

    python benchmarks/decode_gemm.py [--cpu NAME]

torch's F.linear (MKL's sgemm on x86, on every vendor's CPU) against oneDNN's inner product
called through torch (torch._C._nn.mkldnn_linear, what torch.utils.mkldnn uses; CTranslate2
picks oneDNN on any CPU that is not GenuineIntel), oneDNN with the weight reordered once into
its own layout (what heedful's decoding multiplies by on such CPUs: layers/products.py; the
input and output stay ordinary tensors) and numpy's OpenBLAS (1 thread only: its
threads follow OPENBLAS_NUM_THREADS, set to 1 here), on the shapes greedy and beam-5 decoding
multiply (64 or 320 rows) and one training shape. GFLOP/s, the median of 7 timings.
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

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # before numpy loads OpenBLAS

from report import machine, variant, write_section  # benchmarks/report.py  # noqa: E402

from heedful.layers.products import PACKED_ROWS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "benchmarks" / "results" / "decode-gemm.json"
REPORT = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- decode-gemm:begin -->", "<!-- decode-gemm:end -->"
SHAPES = [(64, 256, 256), (64, 256, 1024), (64, 1024, 256), (64, 256, 8000),
          (320, 256, 256), (320, 256, 8000), (3000, 256, 1024)]  # fmt: skip


def rate(fn, flops: int, seconds: float = 0.4) -> float:
    fn()  # warm-up
    fn()
    times = []
    for _ in range(7):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 7:
            fn()
            n += 1
        times.append((time.perf_counter() - start) / n)
    return flops / statistics.median(times) / 1e9


def one_shape(m: int, k: int, n: int, threads: int) -> dict:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    flops = 2 * m * k * n
    xn, wn = x.numpy(), w.numpy().T.copy()

    def onednn():
        return torch._C._nn.mkldnn_linear(x.to_mkldnn(), w, b).to_dense()

    packed = torch.ops.mkldnn._reorder_linear_weight(w, PACKED_ROWS)  # as layers/products.py

    def onednn_packed():
        return torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], "")

    return {
        "threads": threads,
        "shape": [m, k, n],
        "torch_linear": rate(lambda: F.linear(x, w, b), flops),
        "onednn": rate(onednn, flops),
        "onednn_packed": rate(onednn_packed, flops),
        "numpy": rate(lambda: xn @ wn, flops) if threads == 1 else None,
    }


def measure() -> list[dict]:
    return [one_shape(*shape, threads) for threads in (1, 2) for shape in SHAPES]


def report(result: dict, begin: str, end: str) -> str:
    lines = [
        begin,
        "## Decode-shaped matrix products: MKL, oneDNN, OpenBLAS",
        "",
        f"{result['date']}, {result['machine']}.",
        "",
        f"    {result['command']}",
        "",
        "GFLOP/s (2 per multiply-add), rows x inner x outputs; numpy with 1 thread only.",
        "",
        "| threads | shape | torch F.linear (MKL) | oneDNN through torch | oneDNN, packed weight"
        " | numpy (OpenBLAS) |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        numpy, packed = (
            "–" if r.get(key) is None else f"{r[key]:.1f}" for key in ("numpy", "onednn_packed")
        )
        shape = "x".join(map(str, r["shape"]))
        cells = f"{r['torch_linear']:.1f} | {r['onednn']:.1f} | {packed} | {numpy}"
        lines.append(f"| {r['threads']} | {shape} | {cells} |")
    return "\n".join([*lines, end])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", help="name another CPU's run: its own result and section")
    parser.add_argument("--report", action="store_true", help="only rewrite docs/benchmarks.md")
    args = parser.parse_args()
    path, begin, end = variant(RESULT, BEGIN, END, args.cpu)
    if not args.report:
        result = {
            "date": datetime.date.today().isoformat(),
            "machine": machine(),
            "command": " ".join(["python", "benchmarks/decode_gemm.py", *sys.argv[1:]]),
            "rows": measure(),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
    write_section(REPORT, begin, end, report(json.loads(path.read_text()), begin, end))
    print(f"wrote {path} and {REPORT}")


if __name__ == "__main__":
    main()
