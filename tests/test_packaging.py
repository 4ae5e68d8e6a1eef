"""What a user installs (issue 29, part 3): the metadata PyPI and pip show (an SPDX license
with its file, authors, URLs, classifiers), one version, the files the wheel must carry, and
an sdist that holds every test, so that its tests run from it. The wheel in a fresh venv is
.ci/wheel_check's (it installs torch, which no unit test should)."""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import tarfile
from pathlib import Path

from click.testing import CliRunner

import heedful

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI (the test extra)
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "heedful"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]


def test_the_license_is_an_spdx_expression_with_its_file():
    assert PROJECT["license"] == "MIT"  # PEP 639; the { text = ... } table is deprecated
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n\nCopyright (c) 2026 the heedful authors\n")
    assert "Permission is hereby granted, free of charge" in text
    classifiers = PROJECT["classifiers"]
    assert not [c for c in classifiers if c.startswith("License ::")]  # PEP 639: one place
    backend = next(r for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools"))
    assert backend == "setuptools>=77"  # the first to read license-files


def test_the_metadata_names_authors_urls_classifiers_and_extras():
    assert PROJECT["authors"] == [{"name": "The heedful authors"}]
    assert set(PROJECT["urls"]) >= {"Homepage", "Source", "Issues"}
    assert all(url.startswith("https://") for url in PROJECT["urls"].values())
    classifiers = PROJECT["classifiers"]
    assert "Typing :: Typed" in classifiers and (PACKAGE / "py.typed").is_file()
    python = PROJECT["requires-python"].removeprefix(">=")
    assert f"Programming Language :: Python :: {python}" in classifiers
    extras = PROJECT["optional-dependencies"]
    assert extras["tensorboard"] == ["tensorboard>=2.14"]


def test_the_version_has_one_source():
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    dynamic = PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "heedful.__version__"}
    assert (PACKAGE / "__init__.py").read_text(encoding="utf-8").count(heedful.__version__) == 1
    from heedful.cli import main

    result = CliRunner().invoke(main, ["--version"], prog_name="heedful")
    assert result.output == f"heedful, version {heedful.__version__}\n"


def shipped(path: Path) -> bool:
    """Whether the wheel carries `path`: a module, or package data matched by pyproject."""
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["heedful"]
    relative = path.relative_to(PACKAGE).as_posix()
    return path.suffix == ".py" or any(fnmatch.fnmatch(relative, p) for p in patterns)


def test_package_data_covers_every_file_of_the_package():
    files = [p for p in PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert [p for p in files if not shipped(p)] == []
    assert shipped(PACKAGE / "recipes" / "multi30k" / "transformer.yaml")
    assert not shipped(PACKAGE / "recipes" / "multi30k" / "notes.txt")  # the check can fail


def sdist_names(out: Path) -> set[str]:
    """The files of an sdist built from this tree by the backend pyproject names."""
    build = "import sys, setuptools.build_meta as b; print(b.build_sdist(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", build, str(out)], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    archive = out / done.stdout.strip().splitlines()[-1]
    with tarfile.open(archive) as tar:
        return {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}


def test_the_sdist_holds_every_test_and_what_they_read(tmp_path):
    names = sdist_names(tmp_path)
    tests = [
        p.relative_to(REPO).as_posix()
        for p in (REPO / "tests").rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and "artifacts" not in p.relative_to(REPO / "tests").parts[:1]
    ]
    assert {"tests/conftest.py", "tests/golden/make.py"} <= set(tests)
    assert sorted(set(tests) - names) == []
    recipes = [p.relative_to(REPO).as_posix() for p in (REPO / "configs").rglob("*.yaml")]
    docs = [p.relative_to(REPO).as_posix() for p in (REPO / "docs").rglob("*.md")]
    read = {"LICENSE", "constraints.txt", "benchmarks/report.py"}  # the last: test_benchmark_report
    assert set(recipes) | set(docs) | read <= names
    assert not [n for n in names if n.endswith(".pyc") or n.startswith("tests/artifacts/")]


def test_uvicorn_is_held_below_the_release_whose_internals_are_untested():
    """server/connections.py subclasses uvicorn's private h11 protocol: the serve extra caps
    uvicorn below its next minor release, and the installed one is inside the range."""
    from importlib.metadata import version

    from packaging.requirements import Requirement

    serve = PYPROJECT["project"]["optional-dependencies"]["serve"]
    [uvicorn] = [Requirement(r) for r in serve if Requirement(r).name == "uvicorn"]
    assert any(spec.operator == "<" for spec in uvicorn.specifier), uvicorn
    assert uvicorn.specifier.contains(version("uvicorn")), (uvicorn, version("uvicorn"))
