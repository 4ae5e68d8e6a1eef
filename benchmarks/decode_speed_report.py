"""The docs/benchmarks.md section of benchmarks/decode_speed.py: its results as tables."""

from __future__ import annotations

BEGIN, END = "<!-- decode-speed:begin -->", "<!-- decode-speed:end -->"
BATCH = 64
AVX2 = {  # as benchmarks/int8_per_cpu.py: how an AVX2-only machine of our kind is reproduced
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "CT2_FORCE_CPU_ISA": "AVX2",
}


def report(results: list[dict]) -> str:
    lines = [
        BEGIN,
        "## Decoding from PyTorch against CTranslate2 float32",
        "",
        "Multi30k test2016, the Transformer of benchmarks/work/m30k-transformer (3+3 layers, "
        f"d_model 256, 8k vocabulary), batch {BATCH}. Each way in its own "
        "worker process, alternated in rounds (median over rounds); vs heedful = heedful's time "
        "/ this way's time, the median of the per-round ratios (above 1: faster than heedful). "
        "same = outputs identical to heedful's. baseline = the code before this change (git "
        "HEAD's src/). CPU time: the same ratio of the processes' CPU seconds, which other "
        "work on the machine disturbs less than wall time (with 1 thread, it is the work done; "
        "with 2, it includes OpenMP's spinning). spinN = heedful with GOMP_SPINCOUNT=N (`--env-"
        "way`): how long OpenMP's threads spin before they sleep, counted in PAUSE "
        "instructions, whose length differs by an order of magnitude among x86 CPUs; heedful "
        'asks for 100,000 (heedful.cpu, "Threads"). The knee sits near 10,000 here, so a CPU '
        "whose PAUSE is several times shorter than this one's ran the old setting as this one "
        "runs spin3k or spin1k: that is how greedy decoding could differ by 1.6x between two "
        "EPYCs (issue 30). CTranslate2 is run as it comes, intra_threads = the thread count; "
        "with one thread it decodes faster here than with two. With 2 threads or more, heedful "
        "decodes two batches side by side, one thread each (heedful.cpu.in_streams; before "
        "2026-12-04 it spent both threads inside each batch, which is the EPYC's baseline of "
        "that day), and "
        "ctranslate2-side is CTranslate2 doing the same, as its inter_threads do (one replica "
        "per thread, intra_threads 1; benchmarks/side_by_side.py).",
    ]
    for result in results:
        isa = "AVX2 forced (" + ", ".join(f"{k}={v}" for k, v in AVX2.items()) + ")"
        lines += [
            "",
            f"**{result['cpu'] + ', ' if result.get('cpu') else ''}"
            f"{isa if result['avx2'] else 'native'}, {result['threads']} thread(s)**: "
            f"{result['date']}, {result['machine']}; "
            f"{result['sentences']} sentences, {result['rounds']} rounds{_batches(result)}. "
            f"{shared(result)}",
            "",
            f"    {result['command']}",
            "",
            "| search | way | sentences/s | vs heedful | CPU time: vs heedful | same |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for beams, row in result["searches"].items():
            search = "greedy" if beams == "1" else f"beam {beams}"
            for way, entry in row.items():
                lines.append(
                    f"| {search} | {way} | {entry['sentences_per_s']:.1f} | "
                    f"{entry['vs_heedful']:.2f}x | {_ratio(entry.get('cpu_vs_heedful'))} | "
                    f"{100 * entry['same_as_heedful']:.1f}% |"
                )
    # the profile of the native run with the fewest threads: the least disturbed by other work
    profiled = min(results, key=lambda r: (r.get("cpu") or "", r["avx2"], r["threads"]))
    lines += ["", _profile_table(profiled), END]
    return "\n".join(lines)


def shared(result: dict) -> str:
    """What else ran: the 1-minute load average at the start and the end of the run."""
    if "load" not in result:
        return ""
    start, end = result["load"]
    return (f"Load average {start:.1f} at the start, {end:.1f} at the end: the cores were "
            "shared with other work.")  # fmt: skip


def _batches(result: dict) -> str:
    """The batch size where it is not the section's (runs before --batch-size: BATCH), and the
    pieces a round was taken in turns where there were several (runs before --pieces: one)."""
    size, pieces = result.get("batch_size", BATCH), result.get("pieces", 1)
    batches = "" if size == BATCH else f", batches of {size}"
    return batches if pieces == 1 else f"{batches}, the ways taking turns in {pieces} pieces"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _profile_table(result: dict) -> str:
    """The profiled run's breakdown, with its CPU and date: the tables above come from several."""
    profiles, threads = result["profiles"], result["threads"]
    first = next(iter(profiles.values()))
    rows = list(dict.fromkeys(r for p in profiles.values() for r in p["rows"]))
    header = " | ".join("greedy" if b == "1" else f"beam {b}" for b in profiles)
    lines = [
        f"Where heedful's search spends its time ({first['sentences']} sentences under "
        f"torch.profiler, native, {threads} thread(s), {result['date']}, {result['machine']}; "
        "each operator's own time in the innermost part of the model it ran in, share of the "
        "wall time; the profiler inflates the Python share):",
        "",
        f"| part | {header} |",
        "|---|" + "---:|" * len(profiles),
    ]
    for row in sorted(rows, key=lambda r: -first["rows"].get(r, 0.0)):
        cells = [f"{100 * p['rows'].get(row, 0.0) / p['wall']:.1f}%" for p in profiles.values()]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    walls = " | ".join(f"{p['wall']:.2f} s" for p in profiles.values())
    reads = " | ".join(str(p["scalar_reads"]) for p in profiles.values())
    lines += [f"| wall time | {walls} |", f"| scalar reads (.item(), bool()) | {reads} |"]
    return "\n".join(lines)
