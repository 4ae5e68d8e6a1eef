"""The shape of the package (issue 10, ../shared/STYLE.md): small modules and functions, and
imports that only point down the layers, so that a newcomer can read it in order."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "heedful"
PYTHON = sorted(SRC.rglob("*.py"))
SCRIPTS = sorted(SRC.rglob("*.js"))
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60


def name(path: Path) -> str:
    return str(path.relative_to(SRC.parent))


def imported(path: Path) -> set[str]:
    """Every heedful module `path` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m == "heedful" or m.startswith("heedful.")}


def long_python_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES
    ]


JS_FUNCTION = re.compile(r"\bfunction\b[^(]*\([^)]*\)\s*\{|=>\s*\{")


def long_js_functions(text: str) -> list[str]:
    """Functions longer than the limit, by matching braces from each `function ... {` or
    `=> {` (strings and regular expressions holding braces are rare in our assets)."""
    lines, found = text.splitlines(), []
    for start, line in enumerate(lines):
        if not JS_FUNCTION.search(line):
            continue
        depth, opened = 0, False
        for end in range(start, len(lines)):
            depth += lines[end].count("{") - lines[end].count("}")
            opened = opened or "{" in lines[end]
            if opened and depth <= 0:
                break
        if end - start + 1 > MAX_FUNCTION_LINES:
            found.append(f"line {start + 1} ({end - start + 1} lines): {line.strip()[:50]}")
    return found


@pytest.mark.parametrize("path", PYTHON + SCRIPTS, ids=name)
def test_modules_stay_small(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{name(path)}: {lines} lines"


@pytest.mark.parametrize("path", PYTHON, ids=name)
def test_python_functions_stay_short(path):
    assert long_python_functions(path) == []


@pytest.mark.parametrize("path", SCRIPTS, ids=name)
def test_script_functions_stay_short(path):
    assert long_js_functions(path.read_text(encoding="utf-8")) == []


def test_the_function_checks_can_fail():
    body = "\n".join(f"  x{i} = 1" for i in range(MAX_FUNCTION_LINES))
    assert long_js_functions("function f() {\n" + body + "\n}")
    assert not long_js_functions("function f() {\n  return 1;\n}")


# (module prefix, what it must never import): STYLE.md's layers
FORBIDDEN = [
    ("heedful.config", ("heedful.",)),  # config.py reads only its own configfile.py
    ("heedful.configfile", ("heedful.",)),
    ("heedful.scores", ("heedful.",)),  # a torch-free table: only its modules, to build them
    ("heedful.attention", ("heedful.config", "heedful.models", "heedful.data")),
    ("heedful.rnn_attention", ("heedful.config", "heedful.models", "heedful.data")),
    ("heedful.models", ("heedful.data", "heedful.training", "heedful.experiment")),
    ("heedful.data", ("heedful.models", "heedful.training", "heedful.decoding")),
    ("heedful.decoding", ("heedful.training", "heedful.translator", "heedful.visualize")),
    ("heedful.captioner", ("heedful.training", "heedful.experiment", "heedful.visualize")),
    ("heedful.server", ("heedful.training", "heedful.experiment", "heedful.cli")),
    ("heedful.visualize", ("heedful.training", "heedful.server", "heedful.cli")),
    ("heedful", ("heedful.cli",)),  # nothing imports the CLI
]
# What a layer may import of what FORBIDDEN denies it: config.py checks model.attention against
# the score table, which imports no heedful module at its top (nor torch), and the table builds
# the modules it declares.
ALLOWED = {"heedful.config": ("heedful.scores",), "heedful.scores": ("heedful.rnn_attention",)}


@pytest.mark.parametrize("path", PYTHON, ids=name)
def test_imports_point_down_the_layers(path):
    module = name(path).removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    for prefix, forbidden in FORBIDDEN:
        if module == prefix or module.startswith(prefix + "."):
            bad = [
                m
                for m in imported(path)
                if m.startswith(forbidden)
                and not m.startswith(prefix)
                and m not in ALLOWED.get(prefix, ())
                and module != "heedful.cli"
                and not module.startswith("heedful.cli.")
                and module != "heedful.__main__"
            ]
            assert bad == [], f"{module} imports {bad}"
