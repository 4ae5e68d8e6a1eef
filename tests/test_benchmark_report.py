"""benchmarks/report.py: a run on another CPU gets its own result file and section, so one
CPU's figures never overwrite another's in docs/benchmarks.md."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from report import cpu, variant, write_section  # noqa: E402

BEGIN, END = "<!-- speed:begin -->", "<!-- speed:end -->"


def test_the_default_run_keeps_its_file_and_markers(tmp_path):
    assert variant(tmp_path / "speed.json", BEGIN, END, None) == (
        tmp_path / "speed.json",
        BEGIN,
        END,
    )


def test_a_named_cpu_gets_its_own_file_and_markers(tmp_path):
    path, begin, end = variant(tmp_path / "speed.json", BEGIN, END, "amd-epyc-avx2")
    assert path == tmp_path / "speed-amd-epyc-avx2.json"
    assert (begin, end) == (
        "<!-- speed-amd-epyc-avx2:begin -->",
        "<!-- speed-amd-epyc-avx2:end -->",
    )


def test_two_cpus_sections_live_side_by_side(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n" + BEGIN + "\nold Xeon figures\n" + END + "\n\n## After\n")
    _, begin, end = variant(doc, BEGIN, END, "amd-epyc-avx2")
    write_section(doc, begin, end, f"{begin}\nEPYC figures\n{end}")
    write_section(doc, begin, end, f"{begin}\nEPYC figures, run again\n{end}")
    write_section(doc, BEGIN, END, f"{BEGIN}\nnew Xeon figures\n{END}")
    text = doc.read_text()
    assert "new Xeon figures" in text and "EPYC figures, run again" in text
    assert "old Xeon figures" not in text and "EPYC figures\n" not in text
    assert text.count("## After") == 1 and text.count(begin) == 1


@pytest.mark.parametrize("name", ["AMD EPYC", "../other", "epyc/avx2", "-epyc", "épyc"])
def test_names_that_could_escape_or_collide_are_refused(tmp_path, name):
    with pytest.raises(SystemExit, match="--cpu"):
        variant(tmp_path / "s.json", BEGIN, END, name)


def test_the_cpu_description_names_only_known_vector_extensions():
    described = cpu()
    assert isinstance(described["model"], str) and described["model"]
    assert set(described["flags"]) <= {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16"}


def test_every_benchmark_script_imports():
    """The scripts import each other's helpers (decode_speed_report.shared, report.machine):
    moving a helper must not leave a script that fails before it measures anything."""
    folder = Path(__file__).resolve().parent.parent / "benchmarks"
    names = sorted(p.stem for p in folder.glob("*.py"))
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    done = subprocess.run(
        [sys.executable, "-c", code, *names], cwd=folder, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "decode_speed_report" in names and "profile_training" in names


def quality_result(config: str, bleu: float, cpu: str | None) -> dict:
    """A result of benchmarks/multi30k_quality.py with the fields its report reads."""
    return {
        "config": config, "cpu": cpu, "seed": 1, "date": "2026-12-06", "machine": "m",
        "command": "c", "budget_seconds": 1800.0, "budget_steps": None, "load": None,
        "steps": 100, "epochs": 1, "target_tokens_per_second": 10, "precision": "float32",
        "bleu": bleu, "chrf": 1.0, "ter": 1.0, "signature": "s", "beam": 5,
        "by_length": [{"bucket": "1-10", "sentences": 1, "bleu": bleu}],
    }  # fmt: skip


def test_each_cpus_quality_section_reports_its_own_runs_only(tmp_path, monkeypatch):
    import multi30k_report

    monkeypatch.setattr(multi30k_report, "RESULTS", tmp_path)
    for name, result in {
        "multi30k-transformer-tiny.json": quality_result("transformer-tiny", 38.77, None),
        "multi30k-transformer-tiny-zen4.json": quality_result("transformer-tiny", 39.04, "zen4"),
    }.items():
        (tmp_path / name).write_text(json.dumps(result))
    default, zen4 = multi30k_report.report(None), multi30k_report.report("zen4")
    assert "38.77" in default and "39.04" not in default
    assert "39.04" in zen4 and "38.77" not in zen4
    assert "bottleneck.png" in default and "bottleneck.png" not in zen4  # drawn from default
    assert zen4.startswith("<!-- multi30k-quality-zen4:begin -->\n## Multi30k quality")
    assert default.startswith("<!-- multi30k-quality:begin -->\n## Multi30k quality")


def decode_result(batch_size: int | None, seconds: float) -> dict:
    """A decode_speed.py result as it writes one (batch_size: None for runs before the option)."""
    way = {
        "sentences_per_s": 500 / seconds,
        "seconds": [seconds],
        "vs_heedful": 1.0,
        "cpu_vs_heedful": 1.0,
        "same_as_heedful": 1.0,
    }
    profile = {"sentences": 256, "rows": {"products": 1.0}, "wall": 2.0, "scalar_reads": 3}
    result = {
        "date": "2026-12-07",
        "machine": "a CPU",
        "avx2": False,
        "cpu": "zen3",
        "threads": 1,
        "load": [0.1, 0.2],
        "command": "python benchmarks/decode_speed.py",
        "sentences": 500,
        "rounds": 2,
        "searches": {"1": {"heedful": way}},
        "profiles": {"1": profile},
    }
    return result if batch_size is None else result | {"batch_size": batch_size}


def test_a_decoding_run_names_its_batch_size_where_it_is_not_the_sections():
    from decode_speed_report import BATCH, report

    pieced = decode_result(1, 3.0) | {"pieces": 20}
    runs = [decode_result(None, 2.5), decode_result(BATCH, 2.0), decode_result(1, 4.0), pieced]
    text = report(runs + [decode_result(BATCH, 1.0) | {"pieces": 1}])
    headers = [line for line in text.splitlines() if line.startswith("**zen3, native")]
    assert len(headers) == 5
    assert [", batches of 1" in h for h in headers] == [False, False, True, True, False]
    assert [" in 20 pieces." in h for h in headers] == [False, False, False, True, False]
    assert sum("pieces" in h for h in headers) == 1  # one piece: as runs before the option
    assert f"batch {BATCH}." in text  # the section's own, in its introduction


def test_a_rounds_pieces_are_whole_batches_covering_every_sentence():
    from decode_speed import pieces

    def spans(sentences, batch, count):
        return pieces(argparse.Namespace(sentences=sentences, batch_size=batch, pieces=count))

    assert spans(500, 64, 1) == [(0, 500)]
    assert spans(500, 64, 4) == [(0, 128), (128, 256), (256, 384), (384, 500)]
    assert spans(100, 1, 20) == [(i, i + 5) for i in range(0, 100, 5)]
    assert spans(10, 1, 30) == [(i, i + 1) for i in range(10)]  # no more pieces than batches
    for sentences, batch, count in [(500, 64, 3), (97, 8, 5), (1, 64, 4)]:
        got = spans(sentences, batch, count)
        assert got[0][0] == 0 and got[-1][1] == sentences and len(got) <= count
        assert all(a[1] == b[0] and (a[1] - a[0]) % batch == 0 for a, b in zip(got, got[1:]))
