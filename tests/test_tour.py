"""docs/tour.md runs as written: every command of its ```bash blocks, in order, in a fresh
directory, succeeds and writes the files it names; every picture it shows exists.

The tour's `heedful demo` runs train for a minute or two each; here each trains for a few
dozen steps on a few hundred pairs (appended options, which win over the tour's own), enough
for every later command to find a model of the right shape: same layers, heads and kinds.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from heedful.cli import main

DOCS = Path(__file__).resolve().parents[1] / "docs"
TOUR = DOCS / "tour.md"
SMALL_DEMO = ["--max-steps", "30", "--train-size", "600", "--no-progress"]
WRITES = ("--png", "--svg", "--pdf", "--html", "--json")  # options naming a file to write


def tour_commands(text: str) -> list[str]:
    """The commands of the ```bash blocks, continuation lines joined, comments left out."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M):
        joined = re.sub(r"\s*\\\n\s*", " ", block)
        commands += [c.strip() for c in joined.splitlines() if c.strip() and c[0] != "#"]
    return commands


def written_files(args: list[str]) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg in WRITES]


def test_the_tour_has_commands():
    commands = tour_commands(TOUR.read_text(encoding="utf-8"))
    names = {shlex.split(c)[1] for c in commands}
    assert {"demo", "explain", "attention", "positional", "curves"} <= names
    assert tour_commands("```bash\nheedful a \\\n   --b c\n# note\n```\n") == ["heedful a --b c"]


def test_every_picture_the_tour_shows_exists():
    text = TOUR.read_text(encoding="utf-8")
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert pictures and [p for p in pictures if not (DOCS / p).is_file()] == []


def test_every_command_in_the_tour_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command in tour_commands(TOUR.read_text(encoding="utf-8")):
        args = shlex.split(command)
        assert args[0] == "heedful", command
        if args[1] == "demo":
            args += SMALL_DEMO
        result = CliRunner().invoke(main, args[1:])
        if result.exception and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"{command}\n{result.output}") from result.exception
        assert result.exit_code == 0, f"{command}\n{result.output}"
        for path in written_files(args):
            assert (tmp_path / path).is_file(), f"{command} did not write {path}"


@pytest.mark.parametrize("layers", ["--layer 3", "--layer=3"])
def test_the_tour_asks_for_no_layer_the_demo_models_lack(layers):
    """The demo's Transformer has 2 layers, its RNNs 1 (the run above checks it too)."""
    assert layers not in TOUR.read_text(encoding="utf-8")
