"""benchmarks/report.py: a run on another CPU gets its own result file and section, so one
CPU's figures never overwrite another's in docs/benchmarks.md."""

from __future__ import annotations

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
