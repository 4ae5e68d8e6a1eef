"""Training curves from metrics.jsonl: several runs, a killed run's cut-off line, clear refusals."""

import json

import pytest

from heedful.visualize.curves import plot_curves


def write_metrics(run_dir, records, tail: str = ""):
    run_dir.mkdir(parents=True)
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (run_dir / "metrics.jsonl").write_text(lines + tail, encoding="utf-8")
    return run_dir


def training_records(steps, scale=1.0):
    for step in steps:
        yield {"step": step, "train_loss": scale * 5 / step, "lr": 1e-3 * min(1, step / 30)}
        if step % 20 == 0:
            yield {"event": "validation", "step": step, "loss": scale * 6 / step,
                   "bleu": 2.0 * step ** 0.5, "chrf": 10.0}  # fmt: skip


def test_training_curves_of_several_runs(tmp_path, png_size):
    a = write_metrics(tmp_path / "transformer", training_records(range(10, 101, 10)))
    killed = write_metrics(
        tmp_path / "rnn-bahdanau",
        training_records(range(10, 61, 10), 1.5),
        tail='{"step": 70, "train_lo',  # SIGKILL mid-write
    )
    no_validation = write_metrics(tmp_path / "short", training_records([5, 15]))
    png_size(plot_curves([a, killed, no_validation], tmp_path / "curves.png"))
    assert b"%PDF" in plot_curves([a], tmp_path / "curves.pdf").read_bytes()[:100]


def test_training_curves_refuse_runs_without_metrics(tmp_path):
    good = write_metrics(tmp_path / "good", training_records([10, 20]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"empty[/\\]metrics.jsonl: no metrics file"):
        plot_curves([good, tmp_path / "empty"], tmp_path / "c.png")
    (tmp_path / "empty" / "metrics.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"empty[/\\]metrics.jsonl: no metrics recorded"):
        plot_curves([tmp_path / "empty"], tmp_path / "c.png")
    broken = write_metrics(tmp_path / "broken", [], tail='{"step": 1\n{"step": 2}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl, line 1: not JSON"):
        plot_curves([broken], tmp_path / "c.png")
    with pytest.raises(ValueError, match="'.txt' is not supported"):
        plot_curves([good], tmp_path / "c.txt")
