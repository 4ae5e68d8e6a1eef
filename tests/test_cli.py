"""The `heedful` command in process (click's CliRunner): help, option errors, exit statuses,
which errors print as one line and which show their traceback, --threads. What each command
does is tested where it is done (test_experiment, test_demo, test_export, test_cpu,
visualize/test_explain, test_hostile_*)."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import numpy as np
import pytest
from click.testing import CliRunner

from heedful.cli import main
from heedful.cli.errors import is_users_mistake
from heedful.config import ConfigError

HEAVY = ("torch", "numpy", "matplotlib", "fastapi", "uvicorn", "sacrebleu", "ctranslate2")


def run(*args: str, **kwargs) -> click.testing.Result:
    return CliRunner().invoke(main, list(args), prog_name="heedful", **kwargs)


def test_loading_the_cli_and_its_help_import_nothing_heavy():
    code = (
        "import sys\n"
        "import heedful.cli\n"
        f"heavy = {HEAVY!r}\n"
        "loaded = [m for m in heavy if m in sys.modules]\n"
        "heedful.cli.main(['--help'], standalone_mode=False)\n"
        "print(loaded, [m for m in heavy if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "translate" in out.stdout
    assert out.stdout.splitlines()[-1] == "[] []"


def test_the_group_lists_every_command_and_its_version():
    result = run("--help")
    assert result.exit_code == 0
    for name in main.commands:
        assert f"\n  {name} " in result.output
    result = run("--version")
    assert result.exit_code == 0 and "version" in result.output


@pytest.mark.parametrize("name", sorted(main.commands))
def test_each_command_shows_every_option_in_its_help(name):
    """Deferred options included: they are declared as the help is shown."""
    result = run(name, "-h")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: heedful {name} ")
    command = main.commands[name]
    options = [p for p in command.get_params(click.Context(command)) if p.opts[0] != "-h"]
    assert options
    for option in options:
        if isinstance(option, click.Option):
            assert option.opts[-1] in result.output, option.opts


USAGE_ERRORS = {
    "no such command": (["nonsense"], "No such command"),
    "translate: no model": (["translate"], "MODEL_DIR"),
    "translate: --max-chars below 0": (["translate", "m", "--max-chars", "-1"], "--max-chars"),
    "translate: --n-best 0": (["translate", "m", "--n-best", "0"], "--n-best"),
    "translate: --beam 0": (["translate", "m", "--beam", "0"], "--beam"),
    "translate: --batch-size 0": (["translate", "m", "--batch-size", "0"], "--batch-size"),
    "evaluate: no --ref": (["evaluate", "m", "--src", "s.txt"], "--ref"),
    "serve: a limit not a number": (["serve", "m", "--max-items", "many"], "--max-items"),
    "serve: --quantize int4": (["serve", "m", "--quantize", "int4"], "int4"),
    "export: no -o": (["export", "m"], "--output"),
    "export: unknown quantization": (["export", "m", "-o", "x", "--quantization", "int3"], "int3"),
    "attention: no output": (["attention", "m", "abc"], "give at least one of"),
    "attention: --n-best 0": (["attention", "m", "abc", "--json", "t", "--n-best", "0"], "0"),
    "attention: unknown kind": (["attention", "m", "abc", "--kind", "side"], "side"),
    "explain: unknown kind": (["explain", "m", "abc", "--kind", "side"], "side"),
    "positional: no picture": (["positional"], "--png"),
    "curves: no run": (["curves", "--png", "c.png"], "RUN_DIRS"),
    "average: no model": (["average", "-o", "x"], "MODEL_DIRS"),
    "train: no config": (["train"], "CONFIG_PATH"),
    "train: --threads 0": (["train", "c.yaml", "--threads", "0"], "--threads"),
    "demo: --max-steps not a number": (["demo", "--max-steps", "many"], "--max-steps"),
}


@pytest.mark.parametrize("args, words", USAGE_ERRORS.values(), ids=USAGE_ERRORS)
def test_a_command_line_click_cannot_parse_exits_2(args, words):
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("Usage: heedful") and words in result.output, result.output


def one_line_error(result: click.testing.Result) -> str:
    """The message of a user's mistake: exit status 1, one line, no traceback."""
    assert result.exit_code == 1, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.output.startswith("Error: ") and result.output.count("\n") == 1, result.output
    return result.output


