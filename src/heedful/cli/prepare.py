"""`heedful prepare`: a corpus tokenized once into a prepared directory (data/prepare.py)."""

from __future__ import annotations

import click

from heedful.cli.options import DIRECTORY, POSITIVE, overrides_option


@click.command(short_help="Tokenize a corpus once, into shards for training.")
@click.argument("config_path", type=click.Path(dir_okay=False))
@overrides_option("data.vocab_size=16000")
@click.option(
    "-o",
    "--output",
    type=DIRECTORY,
    default=None,
    help="The prepared directory [default: the config's data.prepared].",
)
@click.option(
    "--workers",
    type=POSITIVE,
    default=None,
    help="Tokenizing processes [default: one per CPU core this process may use].",
)
@click.option("--force", is_flag=True, help="Prepare again even when nothing changed.")
@click.option(
    "--progress/--no-progress",
    default=True,
    help="Show progress: a bar on a terminal, elsewhere (a file, a pipe) a plain line every 30 s.",
)
def prepare(config_path, overrides, output, workers, force, progress) -> None:
    """Tokenize a config's corpus once into memory-mappable shards for training.

    Trains the tokenizers (on a sample of data.tokenizer_sample sentences) unless the config
    gives them, encodes the training pairs in worker processes, and writes the directory
    atomically. Run again, it does nothing unless an input or a setting changed. Train from
    it with data.prepared set to the directory.
    """
    from heedful.config import ConfigError, load_config
    from heedful.data.prepare import prepare as prepare_data

    config = load_config(config_path, list(overrides))
    directory = output or config.data.prepared
    if directory is None:
        raise ConfigError("no directory to prepare into: give -o DIR or set data.prepared")
    prepare_data(config.data, directory, workers, force, progress, echo=click.echo)
