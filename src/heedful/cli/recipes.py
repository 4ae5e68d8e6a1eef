"""`heedful recipes` and `heedful init`: the configs the package ships, listed and written out
(heedful.recipes), so that an installed wheel has something to train from."""

from __future__ import annotations

import shlex

import click


@click.command()
@click.argument("name", required=False)
def recipes(name) -> None:
    """List the recipes heedful ships.

    Each is a commented YAML config, named by its folder and file (multi30k/transformer), with
    what it trains. Given a NAME, print that recipe's YAML instead. Write one out to edit and
    train with `heedful init NAME`.
    """
    from heedful import recipes as shipped

    if name is not None:
        click.echo(shipped.get(name).text, nl=False)
        return
    found = shipped.shipped()
    width = max(len(recipe.name) for recipe in found)
    for recipe in found:
        click.echo(f"{recipe.name:<{width}}  {recipe.description}")


@click.command()
@click.argument("name")
@click.option(
    "-o",
    "--output",
    type=click.Path(),
    default=None,
    help="The file to write, or a folder to write it into [default: ./STEM.yaml, e.g. "
    "./transformer.yaml]. An existing file is never overwritten.",
)
def init(name, output) -> None:
    """Write a shipped recipe out for editing.

    NAME is one of `heedful recipes` (multi30k/transformer, or just transformer). The file
    starts with a header naming the keys that point at data heedful does not ship: edit those,
    then `heedful train FILE`. A file already at the path is left as it is (an error).
    """
    from heedful import recipes as shipped

    target = shipped.write(name, output)
    click.echo(f"wrote {target}: edit the data files its header names, then run")
    click.echo(f"  heedful train {shlex.quote(str(target))}")
