"""Hostile output directories (issue 26): a command replaces only what it made, never its input.

Each row of CASES builds a small world (a model directory, a trained run, a SentencePiece model
for the Hugging Face export, exports of both formats, each a copy), adds the hostile target and
runs one writing command at it: `heedful export` (CTranslate2), `export --format huggingface`,
`heedful average` or `heedful train` (`--force` or not), through the CLI or, where click would
refuse first, the Python function. The command must stop with an error naming the target and
the words given, exit status 1 and no traceback, and leave every file of the world, the user's
foreign files first, byte for byte as it was: nothing is touched before the refusal.

test_each_command_replaces_its_own_earlier_output shows the other side: a missing or empty
directory, and what each command wrote before (also by an earlier heedful, without a marker),
are still written and replaced.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from test_hostile_training import make_env

from heedful.checkpoint.model_dir import average_checkpoints, load_model_dir
from heedful.cli import main
from heedful.hf.export import MARKER
from heedful.inference.export import export_ctranslate2, import_ctranslate2
from heedful.output_dirs import OutputError

import_ctranslate2()  # the fast and hf extras are test dependencies: no row is skipped


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """A finished `heedful train` run (tests/test_hostile_training.py's tiny dates config)."""
    env = make_env(tmp_path_factory.mktemp("train"))
    result = env.train()
    assert result.exit_code == 0, result.output
    return env


@pytest.fixture(scope="session")
def exports(reverse_model_dir, tmp_path_factory):
    """A SentencePiece Marian-able model, and a CTranslate2 and a Hugging Face export."""
    from hf.test_export import heedful_model_dir

    from heedful.hf.export import export_huggingface

    root = tmp_path_factory.mktemp("exports")
    hf_model = heedful_model_dir(root / "hfmodel")
    export_ctranslate2(reverse_model_dir, root / "ct2")
    export_huggingface(hf_model, root / "hf")
    return root


@pytest.fixture
def world(tmp_path, reverse_model_dir, trained_run, exports) -> Path:
    w = tmp_path / "w"
    w.mkdir()
    shutil.copytree(reverse_model_dir, w / "model")
    shutil.copytree(trained_run.run_dir, w / "run", symlinks=True)
    for name in ("hfmodel", "ct2", "hf"):
        shutil.copytree(exports / name, w / name)
    return w


def snapshot(root: Path) -> dict[str, object]:
    """Every entry under root: a link's target, a file's bytes, a directory as such."""
    found: dict[str, object] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = ("link", os.readlink(path))
            elif path.is_dir():
                found[key] = "dir"
            else:
                found[key] = path.read_bytes()
    return found


# --- hostile targets: each makes something in the world --------------------------------------


def foreign_dir(name: str, files=("keep",)):
    def make(w: Path) -> None:
        for file in files:
            (w / name / file).parent.mkdir(parents=True, exist_ok=True)
            (w / name / file).write_text("the user's\n")

    return make


def home_like(w: Path) -> None:
    foreign_dir("home", (".bashrc", "Documents/notes.txt", "config.yaml"))(w)


def add(path: str, content: str = "the user's\n"):
    def make(w: Path) -> None:
        (w / path).write_text(content)

    return make


def link(name: str, to: str):
    def make(w: Path) -> None:
        os.symlink(w / to, w / name)

    return make


def downloaded_marian(w: Path) -> None:
    """A Marian model as the Hub gives it: no export of ours."""
    foreign_dir("opus", ("README.md", "pytorch_model.bin", "vocab.json", "source.spm"))(w)
    (w / "opus" / "config.json").write_text('{"model_type": "marian"}')


def data_in_the_run(w: Path) -> None:
    """The training corpus kept in the run directory (and named in data.train_src)."""
    data = yaml.safe_load((w / "run" / "config.yaml").read_text())["data"]
    shutil.copy(data["train_src"], w / "run" / "train.src")


def both(*makes):
    def make(w: Path) -> None:
        for m in makes:
            m(w)

    return make


@dataclass
class Case:
    args: tuple[str, ...]  # the command line; {W}: the world, {CONFIG}: the run's config file
    make: Callable[[Path], None] | None  # the hostile target
    words: tuple[str, ...]  # the error must hold each
    cwd: str | None = None  # run in this directory of the world
    call: Callable[[Path], None] | None = None  # the Python API instead of the CLI


def row(id, args, make, *words, cwd=None, call=None):
    return pytest.param(Case(tuple(args.split()), make, words, cwd, call), id=id)


EXPORT, HF = "export {W}/model -o", "export {W}/hfmodel --format huggingface -o"
AVERAGE, TRAIN = "average {W}/model -o", "train {CONFIG} --no-progress --run-dir"
NOT_CT2, NOT_HF = "not a heedful CTranslate2 export", "not a heedful Hugging Face export"
NOT_MODEL, NOT_RUN = "not a heedful model directory", "not a heedful run directory"
CWD, LINK = "the current directory is inside it", "a symbolic link"

CASES = [
    # heedful export (CTranslate2)
    row("export-dir-with-a-foreign-file", f"{EXPORT} {{W}}/d", foreign_dir("d"), NOT_CT2, "'keep'"),
    row("export-home-like-dir", f"{EXPORT} {{W}}/home", home_like, NOT_CT2, "'.bashrc'"),
    row("export-run-best-into-the-run", "export {W}/run/best -o {W}/run", None, "holds the input"),
    row("export-model-into-itself", f"{EXPORT} {{W}}/model", None, "is the input"),
    row("export-into-the-inputs-subdir", f"{EXPORT} {{W}}/model/out", None,
        "lies inside the input"),
    row("export-over-a-run-dir", f"{EXPORT} {{W}}/run", None, NOT_CT2, "'checkpoints'"),
    row("export-over-a-model-dir", "export {W}/model -o {W}/hfmodel", None, NOT_CT2),
    row("export-over-an-hf-export", f"{EXPORT} {{W}}/hf", None, NOT_CT2),
    row("export-over-its-export-with-a-readme", f"{EXPORT} {{W}}/ct2", add("ct2/README.md"),
        "a heedful CTranslate2 export, but it also holds 'README.md'"),
    row("export-over-its-export-foreign-inside", f"{EXPORT} {{W}}/ct2",
        add("ct2/ctranslate2/notes.txt"), "also holds 'ctranslate2'"),
    row("export-into-a-symlink-to-an-export", f"{EXPORT} {{W}}/ln", link("ln", "ct2"), LINK),
    row("export-into-dot", f"{EXPORT} .", foreign_dir("here"), CWD, cwd="here"),
    row("export-into-dotdot", f"{EXPORT} ..", foreign_dir("here", ("sub/keep",)), CWD,
        cwd="here/sub"),
    row("export-under-a-file", f"{EXPORT} {{W}}/file/out", add("file"), "a file, not a directory"),
    row("export-api-onto-a-file", "", add("file"), "a file, not a directory",
        call=lambda w: export_ctranslate2(w / "model", w / "file")),
    # heedful export --format huggingface
    row("hf-dir-with-a-foreign-file", f"{HF} {{W}}/d", foreign_dir("d"), NOT_HF, "'keep'"),
    row("hf-model-into-itself", f"{HF} {{W}}/hfmodel", None, "is the input"),
    row("hf-over-a-downloaded-marian", f"{HF} {{W}}/opus", downloaded_marian, NOT_HF),
    row("hf-over-a-ct2-export", f"{HF} {{W}}/ct2", None, NOT_HF),
    row("hf-over-its-export-with-notes", f"{HF} {{W}}/hf", add("hf/notes.txt"),
        "a heedful Hugging Face export, but it also holds 'notes.txt'"),
    row("hf-over-its-export-marker-damaged", f"{HF} {{W}}/hf", add("hf/heedful-export.json", "["),
        NOT_HF),
    row("hf-into-a-symlink", f"{HF} {{W}}/ln", link("ln", "hf"), LINK),
    # heedful average
    row("average-dir-with-a-foreign-file", f"{AVERAGE} {{W}}/d", foreign_dir("d"), NOT_MODEL),
    row("average-into-one-of-its-inputs", "average {W}/model {W}/model -o {W}/model", None,
        "is the input"),
    row("average-into-the-run-it-reads", "average {W}/run/best -o {W}/run", None,
        "holds the input"),
    row("average-over-a-ct2-export", f"{AVERAGE} {{W}}/ct2", None, NOT_MODEL),
    row("average-over-a-checkpoint", f"{AVERAGE} {{W}}/run/checkpoints/step-00000004", None,
        "a heedful model directory, but it also holds 'training_state.json'"),
    row("average-over-a-model-dir-with-a-readme", f"{AVERAGE} {{W}}/hfmodel",
        add("hfmodel/README.md"), "also holds 'README.md'"),
    row("average-into-dot", f"{AVERAGE} .", foreign_dir("here"), CWD, cwd="here"),
    row("average-api-onto-a-file", "", add("file"), "a file, not a directory",
        call=lambda w: average_checkpoints([w / "model"], w / "file")),
    # heedful train
    row("train-force-run-with-a-foreign-file", f"{TRAIN} {{W}}/run --force", add("run/notes.txt"),
        "also holds 'notes.txt'", "nothing was deleted"),
    row("train-force-foreign-file-in-checkpoints", f"{TRAIN} {{W}}/run --force",
        add("run/checkpoints/keep.txt"), "also holds 'checkpoints'"),
    row("train-force-foreign-file-in-a-checkpoint", f"{TRAIN} {{W}}/run --force",
        add("run/checkpoints/step-00000004/notes.md"), "also holds 'checkpoints'"),
    row("train-force-data-inside-the-run", f"{TRAIN} {{W}}/run --force --set "
        "data.train_src={W}/run/train.src", data_in_the_run, "also holds 'train.src'"),
    row("train-force-latest-a-file", f"{TRAIN} {{W}}/run --force",
        both(lambda w: os.remove(w / "run" / "latest"), add("run/latest")), "'latest'"),
    row("train-force-home-like-dir", f"{TRAIN} {{W}}/home --force", home_like, NOT_RUN),
    row("train-into-the-users-config-yaml", f"{TRAIN} {{W}}/d",
        foreign_dir("d", ("config.yaml", "metrics.jsonl")), NOT_RUN, "'config.yaml'"),
    row("train-force-run-dir-a-file", f"{TRAIN} {{W}}/file --force", add("file"),
        "a file, not a directory"),
    row("train-under-a-file", f"{TRAIN} {{W}}/file/run", add("file"), "a file, not a directory"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_output_directory(case: Case, world, trained_run, monkeypatch):
    if case.make is not None:
        case.make(world)
    before = snapshot(world.parent)
    if case.cwd is not None:
        monkeypatch.chdir(world / case.cwd)
    if case.call is not None:
        with pytest.raises(OutputError) as caught:
            case.call(world)
        output = str(caught.value)
    else:
        fill = {"{W}": str(world), "{CONFIG}": str(trained_run.config)}
        args = list(case.args)
        for key, value in fill.items():
            args = [a.replace(key, value) for a in args]
        result = CliRunner().invoke(main, args)
        output = result.output
        assert result.exit_code == 1, output
        assert "Traceback" not in output and isinstance(result.exception, SystemExit), output
    assert all(word in output for word in case.words), output
    assert snapshot(world.parent) == before, "the refused command changed the world"


def forget_markers(w: Path) -> None:
    """Outputs as an earlier heedful left them: no marker file in an export, no train.lock."""
    os.remove(w / "hf" / "heedful-export.json")
    os.remove(w / "run" / "train.lock")


@pytest.mark.parametrize(
    "args",
    [
        "export {W}/model -o {W}/ct2",
        "export {W}/model -o {W}/empty",
        "export {W}/hfmodel --format huggingface -o {W}/hf",
        "average {W}/model -o {W}/hfmodel",
        "train {CONFIG} --no-progress --force --set train.max_steps=4 --run-dir {W}/run",
    ],
    ids=["ct2-export", "empty-dir", "hf-export-without-marker", "model-dir", "run-without-lock"],
)
def test_each_command_replaces_its_own_earlier_output(args, world, trained_run):
    forget_markers(world)
    (world / "empty").mkdir()
    argv = [a.replace("{W}", str(world)).replace("{CONFIG}", str(trained_run.config))
            for a in args.split()]  # fmt: skip
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    written = Path(argv[argv.index("-o") + 1] if "-o" in argv else argv[-1])
    if "train" in argv:  # started over: the first run ended at step 8
        assert (written / "latest").resolve().name == "step-00000004"
    elif "huggingface" in argv:
        marker = json.loads((written / "heedful-export.json").read_text())
        assert sorted(p.name for p in written.iterdir()) == sorted(marker["files"] + [MARKER])
    elif "average" in argv:
        averaged, given = load_model_dir(written), load_model_dir(world / "model")
        assert averaged.model_config == given.model_config  # the reverse model, not hfmodel
    else:
        assert (written / "ctranslate2" / "model.bin").is_file()
