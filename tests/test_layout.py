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


# The stages, in the order a newcomer reads them (README, "Reading the code"): a module imports
# only from its own stage and the stages above it in this list. The first seven are plain
# helpers of every stage (files, JSON, output directories, the machine and its allocator,
# logs, scores of outputs), as README's map of the code lists them.
STAGES = [
    "heedful.io",
    "heedful.safejson",
    "heedful.output_dirs",
    "heedful.cpu",
    "heedful.allocator",
    "heedful.logs",
    "heedful.evaluation",
    "heedful.config",
    "heedful.layers",
    "heedful.models",
    "heedful.data",
    "heedful.tasks",
    "heedful.checkpoint",
    "heedful.search",
    "heedful.hf",
    "heedful.inference",
    "heedful.visualize",
    "heedful.training",
    "heedful.server",
    "heedful.demo",
    "heedful.recipes",
    "heedful.cli",
    "heedful.__main__",
    "heedful",
]
# `from heedful import __version__` is no dependency: Python runs heedful/__init__.py before any
# module of it. What a stage may import from below it, declared: config checks model.attention
# against the score table, which imports no heedful module at its top (nor torch).
ALLOWED = {"heedful.config": ("heedful.layers.scores",)}


def stage_of(module: str) -> int:
    """The index in STAGES of the longest entry that is `module` or a package above it."""
    found = [i for i, s in enumerate(STAGES) if module == s or module.startswith(s + ".")]
    return max(found, key=lambda i: len(STAGES[i]))


@pytest.mark.parametrize("path", PYTHON, ids=name)
def test_imports_point_down_the_stages(path):
    module = name(path).removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    own = stage_of(module)
    bad = [
        m
        for m in sorted(imported(path))
        if stage_of(m) > own and m not in ALLOWED.get(STAGES[own], ()) and m != "heedful"
    ]
    assert bad == [], f"{module} (stage {STAGES[own]}) imports {bad} from a later stage"


def test_every_module_has_a_stage():
    modules = {
        name(p).removesuffix(".py").removesuffix("/__init__").replace("/", ".") for p in PYTHON
    }
    loose = sorted(m for m in modules if STAGES[stage_of(m)] == "heedful" and m != "heedful")
    assert loose == [], f"modules of no stage: add them to STAGES: {loose}"


def test_the_stage_check_can_fail():
    assert stage_of("heedful.models.rnn") < stage_of("heedful.training.loop")
    assert stage_of("heedful.layers.scores") > stage_of("heedful.config")
