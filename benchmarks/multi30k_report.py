"""The report of benchmarks/multi30k_quality.py: its section of docs/benchmarks.md, one per
CPU (--cpu NAME), and the figure of BLEU by source length."""

from __future__ import annotations

import json
from pathlib import Path

from report import variant, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
REPORT = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- multi30k-quality:begin -->", "<!-- multi30k-quality:end -->"

TARGETS = {"transformer": 40.0, "transformer-tiny": 40.0, "rnn-bahdanau": 26.0}  # issue 30; issue 3


def _load_note(r: dict) -> str:
    load = r.get("load")
    if load is None:  # runs from before the sampler: the transformer's shared the cores in parts
        return "load not recorded"
    return f"1-minute load average during training: mean {load['mean']}, max {load['max']}"


def results_of(cpu: str | None) -> list[dict]:
    """Every config's result from this CPU (--cpu NAME; None: the default machine's)."""
    found = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("multi30k-*.json"))]
    return [r for r in found if r.get("cpu") == cpu]


def budget_label(result: dict) -> str:
    steps = result.get("budget_steps")
    return f"{steps:,} steps" if steps is not None else f"{result['budget_seconds'] / 60:.0f} min"


def report(cpu: str | None = None) -> str:
    _, begin, end = variant(REPORT, BEGIN, END, cpu)
    results = results_of(cpu)
    title = "## Multi30k quality in a fixed wall-clock budget" + (f" ({cpu})" if cpu else "")
    lines = [begin, title, ""]
    if not results:
        return "\n".join(
            lines + ["No results yet: run `python benchmarks/multi30k_quality.py`.", end]
        )
    lines += [
        "Each config in `configs/multi30k/` trained for a fixed wall-clock budget (validation "
        "included), or for as many steps as an idle run of it fitted in that budget (runs "
        "sharing the cores, with `--steps`), best checkpoint by validation BLEU, scored on "
        "`test2016` (1,000 sentences) with beam search, detokenized, case-sensitive sacreBLEU. "
        "Several seeds: the table gives the median run, the list below it every run.",
        "",
        "| config | budget | steps | epochs | target tok/s | BLEU | chrF | TER | target | date |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in results:
        target = TARGETS.get(r["config"])
        verdict = (
            "-" if target is None else f">= {target}: {'met' if r['bleu'] >= target else 'NOT met'}"
        )
        bf16 = " (bfloat16)" if r.get("precision") == "bfloat16 autocast" else ""
        lines.append(
            f"| {r['config']}{bf16} | {budget_label(r)} | {r['steps']} | {r['epochs']} "
            f"| {r['target_tokens_per_second']} | {r['bleu']} | {r['chrf']} | {r['ter']} "
            f"| {verdict} | {r['date']} |"
        )
    lines += seed_lines(results)
    lines += ["", "BLEU per source length (whitespace words of the English source):", ""]
    buckets = [b["bucket"] for b in results[0]["by_length"]]
    lines.append("| config | " + " | ".join(f"{b} words" for b in buckets) + " |")
    lines.append("| --- |" + " ---: |" * len(buckets))
    for r in results:
        cells = [
            f"{b['bleu']} ({b['sentences']})" if b["bleu"] is not None else "-"
            for b in r["by_length"]
        ]
        lines.append(f"| {r['config']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "(sentences per bucket in parentheses; 2 sentences in 31+ are too few to read)",
        "",
    ]
    if cpu is None:  # the figure draws the default machine's configs (plot_buckets)
        lines += [
            "![BLEU by source length: the context vector bottleneck of rnn-none beside "
            "attention](img/bottleneck.png)",
            "",
        ]
    lines += [
        "A run's own two threads make a load of about 2; more means the cores were shared and "
        "the run took fewer steps than this machine gives idle.",
        "",
        "Signatures, machines and commands:",
        "",
    ]
    for r in results:
        lines.append(
            f"- {r['config']}: `{r['signature']}`, beam {r['beam']}; {r['machine']}; "
            f"{_load_note(r)}; `{r['command']}`"
        )
    return "\n".join(lines + [end])


def seed_lines(results: list[dict]) -> list[str]:
    """Every run of the configs trained with several seeds (the table gives the median's)."""
    lines = []
    for r in (r for r in results if len(r.get("seeds", [])) > 1):
        runs = "; ".join(f"seed {_seed(s)}: {s['bleu']} ({_run_note(s)})" for s in r["seeds"])
        lines.append(f"- {r['config']}, median of {len(r['seeds'])} seeds: {runs}")
    return ["", *lines] if lines else []


def _seed(run: dict) -> str:
    return "of the config" if run.get("seed") is None else str(run["seed"])


def _run_note(run: dict) -> str:
    note = f"{run['steps']:,} steps, {run['train_wall_seconds'] / 60:.0f} min"
    note += f", {run.get('precision', 'float32')}"
    if (tokenized := run.get("tokenized_bleu")) is not None:
        note += f"; tokenized {tokenized['cased']:.2f} cased, {tokenized['lowercased']:.2f} lc"
    return note


def plot_buckets(path: Path = ROOT / "docs" / "img" / "bottleneck.png") -> Path | None:
    """Grouped bars: test BLEU per source-length bucket, one colour per config."""
    results = results_of(None)  # the default machine's: one CPU's configs side by side
    if not results:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets = [b["bucket"] for b in results[0]["by_length"]]
    width = 0.8 / len(results)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    for i, r in enumerate(results):
        values = [b["bleu"] or 0.0 for b in r["by_length"]]
        xs = [j + (i - (len(results) - 1) / 2) * width for j in range(len(buckets))]
        ax.bar(xs, values, width, label=f"{r['config']} ({r['bleu']} overall)")
    counts = [b["sentences"] for b in results[0]["by_length"]]
    ax.set_xticks(
        range(len(buckets)), [f"{b} words\n({n} sentences)" for b, n in zip(buckets, counts)]
    )
    ax.set_ylabel("test2016 BLEU")
    ax.set_title("BLEU by source length: Multi30k En→De, 30 min on 2 CPU cores")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def write_report(cpu: str | None = None) -> None:
    _, begin, end = variant(REPORT, BEGIN, END, cpu)
    write_section(REPORT, begin, end, report(cpu))
