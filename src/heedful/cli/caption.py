"""`heedful caption MODEL image.png ...` (and `heedful translate` given an image model): one
caption per image, in order, n-best alternatives tab-separated."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from heedful.cli.options import DIRECTORY, FILE, POSITIVE


def image_arguments(paths: tuple[str, ...]) -> list[str] | None:
    """`translate`'s arguments as (model, images) when the first is an image model's directory:
    the images; None for text models, whose arguments must all be directories, as before."""
    from heedful.inference.captioner import is_image_model

    if Path(paths[0]).is_dir() and is_image_model(paths[0]):
        return list(paths[1:])
    for path in paths:
        if Path(path).is_file():
            raise click.BadParameter(f"Directory {path!r} is a file.", param_hint="'MODEL_DIR...'")
    return None


def caption_images(
    model_dir, images, num_beams, n_best, batch_size, drawn=None, output_path=None
) -> None:
    """Print (or write to output_path) the captions of `images`; errors name the image.
    drawn: the sampling settings of `heedful translate --sample ...`."""
    from heedful.checkpoint.model_dir import CheckpointError
    from heedful.config import beams_for
    from heedful.data.images import ImageError
    from heedful.inference.captioner import Captioner

    if not images:
        raise click.UsageError("give one or more images to caption after the model directory")
    try:
        captioner = Captioner.load(model_dir)
        beams = beams_for(num_beams or captioner.generation.num_beams, n_best)
        settings = captioner.generation.but(num_beams=beams, n_best=n_best, **(drawn or {}))
        results = captioner.caption(images, batch_size=batch_size, settings=settings)
    except (CheckpointError, ImageError) as error:
        raise click.ClickException(str(error)) from None
    rows = ["\t".join([r.text] + [a.text for a in r.alternatives or []]) for r in results]
    text = "".join(row + "\n" for row in rows)
    if output_path:
        Path(output_path).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


@click.command(short_help="Caption images with an image model.")
@click.argument("model_dir", type=DIRECTORY)
@click.argument("images", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "-o",
    "--output",
    "output_path",
    type=FILE,
    default=None,
    help="Write the captions to FILE instead of stdout.",
)
@click.option(
    "--num-beams",
    type=POSITIVE,
    default=None,
    help="Beam size (1: greedy) [default: the model's generation.json].",
)
@click.option(
    "--n-best",
    type=POSITIVE,
    default=1,
    show_default=True,
    help="Alternatives per image, tab-separated.",
)
@click.option(
    "--batch-size", type=POSITIVE, default=32, show_default=True, help="Images per batch."
)
def caption(model_dir, images, output_path, num_beams, n_best, batch_size) -> None:
    """Caption images (PNG, JPEG, ...) with an image model: one line per image, in order."""
    caption_images(model_dir, images, num_beams, n_best, batch_size, output_path=output_path)
