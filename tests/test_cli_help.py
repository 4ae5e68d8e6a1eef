"""Help that is whole: every option of every command (the deferred ones included) says what it
does, and `heedful --help` lists each command with a summary that is not cut off with "...",
on a wide terminal and on a narrow one (a summary too long for its line wraps, never cut)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from heedful.cli import main


def _commands(group: click.Group, path: str = "heedful"):
    """(the command's path, the command) of every command under `group`, the group first."""
    yield path, group
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _commands(command, f"{path} {name}")
        else:
            yield f"{path} {name}", command


def test_every_option_of_every_command_has_help():
    missing = []
    names = main.context_settings["help_option_names"]  # click keeps the first help option made
    for path, command in _commands(main):
        context = click.Context(command, info_name=path, help_option_names=names)
        params = command.get_params(context)  # deferred ones too
        for param in params:
            if isinstance(param, click.Option) and not param.hidden and not param.help:
                missing.append(f"{path} {'/'.join(param.opts)}")
    assert not missing, f"options without help: {', '.join(missing)}"


def _summaries(output: str) -> dict[str, str]:
    """The Commands section of a group's --help: each command's summary, its wrapped lines
    joined."""
    section = output.split("\nCommands:\n", 1)[1].splitlines()
    summaries: dict[str, str] = {}
    name = None
    for line in section:
        if not line.strip():
            break
        words = line.split(maxsplit=1)
        if line.startswith("  ") and not line.startswith("   "):  # "  name  summary"
            name = words[0]
            summaries[name] = words[1] if len(words) > 1 else ""
        else:  # a wrapped summary's next line
            summaries[name] += " " + line.strip()
    return summaries


@pytest.mark.parametrize("width", [80, 50])
def test_no_command_summary_is_cut(width):
    result = CliRunner().invoke(main, ["--help"], terminal_width=width, prog_name="heedful")
    assert result.exit_code == 0, result.output
    summaries = _summaries(result.output)
    assert sorted(summaries) == sorted(main.commands)
    cut = {name: text for name, text in summaries.items() if text.endswith("...")}
    assert not cut, f"summaries cut at {width} columns: {cut}"
    assert all(summaries.values()), summaries
