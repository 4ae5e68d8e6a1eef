"""The `heedful` command: thin subcommands over the library."""

from __future__ import annotations

import click

from heedful.demo import DEMO_MODELS


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="heedful")
def main() -> None:
    """heedful: attention-based sequence-to-sequence models you can see into."""


@main.command()
@click.option("--model", "model_name", type=click.Choice(list(DEMO_MODELS)), default="transformer",
              show_default=True, help="Which model learns the task.")  # fmt: skip
@click.option("--out", default="heedful-demo", show_default=True, help="Where the heatmap goes.")
@click.option("--train-size", default=40_000, show_default=True, help="Generated training pairs.")
@click.option("--max-steps", type=int, default=None, help="Stop after this many steps.")
@click.option("--max-time", type=float, default=None, help="Stop after this many seconds.")
@click.option("--seed", default=1, show_default=True)
@click.option("--progress/--no-progress", default=True, help="Show a progress bar.")
def demo(model_name, out, train_size, max_steps, max_time, seed, progress) -> None:
    """Learn to turn human-written dates into ISO dates, then draw the attention."""
    from heedful.demo import run_demo

    run_demo(model_name, out, train_size=train_size, max_steps=max_steps, max_time=max_time,
             seed=seed, progress=progress, echo=click.echo)  # fmt: skip


if __name__ == "__main__":
    main()