def test_a_users_mistake_is_one_line_and_exits_1(tmp_path, reverse_model_dir):
    model, picture = str(reverse_model_dir), str(tmp_path / "x.png")
    assert "not found" in one_line_error(run("translate", str(tmp_path / "nowhere")))
    missing = str(tmp_path / "missing.txt")
    assert "missing.txt" in one_line_error(
        run("evaluate", model, "--src", missing, "--ref", missing)
    )
    assert "missing.yaml" in one_line_error(run("train", str(tmp_path / "missing.yaml")))
    # plain ValueErrors that heedful raises on purpose
    assert "empty sentence" in one_line_error(run("attention", model, " ", "--png", picture))
    assert "no metrics file" in one_line_error(run("curves", str(tmp_path), "--png", picture))
    assert "d_model" in one_line_error(run("positional", "--d-model", "0", "--png", picture))


def boom(error: Exception):
    def load(*args, **kwargs):
        raise error

    return load


def numpy_error(*args, **kwargs):
    return np.zeros(3).reshape(2)  # ValueError: cannot reshape array of size 3 into shape (2,)


@pytest.mark.parametrize(
    "load", [boom(IndexError("list index")), boom(TypeError("NoneType")), numpy_error]
)
def test_a_bug_shows_its_traceback(monkeypatch, tmp_path, load):
    """Not one of our errors, nor a ValueError that heedful raised on purpose: Python's report,
    so that a bug shows where it happened instead of passing for the user's mistake."""
    monkeypatch.setattr("heedful.inference.runtime.load_translator", load)
    result = run("translate", str(tmp_path))
    assert result.exit_code == 1 and "Error:" not in result.output
    assert isinstance(result.exception, (IndexError, TypeError, ValueError))
    assert not isinstance(result.exception, SystemExit)


def test_which_errors_count_as_the_users_mistake():
    from heedful.cpu import set_threads
    from heedful.tasks.dates import dates_task

    def caught(call) -> Exception:
        try:
            call()
        except Exception as error:
            return error
        raise AssertionError("no error")

    assert is_users_mistake(ConfigError("unknown config key x"))
    assert is_users_mistake(caught(lambda: open("/nonexistent/heedful")))
    assert is_users_mistake(ModuleNotFoundError("no ctranslate2", name="ctranslate2"))
    assert not is_users_mistake(ModuleNotFoundError("a typo", name="heedful.decodng"))
    assert is_users_mistake(caught(lambda: dates_task(-1, 0)))  # `raise ValueError` in heedful
    assert not is_users_mistake(caught(lambda: set_threads("x")))  # int("x") in heedful's code
    assert not is_users_mistake(caught(numpy_error))
    assert not is_users_mistake(ValueError("made here, never raised"))
    assert not is_users_mistake(caught(lambda: [][1]))


THREADED = {
    "demo": ("heedful.demo.run.run_demo", []),
    "translate": ("heedful.inference.runtime.load_translator", ["m"]),
    "evaluate": ("heedful.inference.runtime.load_translator", ["m", "--src", "s", "--ref", "r"]),
    "serve": ("heedful.server.serve", ["m"]),
}


@pytest.mark.parametrize("name", THREADED)
def test_threads_are_set_before_the_work_starts(monkeypatch, name):
    target, args = THREADED[name]
    calls = []
    monkeypatch.setattr("heedful.cpu.set_threads", lambda n: calls.append(("threads", n)))
    monkeypatch.setattr(target, lambda *a, **k: calls.append(("work",)) or 1 / 0)
    result = run(name, *args, "--threads", "3")
    assert calls == [("threads", 3), ("work",)], result.output
    assert isinstance(result.exception, ZeroDivisionError)  # a bug, with its traceback


