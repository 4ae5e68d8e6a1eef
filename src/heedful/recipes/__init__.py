"""The recipes heedful ships: commented YAML configs to list, read and write out for editing.

They live in this folder as package data, so that a wheel carries them (issue 29); the
repository's configs/ is a link to it, so `heedful train configs/multi30k/transformer.yaml`
in a clone reads the very files a wheel installs. A recipe's name is its path here without
`.yaml` ("multi30k/transformer"); its description is the first line of its leading comment.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from heedful import __version__
from heedful.config.corpora import SPLIT_KEYS

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

SUFFIX = ".yaml"
# The data keys that name files or folders: what a recipe cannot ship with it (config/__init__.py's
# DataConfig and SourceConfig, config/corpora.py's CorpusConfig), so what a user points at their
# own data.
FILE_KEYS = (*SPLIT_KEYS, "captions", "valid_captions", "prepared", "tgt_tokenizer")
SOURCE_FILE_KEYS = ("tokenizer", "images", "feature_cache")  # of data.source


class RecipeError(ValueError):
    """An unknown recipe name, or a file that `heedful init` will not overwrite."""


@dataclass(frozen=True)
class Recipe:
    name: str  # its path in this folder without .yaml: "multi30k/transformer"
    description: str  # the first line of its leading comment
    text: str  # the YAML as shipped, comments included

    @property
    def stem(self) -> str:
        return self.name.rsplit("/", 1)[-1]


def _shipped(folder: Traversable, prefix: str = ""):
    """(name, file) of every recipe under `folder`, through importlib.resources so that it
    reads the installed package wherever (and however) it is installed."""
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.name.startswith(("_", ".")):  # not __pycache__
            yield from _shipped(entry, f"{prefix}{entry.name}/")
        elif entry.is_file() and entry.name.endswith(SUFFIX):
            yield prefix + entry.name.removesuffix(SUFFIX), entry


def _files() -> dict[str, Traversable]:
    return dict(sorted(_shipped(resources.files(__name__))))


def describe(text: str) -> str:
    """A recipe's one-line description: its first line, when that is a comment."""
    first = text.removeprefix("\ufeff").split("\n", 1)[0]
    return first.removeprefix("#").strip() if first.startswith("#") else ""


def names() -> list[str]:
    """The names of the shipped recipes, sorted."""
    return list(_files())


def get(name: str) -> Recipe:
    """The recipe called `name` ("multi30k/transformer", with or without .yaml), or whose file
    stem is `name` ("transformer") when only one recipe has that stem."""
    files = _files()
    key = name.strip().removesuffix(SUFFIX)
    found = [key] if key in files else [n for n in files if n.rsplit("/", 1)[-1] == key]
    if len(found) != 1:
        what = "ambiguous" if found else "unknown"
        shown = repr(name) if len(name) <= 60 else f"{name[:57]!r}..."  # never echoed whole
        raise RecipeError(
            f"{what} recipe {shown}; the recipes are {', '.join(found or files)} "
            "(heedful recipes describes them)"
        )
    text = files[found[0]].read_text(encoding="utf-8")
    return Recipe(found[0], describe(text), text)


def shipped() -> list[Recipe]:
    """Every shipped recipe, sorted by name."""
    return [get(name) for name in names()]


def data_files(text: str) -> list[tuple[str, str]]:
    """(key, value) of every data file or folder a recipe names, keyed as config errors name
    keys ("data.train_src", "data.corpora[1].valid_tgt")."""
    data = (yaml.safe_load(text) or {}).get("data") or {}
    found = _named(data, FILE_KEYS, "data.")
    found += _named(data.get("source") or {}, SOURCE_FILE_KEYS, "data.source.")
    for i, corpus in enumerate(data.get("corpora") or ()):
        found += _named(corpus, FILE_KEYS, f"data.corpora[{i}].")
    return found


def _named(section: dict, keys: tuple[str, ...], prefix: str) -> list[tuple[str, str]]:
    """(prefix + key, value) of the keys of `section` among `keys` that name a file."""
    return [(prefix + k, v) for k, v in section.items() if k in keys and isinstance(v, str)]


def header(recipe: Recipe, target: Path) -> str:
    """The comment `heedful init` puts above a recipe it writes out: where it came from and
    which keys name data that heedful does not ship, the ones to edit before training."""
    lines = [f"# Written by `heedful init {recipe.name}` (heedful {__version__}); yours to edit."]
    files = data_files(recipe.text)
    if files:
        lines += [
            "# Edit first: the data it trains on, which heedful does not ship (a relative path",
            "# is read from the directory `heedful train` runs in). Now:",
            *(f"#   {key}: {value}" for key, value in files),
        ]
        plain = [key for key, _ in files if "[" not in key]
        if plain:  # a top-level key can also be given at the command line
            lines.append(f"# or give them when training:  --set {plain[0]}=PATH (one --set each)")
    lines += [f"# Train:  heedful train {shlex.quote(str(target))}", "#", ""]
    return "\n".join(lines)


def write(name: str, path: str | Path | None = None) -> Path:
    """Write recipe `name` out for editing to `path` (default: ./<stem>.yaml; into it when it
    is a folder) and return where it went. Never overwrites: a file already there may hold a
    user's edits, so it is an error, and nothing is written."""
    recipe = get(name)
    if path is not None and not str(path).strip():
        raise RecipeError("-o is empty: give the file to write (or leave -o out)")
    target = Path(path) if path is not None else Path(recipe.stem + SUFFIX)
    if target.is_dir():
        target = target / (recipe.stem + SUFFIX)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # "x": created here or not at all, even against a file that appears meanwhile
        with open(target, "x", encoding="utf-8") as file:
            file.write(header(recipe, target) + recipe.text)
    except FileExistsError as error:
        if Path(error.filename or "") != target:  # a folder on the way is a file
            raise RecipeError(f"{target}: {error.filename} is a file, not a folder") from None
        raise RecipeError(
            f"{target}: already exists; heedful init never overwrites a file "
            "(give -o another path, or move that file away)"
        ) from None
    except OSError as error:
        raise RecipeError(f"{target}: cannot write it ({error.strerror})") from None
    return target
