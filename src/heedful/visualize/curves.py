"""Training curves: loss, BLEU and learning rate against step, read from runs' metrics.jsonl.

`heedful train` appends one JSON record per line to RUN_DIR/metrics.jsonl: training records
(step, train_loss, lr) and validation records (event "validation", step, loss, bleu, ...).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from heedful.visualize.figures import image_path, pyplot, save

CURVES = (  # (title, key, from validation records)
    ("training loss", "train_loss", False),
    ("validation loss", "loss", True),
    ("validation BLEU", "bleu", True),
    ("learning rate", "lr", False),
)


def _read_metrics(run_dir: Path) -> list[dict]:
    """The records of RUN_DIR/metrics.jsonl (or of that file itself). A killed run may leave
    a cut-off last line: it is skipped; a broken line before it is an error."""
    path = run_dir if run_dir.suffix == ".jsonl" else run_dir / "metrics.jsonl"
    if not path.is_file():
        raise ValueError(f"{path}: no metrics file (is {run_dir} a `heedful train` run directory?)")
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            if number == len(lines):
                break  # the truncated last line of a killed run
            raise ValueError(f"{path}, line {number}: not JSON ({e})") from e
    if not records:
        raise ValueError(f"{path}: no metrics recorded (empty file)")
    return records


def _series(records: list[dict], key: str, validation: bool) -> tuple[list, list]:
    """(steps, values) of `key`, last record per step winning (a resumed run repeats steps)."""
    by_step = {}
    for r in records:
        if (r.get("event") == "validation") == validation and key in r and "step" in r:
            by_step[r["step"]] = r[key]
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def _run_names(dirs: list[Path]) -> list[str]:
    """Run directories by their names, or their full paths where two names collide."""
    names = [d.name if d.suffix != ".jsonl" else d.parent.name for d in dirs]
    return [n if names.count(n) == 1 else str(d) for n, d in zip(names, dirs)]


def _panel(ax, title: str, key: str, validation: bool, runs: list[list[dict]]) -> None:
    """One of CURVES, a line per run (C0, C1, ... as in the legend)."""
    drawn = False
    for i, records in enumerate(runs):
        steps, values = _series(records, key, validation)
        if steps:
            ax.plot(
                steps,
                values,
                color=f"C{i % 10}",
                marker="o" if validation else None,
                markersize=3,
                linewidth=1.2,
            )
            drawn = True
    if not drawn:
        ax.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title)
    ax.grid(alpha=0.3)


def plot_curves(run_dirs: Sequence[str | Path], path: str | Path) -> Path:
    """Save training loss, validation loss, validation BLEU and learning rate against step,
    one line per run, from each run directory's metrics.jsonl.

    Raises ValueError naming the file when a run has no metrics (missing or empty file).
    """
    path = image_path(path)
    if not run_dirs:
        raise ValueError("no run directories given")
    dirs = [Path(d) for d in run_dirs]
    runs = [_read_metrics(d) for d in dirs]
    fig, axes = pyplot().subplots(2, 2, figsize=(11, 7.5), layout="constrained", sharex=True)
    for ax, (title, key, validation) in zip(axes.flat, CURVES):
        _panel(ax, title, key, validation, runs)
    for ax in axes[1]:
        ax.set_xlabel("step")
    axes[1][1].ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=f"C{i % 10}") for i in range(len(runs))]
    fig.legend(handles, _run_names(dirs), loc="outside lower center", ncols=min(len(runs), 4))
    return save(fig, path)
