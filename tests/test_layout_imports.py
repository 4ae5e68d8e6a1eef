"""The shape of the package, part 2 (issue 27): no import cycles, counting the imports inside
functions (a cycle hidden behind a late import is still a cycle: neither module can be read
without the other); no module importing another module's `_private` name (what a module hides
is its own to change); and `# fmt: skip` only on data tables, never to pack code into the
400-line and 60-line limits of tests/test_layout.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "heedful"
PYTHON = sorted(SRC.rglob("*.py"))
# The one declared exception: Trace._repr_html_ renders the viewer (visualize/html.py imports
# trace.py) so that a notebook shows a trace by itself, Jupyter's display hook.
DISPLAY_HOOK = {("heedful.visualize.trace", "heedful.visualize.html")}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")


MODULES = {module_name(p) for p in PYTHON}


def imports(source: str) -> list[tuple[str, str | None, int]]:
    """(module, name imported from it or None, line) for every heedful import, anywhere."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names]
    return [(m, n, line) for m, n, line in found if m.split(".")[0] == "heedful"]


def dependencies(source: str, modules: set[str]) -> set[str]:
    """The modules a source imports: `from heedful.data import corpus` is heedful.data.corpus."""
    out = set()
    for module, name, _ in imports(source):
        out.add(f"{module}.{name}" if f"{module}.{name}" in modules else module)
    return out & modules


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def module_graph() -> dict[str, set[str]]:
    graph = {}
    for path in PYTHON:
        name = module_name(path)
        deps = dependencies(path.read_text(encoding="utf-8"), MODULES) - {name}
        graph[name] = {d for d in deps if (name, d) not in DISPLAY_HOOK}
    return graph


def package_of(module: str) -> str:
    """heedful.data.corpus -> heedful.data; a top-level module is its own package."""
    return ".".join(module.split(".")[:2])


def test_no_modules_import_each_other():
    assert cycles(module_graph()) == []


def test_no_packages_import_each_other():
    packages: dict[str, set[str]] = {}
    for module, deps in module_graph().items():
        outside = {package_of(d) for d in deps} - {package_of(module)}
        packages.setdefault(package_of(module), set()).update(outside)
    assert cycles(packages) == []


def private_imports(source: str, own: str) -> list[str]:
    """`from heedful.x import _name` where heedful.x is another module than `own`."""
    return [
        f"line {line}: {module}.{name}"
        for module, name, line in imports(source)
        if name and name.startswith("_") and not name.startswith("__") and module != own
    ]


@pytest.mark.parametrize("path", PYTHON, ids=module_name)
def test_no_private_names_are_imported(path):
    assert private_imports(path.read_text(encoding="utf-8"), module_name(path)) == []


def packed_lines(source: str) -> list[str]:
    """`# fmt: skip` lines that do not end a data table: an assignment of a list, tuple, dict
    or set literal (a table whose columns a formatter would break)."""
    tables = {
        node.end_lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and isinstance(node.value, (ast.List, ast.Tuple, ast.Dict, ast.Set))
    }
    return [
        f"line {number}: {line.strip()[:60]}"
        for number, line in enumerate(source.splitlines(), start=1)
        if "# fmt: skip" in line and number not in tables
    ]


@pytest.mark.parametrize("path", PYTHON, ids=module_name)
def test_fmt_skip_marks_only_data_tables(path):
    assert packed_lines(path.read_text(encoding="utf-8")) == []


def test_the_import_and_packing_checks_can_fail():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    late = "def f():\n    from heedful.data.corpus import _json_type\n"
    assert private_imports(late, "heedful.data.images") == [
        "line 2: heedful.data.corpus._json_type"
    ]
    assert private_imports(late, "heedful.data.corpus") == []
    assert dependencies("from heedful.data import corpus\n", {"heedful.data.corpus"}) == {
        "heedful.data.corpus"
    }
    packed = "def f():\n    return g(1,\n             2)  # fmt: skip\n"
    assert packed_lines(packed) == ["line 3: 2)  # fmt: skip"]
    table = "ROWS = [\n    (1, 2),\n]  # fmt: skip\n"
    assert packed_lines(table) == []
