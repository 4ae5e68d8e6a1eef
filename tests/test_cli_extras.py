"""A command that needs an optional library which is not installed says so in one line naming
the extra that installs it (`pip install 'heedful[serve]'`), as `translate --engine
ctranslate2` and `export --format huggingface` did already; a missing module is simulated by
putting None in sys.modules, which makes its import fail as a missing one does."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from heedful.cli import main


def _one_line_error(result) -> str:
    assert result.exit_code == 1, (result.output, result.exception)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("module", ["uvicorn", "fastapi", "fastapi_offline"])
def test_serve_without_the_serve_extra_names_it(module, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, module, None)
    # a model directory that does not exist: the extra is checked before any model is loaded
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "no-model")])
    line = _one_line_error(result)
    assert "pip install 'heedful[serve]'" in line and module in line, line
    assert "no-model" not in line


def test_any_command_names_the_extra_of_a_library_it_misses(monkeypatch, tmp_path):
    """The net under every command (cli/errors.py): a missing optional library that no check
    of its own caught still gets the extra's name."""
    import heedful.checkpoint.model_dir

    def needs_tensorboard(*args, **kwargs):
        import tensorboard  # noqa: F401

    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setattr(heedful.checkpoint.model_dir, "average_checkpoints", needs_tensorboard)
    result = CliRunner().invoke(main, ["average", "a", "b", "-o", str(tmp_path / "out")])
    line = _one_line_error(result)
    assert "heedful average needs tensorboard" in line, line
    assert "pip install 'heedful[tensorboard]'" in line, line


@pytest.mark.parametrize(
    "module, extra", [("transformers", "hf"), ("ctranslate2", "fast"), ("torchvision", "vision")]
)
def test_each_optional_library_has_its_extra(module, extra, monkeypatch, tmp_path):
    import heedful.checkpoint.model_dir

    def needs(*args, **kwargs):
        __import__(module)

    monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setattr(heedful.checkpoint.model_dir, "average_checkpoints", needs)
    result = CliRunner().invoke(main, ["average", "a", "b", "-o", str(tmp_path / "out")])
    assert f"pip install 'heedful[{extra}]'" in _one_line_error(result)
