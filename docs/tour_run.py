"""Run docs/tour.md as written, in a fresh directory, and put back what it printed and drew.

    python docs/tour_run.py               # the whole tour (its demos train to their budgets)
    python docs/tour_run.py --keep DIR    # run it in DIR and keep what it made there

Each ```bash block's commands run in order, as `tests/test_tour.py` runs them (that test with
small budgets, this with the tour's own); what they print replaces the ``` block right after
the ```bash block, where the tour shows one: log lines without their timestamps, and without
the progress lines (a terminal would draw a bar). The pictures the tour shows from a command's
files are copied into docs/img (PICTURES); the viewer's screenshots are docs/screenshots.py's,
run on the models this run made (`--transformer`, `--rnn`, `--captions`). The demos are budgeted
in steps, so the models, and every number below them, are those a reader's run makes, however
busy the machine; only the seconds differ.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
TOUR = DOCS / "tour.md"
# docs/img/NAME: the file a tour command wrote
PICTURES = {
    "tour-chat-attention.png": "chat-rnn/attention-rnn-bahdanau.png",
    "tour-curves-rnn.png": "curves-rnn.png",
    "tour-encoder-grid.png": "dates-transformer/encoder-grid.png",
    "tour-positional.png": "pe.png",
    "tour-cross-grid.png": "dates-transformer/cross-grid.png",
    "tour-cross.png": "dates-transformer/cross.png",
    "tour-curves.png": "curves.png",
}
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", re.M)  # logs.py's timestamps
PROGRESS = re.compile(r"^step \d+/\d+  loss .*\n", re.M)  # logs.step_line: a bar on a terminal
BLOCK = re.compile(r"^```bash\n(.*?)^```\n\n(```\n(.*?)^```\n)?", re.S | re.M)


def commands(block: str) -> list[str]:
    """A ```bash block's commands, continuation lines joined (as tests/test_tour.py reads them)."""
    joined = re.sub(r"\s*\\\n\s*", " ", block)
    return [line.strip() for line in joined.splitlines() if line.strip() and line[0] != "#"]


def run(command: str, where: Path) -> str:
    args = shlex.split(command)
    assert args[0] == "heedful", command
    done = subprocess.run(
        [sys.executable, "-m", "heedful", *args[1:]], cwd=where, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"{command}: exit {done.returncode}\n{done.stdout}{done.stderr}")
    print(f"ran: {command}", file=sys.stderr)
    return PROGRESS.sub("", STAMP.sub("", done.stdout))


def rewrite(text: str, where: Path) -> str:
    """The tour with each output block replaced by what its commands print now."""
    parts, end = [], 0
    for match in BLOCK.finditer(text):
        printed = "".join(run(command, where) for command in commands(match.group(1)))
        parts.append(text[end : match.start()])
        shown = f"```bash\n{match.group(1)}```\n"
        if match.group(2) is not None:  # the tour shows this block's output
            shown += f"\n```\n{printed}```\n"
        else:
            shown += "\n"
        parts.append(shown)
        end = match.end()
    return "".join(parts) + text[end:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="run in this directory and keep it")
    parser.add_argument("--no-screenshots", action="store_true", help="skip docs/screenshots.py")
    args = parser.parse_args()
    where = args.keep or Path(tempfile.mkdtemp(prefix="heedful-tour-"))
    where.mkdir(parents=True, exist_ok=True)
    TOUR.write_text(rewrite(TOUR.read_text(encoding="utf-8"), where), encoding="utf-8")
    for picture, made in PICTURES.items():
        shutil.copyfile(where / made, DOCS / "img" / picture)
    if not args.no_screenshots:
        models = ["--transformer", where / "dates-transformer" / "model-transformer",
                  "--rnn", where / "chat-rnn" / "model-rnn-bahdanau",
                  "--captions", where / "captions" / "model-cnn-transformer",
                  "--training", where / "dates-transformer"]  # fmt: skip
        subprocess.run([sys.executable, DOCS / "screenshots.py", *map(str, models)], check=True)
    if args.keep is None:
        shutil.rmtree(where)
    print(f"wrote {TOUR} and its pictures", file=sys.stderr)


if __name__ == "__main__":
    main()
