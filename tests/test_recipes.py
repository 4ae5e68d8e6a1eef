"""The shipped recipes (issue 29, part 3): found through importlib.resources as a wheel ships
them, the same files as the repository's configs/, listed by `heedful recipes` and written out
by `heedful init` as configs that load, with a header naming the data to point at, and never
over a file that is there already."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from heedful import recipes
from heedful.cli.errors import Heedful
from heedful.cli.recipes import init
from heedful.cli.recipes import recipes as recipes_command
from heedful.config import load_config

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"  # the paths the README, docs and benchmarks give


def heedful(*argv: str):
    """The two commands in a `heedful` group of their own, as cli/__init__.py registers them:
    the group turns a RecipeError into one line and exit status 1."""
    return CliRunner().invoke(Heedful(commands=[recipes_command, init]), list(argv))


def test_the_recipes_are_the_configs_folder_and_each_loads():
    on_disk = {
        p.relative_to(CONFIGS).with_suffix("").as_posix(): p for p in CONFIGS.rglob("*.yaml")
    }
    assert recipes.names() == sorted(on_disk)
    assert {"multi30k/transformer", "summarization/headlines-pointer"} <= set(on_disk)
    for recipe in recipes.shipped():
        assert recipe.text == on_disk[recipe.name].read_text(encoding="utf-8"), recipe.name
        load_config(on_disk[recipe.name])  # a recipe that does not load is an error here
    described = [recipe.description for recipe in recipes.shipped()]
    assert all(0 < len(d) <= 100 for d in described), described
    assert len(set(described)) == len(described), "two recipes read the same in the list"


def test_heedful_recipes_lists_each_name_with_its_description():
    result = heedful("recipes")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == len(recipes.names())
    for line, recipe in zip(lines, recipes.shipped()):
        name, description = line.split(maxsplit=1)
        assert (name, description) == (recipe.name, recipe.description)


def test_heedful_recipes_name_prints_the_yaml():
    result = heedful("recipes", "multi30k/rnn-luong")
    assert result.exit_code == 0, result.output
    assert result.output == (CONFIGS / "multi30k" / "rnn-luong.yaml").read_text(encoding="utf-8")


def test_init_writes_a_config_that_loads_and_names_the_data_to_edit(tmp_path):
    result = heedful("init", "multi30k/transformer", "-o", str(tmp_path / "mine.yaml"))
    assert result.exit_code == 0, result.output
    written = tmp_path / "mine.yaml"
    text = written.read_text(encoding="utf-8")
    shipped = CONFIGS / "multi30k" / "transformer.yaml"
    assert text.endswith(shipped.read_text(encoding="utf-8"))
    assert load_config(written) == load_config(shipped)
    header = text[: text.index("data:")]
    for key in ("train_src", "train_tgt", "valid_src", "valid_tgt"):
        assert f"#   data.{key}: ../shared/corpora/multi30k/" in header, key
    assert f"heedful train {written}" in header and f"heedful train {written}" in result.output


def test_init_names_every_corpus_file_of_a_multilingual_recipe(tmp_path):
    written = recipes.write("multi30k/multilingual", tmp_path)  # a folder: written into it
    assert written == tmp_path / "multilingual.yaml"
    text = written.read_text(encoding="utf-8")
    assert "#   data.corpora[1].train_tgt: ../shared/corpora/multi30k/train.fr" in text
    assert "--set" not in text  # a corpus of the list cannot be given with --set
    assert load_config(written).data.pairs() == (("en", "de"), ("en", "fr"))


def test_init_by_stem_writes_beside_the_user(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = heedful("init", "headlines-pointer")
    assert result.exit_code == 0, result.output
    (written,) = [p for p in tmp_path.rglob("*.yaml")]
    assert written.name == "headlines-pointer.yaml"
    assert "#   data.train_jsonl: data/gigaword/train.jsonl" in written.read_text(encoding="utf-8")
    assert "--set data.train_jsonl=PATH" in written.read_text(encoding="utf-8")


def test_init_never_overwrites_a_file(tmp_path):
    mine = tmp_path / "transformer.yaml"
    mine.write_text("my edits\n", encoding="utf-8")
    for target in (mine, tmp_path):  # the file itself, or its folder
        result = heedful("init", "transformer", "-o", str(target))
        assert result.exit_code == 1, result.output
        assert result.output == (
            f"Error: {mine}: already exists; heedful init never overwrites a file "
            "(give -o another path, or move that file away)\n"
        )
    assert mine.read_text(encoding="utf-8") == "my edits\n"
    dangling = tmp_path / "link.yaml"
    dangling.symlink_to(tmp_path / "nowhere.yaml")  # nor writes through a link to elsewhere
    assert heedful("init", "transformer", "-o", str(dangling)).exit_code == 1
    assert not (tmp_path / "nowhere.yaml").exists()


@pytest.mark.parametrize("name", ["nope", "multi30k/transformers", "configs/multi30k/transformer"])
def test_an_unknown_recipe_is_one_line_listing_the_known(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = heedful("init", name)
    assert result.exit_code == 1
    assert result.output == (
        f"Error: unknown recipe {name!r}; the recipes are {', '.join(recipes.names())} "
        "(heedful recipes describes them)\n"
    )
    assert list(tmp_path.rglob("*.yaml")) == []
    assert heedful("recipes", name).output == result.output


def test_the_heedful_command_has_recipes_and_init():
    from heedful.cli import main

    assert main.commands.get("recipes") is recipes_command
    assert main.commands.get("init") is init


def _under_a_file(tmp_path: Path) -> str:
    (tmp_path / "afile").write_text("mine\n", encoding="utf-8")
    return str(tmp_path / "afile" / "x.yaml")


def _dangling(tmp_path: Path) -> str:
    (tmp_path / "link.yaml").symlink_to(tmp_path / "elsewhere.yaml")
    return str(tmp_path / "link.yaml")


# `heedful init`'s hostile table (docs/hostile-inputs.md): (id, name, -o from tmp_path, words)
HOSTILE_INIT = [
    ("row0-empty-output", "transformer", lambda t: "", "-o is empty"),
    ("row0-empty-name", "", None, "unknown recipe ''"),
    ("row0-huge-name", "a" * 5000, None, "unknown recipe 'aaaa"),
    ("row0-nul-in-name", "trans\0former", None, "unknown recipe"),
    ("output-under-a-file", "transformer", _under_a_file, "afile is a file, not a folder"),
    ("output-in-proc", "transformer", lambda t: "/proc/heedful-x.yaml", "cannot write it"),
    ("output-a-device", "transformer", lambda t: "/dev/null", "already exists"),
    ("output-a-dangling-link", "transformer", _dangling, "already exists"),
    ("name-a-folder", "multi30k", None, "unknown recipe 'multi30k'"),
    ("name-leaves-the-recipes", "../recipes/__init__", None, "unknown recipe"),
]  # fmt: skip


@pytest.mark.parametrize(
    "name, output, words", [pytest.param(*row[1:], id=row[0]) for row in HOSTILE_INIT]
)
def test_init_refuses_hostile_names_and_paths_in_one_line(
    name, output, words, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    args = ["init", name] + ([] if output is None else ["-o", output(tmp_path)])
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = heedful(*args)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert words in result.output and result.output.count("\n") == 1, result.output
    assert len(result.output) < 1000  # a quoted name is cut short, never echoed whole
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written
    assert not (tmp_path / "elsewhere.yaml").exists()
