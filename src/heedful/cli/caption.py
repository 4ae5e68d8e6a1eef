"""`heedful caption MODEL image.png ...`: one caption per image, in order, n-best alternatives
tab-separated; the same Translator call as `heedful translate MODEL image.png ...`."""

from __future__ import annotations

import click

from heedful.cli.options import DIRECTORY, POSITIVE, n_best_option, output_option


@click.command(short_help="Caption images with an image model.")
@click.argument("model_dir", type=DIRECTORY)
@click.argument("images", nargs=-1, required=True, type=click.Path(dir_okay=False))
@output_option("the captions")
@click.option(
    "--num-beams",
    type=POSITIVE,
    default=None,
    help="Beam size (1: greedy) [default: the model's generation.json].",
)
@n_best_option("image")
@click.option(
    "--batch-size", type=POSITIVE, default=32, show_default=True, help="Images per batch."
)
def caption(model_dir, images, output_path, num_beams, n_best, batch_size) -> None:
    """Caption images (PNG, JPEG, ...) with an image model: one line per image, in order."""
    from heedful.cli.translate import translate_images

    translate_images(model_dir, images, num_beams, n_best, batch_size, output_path=output_path)