def test_train_threads_is_the_config_key(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(
        "heedful.training.experiment.train_from_config",
        lambda config, *a, **k: seen.update(c=config),
    )
    config = tmp_path / "tiny.yaml"
    config.write_text("{}\n")
    run_dir = str(tmp_path / "run")
    result = run("train", str(config), "--threads", "2", "--run-dir", run_dir)
    assert result.exit_code == 0, result.output
    assert seen["c"].train.threads == 2 and result.output == f"run directory: {run_dir}\n"


def test_n_best_widens_the_beam(tmp_path, reverse_model_dir):
    """Three alternatives need three beams, whatever the model's generation.json says (1)."""
    result = run("translate", str(reverse_model_dir), "--n-best", "3", input="abc\nhgf\n")
    assert result.exit_code == 0, result.output
    assert [len(row.split("\t")) for row in result.output.splitlines()] == [3, 3]
    trace = tmp_path / "t.json"
    result = run("attention", str(reverse_model_dir), "abc", "--json", str(trace), "--n-best", "2")
    assert result.exit_code == 0, result.output
    data = json.loads(trace.read_text())
    assert len(data["hypotheses"]) == 2 and data["search"]["num_beams"] == 2


# ---- see.py: attention and explain refuse what the model lacks before translating ----


@pytest.fixture
def rnn_model_dir(tmp_path):
    """An untrained Bahdanau RNN over the letters a-j, saved as a model directory."""
    from heedful.checkpoint.model_dir import save_model_dir
    from heedful.config import ModelConfig
    from heedful.data.tokenizers import CharTokenizer
    from heedful.models.build import build_model

    tokenizer = CharTokenizer("abcdefghij ")
    config = ModelConfig(arch="rnn", d_model=8, hidden_size=16, dropout=0.0)
    model = build_model(config, len(tokenizer), len(tokenizer))
    return save_model_dir(tmp_path / "rnn", model, config, tokenizer, tokenizer)


def _no_translating(monkeypatch):
    from heedful.inference.translator import Translator

    def search(*args, **kwargs):
        raise AssertionError("translated before refusing")

    monkeypatch.setattr(Translator, "search", search)


def test_see_an_rnn_view_it_lacks_is_refused_before_translating(
    monkeypatch, tmp_path, rnn_model_dir
):
    _no_translating(monkeypatch)
    model, picture = str(rnn_model_dir), str(tmp_path / "x.png")
    error = one_line_error(run("attention", model, "abc", "--kind", "encoder", "--png", picture))
    assert "no encoder self-attention" in error and "--kind cross" in error
    error = one_line_error(run("explain", model, "abc", "--head", "3"))
    assert "head 3: an RNN has one attention distribution" in error and "--head" in error
    error = one_line_error(run("explain", model, "abc", "--kind", "decoder"))
    assert "--kind cross" in error


def test_see_a_layer_or_head_out_of_range_names_the_range(monkeypatch, tmp_path, reverse_model_dir):
    """The reverse model has 1 layer of 4 heads: `--layer 3` says so, before translating."""
    _no_translating(monkeypatch)
    model, picture = str(reverse_model_dir), str(tmp_path / "x.png")
    error = one_line_error(run("attention", model, "abc", "--layer", "3", "--png", picture))
    assert "layer 3 out of range: the model has 1 decoder layer" in error
    error = one_line_error(run("attention", model, "abc", "--head", "5", "--png", picture))
    assert "head 5 out of range: the model has 4 heads" in error
    error = one_line_error(run("explain", model, "abc", "--layer", "3"))
    assert "layer 3 out of range: the model has 1 decoder layer" in error


def test_see_the_picture_labels_the_source_as_the_model_saw_it(
    monkeypatch, tmp_path, reverse_model_dir
):
    import heedful.visualize.heatmap as heatmap

    drawn = {}
    monkeypatch.setattr(heatmap, "plot_trace", lambda trace, *a, **k: drawn.setdefault("t", trace))
    result = run("attention", str(reverse_model_dir), "ab猫c", "--png", str(tmp_path / "x.png"))
    assert result.exit_code == 0, result.output
    assert drawn["t"].source_tokens == ["a", "b", "<unk> (猫)", "c"]


def test_see_explain_html_opens_the_viewer_on_the_calculation(tmp_path, reverse_model_dir):
    page = tmp_path / "step.html"
    result = run("explain", str(reverse_model_dir), "abc", "--position", "2", "--html", str(page))
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    assert "<pre>" not in text and "<script" in text
