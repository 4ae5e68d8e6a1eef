"""Commands that make a model directory: demo, train, average, export."""

from __future__ import annotations

import click

from heedful.cli.options import DIRECTORY, POSITIVE, Deferred, overrides_option, threads_option


def _demo_options() -> list[click.Parameter]:
    from heedful.demo.run import DEMO_TASKS

    models = {name: None for task in DEMO_TASKS.values() for name in task.models}
    defaults = ", ".join(f"{task.model_name} for {name}" for name, task in DEMO_TASKS.items())
    model = click.Option(
        ["--model", "model_name"],
        type=click.Choice(list(models)),
        default=None,
        help=f"Which model learns the task [default: {defaults}].",
    )
    task = click.Option(
        ["--task"],
        type=click.Choice(list(DEMO_TASKS)),
        default="dates",
        show_default=True,
        help="What it learns: human-written dates to ISO dates, the articles' toy chatbot "
        '("Hi, How are you?" -> "I am fine"), or captions of generated scenes of shapes.',
    )
    return [model, task, *_budget_options(DEMO_TASKS), threads_option()]


def _budgets(task) -> str:
    """A task's step budgets: "transformer 4800, rnn-bahdanau 1000, ...", or "rnn-* 2400"
    where every RNN has the same."""
    budgets = {model: task.step_budget(model) for model in task.models}
    rnns = {steps for model, steps in budgets.items() if model.startswith("rnn-")}
    if len(rnns) != 1:
        return ", ".join(f"{model} {steps}" for model, steps in budgets.items())
    others = [f"{m} {n}" for m, n in budgets.items() if not m.startswith("rnn-")]
    return ", ".join([*others, f"rnn-* {rnns.pop()}"])


def _budget_options(tasks: dict) -> list[click.Parameter]:
    """--max-steps, whose help lists every model's step budget, and --max-time."""
    budgets = "; ".join(f"{name}: {_budgets(task)}" for name, task in tasks.items())
    steps = click.Option(
        ["--max-steps"],
        type=POSITIVE,
        default=None,
        help="Stop after this many steps [default: the model's step budget, the steps it was "
        "measured to need for its target, with a margin (docs/benchmarks.md): "
        f"{budgets}]. Training stops sooner once every development pair is right. Steps, not "
        "seconds: a busy machine trains the same model as an idle one, only slower.",
    )
    seconds = click.Option(
        ["--max-time"],
        type=float,
        default=None,
        help="Also stop after this many seconds [default: no limit]. A time limit makes the "
        "model depend on the machine: a busy one trains fewer steps in it, and the demo then "
        "says its model is undertrained.",
    )
    return [steps, seconds]


@click.command(
    cls=Deferred,
    later=_demo_options,
    short_help="Train a toy model in minutes and draw its attention.",
)
@click.option(
    "--out",
    default="heedful-demo",
    show_default=True,
    help="Where the heatmap, the training log (metrics.jsonl) and the model go.",
)
@click.option(
    "--train-size",
    type=POSITIVE,
    default=None,
    help="Generated training pairs [default: the task's, 40000 dates, 6000 questions or "
    "20000 scenes].",
)
@click.option(
    "--seed",
    default=1,
    show_default=True,
    help="Seed of the generated data, the initial weights and the batch order.",
)
@click.option(
    "--progress/--no-progress",
    default=True,
    help="Show progress: a bar on a terminal, elsewhere (a file, a pipe) a plain line every 30 s.",
)
def demo(model_name, task, out, train_size, max_steps, max_time, seed, progress) -> None:
    """Learn a generated task in minutes (human-written dates to ISO dates, the articles' toy
    chatbot, or captions of generated scenes), then draw the attention."""
    from heedful.demo.run import run_demo

    options = dict(
        train_size=train_size,
        max_steps=max_steps,
        max_time=max_time,
        seed=seed,
        progress=progress,
        echo=click.echo,
    )
    run_demo(model_name, out, task=task, **options)


@click.command(short_help="Train (or resume) a model from a YAML config.")
@click.argument("config_path", type=click.Path(dir_okay=False))
@overrides_option("train.max_steps=200")
@click.option("--run-dir", default=None, help="Run directory [default: runs/<config name>].")
@click.option(
    "--force",
    is_flag=True,
    help="Delete the run directory's checkpoints and logs and start over (refused, deleting "
    "nothing, if it holds files heedful train did not write).",
)
@click.option(
    "--progress/--no-progress",
    default=True,
    help="Show progress: a bar on a terminal, elsewhere (a file, a pipe) a plain line every 30 s.",
)
@click.option(
    "--threads",
    type=POSITIVE,
    default=None,
    help="CPU threads, as --set train.threads=N [default: the config's, else one per core].",
)
def train(config_path, overrides, run_dir, force, progress, threads) -> None:
    """Train (or resume) a model from a YAML config.

    Ctrl-C or SIGTERM: the step under way finishes, a checkpoint of it is saved, and the exit
    status is 128 + the signal (130, 143); the same command then resumes from it.
    """
    import os
    from pathlib import Path

    from heedful.config import load_config
    from heedful.training.experiment import train_from_config
    from heedful.training.interrupts import STOP_SIGNALS

    if threads is not None:
        overrides = (*overrides, f"train.threads={threads}")
    config = load_config(config_path, list(overrides))
    run_dir = run_dir or str(Path("runs") / Path(config_path).stem)
    if os.environ.get("RANK", "0") == "0":  # torchrun: the other processes stay quiet
        click.echo(f"run directory: {run_dir}")
    result = train_from_config(config, run_dir, force=force, progress=progress, echo=click.echo)
    if getattr(result, "stopped_by", None) in STOP_SIGNALS:  # saved at Ctrl-C or SIGTERM, not done
        import signal

        raise SystemExit(128 + signal.Signals[result.stopped_by])  # as shells report a signal


@click.command(short_help="Average the weights of checkpoints of one model.")
@click.argument("model_dirs", nargs=-1, required=True, type=DIRECTORY)
@click.option(
    "-o",
    "--output",
    "output_dir",
    required=True,
    type=DIRECTORY,
    help="The model directory to write: a new or empty one, or an earlier model directory "
    "(replaced; nothing else is, nor one of the inputs).",
)
def average(model_dirs, output_dir) -> None:
    """Average the weights of several checkpoints of one model into OUTPUT."""
    from heedful.checkpoint.model_dir import average_checkpoints

    out = average_checkpoints(list(model_dirs), output_dir)
    click.echo(f"averaged {len(model_dirs)} checkpoints into {out}")


def _export_options() -> list[click.Parameter]:
    from heedful.inference.export import FORMATS, QUANTIZATIONS

    format_ = click.Option(
        ["--format", "format_"],
        type=click.Choice(FORMATS),
        default=FORMATS[0],
        show_default=True,
        help="What to export to.",
    )
    quantization = click.Option(
        ["--quantization"],
        type=click.Choice(QUANTIZATIONS),
        default=None,
        help="Weight type of the export [default: float32, as trained].",
    )
    return [format_, quantization]


@click.command(
    cls=Deferred, later=_export_options, short_help="Export a model to CTranslate2 or Hugging Face."
)
@click.argument("model_dir", type=DIRECTORY)
@click.option(
    "-o",
    "--output",
    "output_dir",
    required=True,
    type=DIRECTORY,
    help="The directory to write: a new or empty one, or an earlier export of the same format "
    "(replaced; nothing else is).",
)
def export(model_dir, output_dir, format_, quantization) -> None:
    """Export a Transformer MODEL_DIR for a faster runtime: translate the result with
    `heedful translate OUTPUT --engine ctranslate2` (needs pip install 'heedful[fast]').
    --format huggingface writes a Marian (post-norm) or Pegasus (pre-norm) model that
    transformers' Auto classes and ct2-transformers-converter load (pip install 'heedful[hf]';
    docs/huggingface-export.md)."""
    if format_ == "huggingface":
        from heedful.hf.export import export_huggingface

        if quantization is not None:
            raise click.UsageError("--quantization applies to --format ctranslate2 only")
        out = export_huggingface(model_dir, output_dir)
        from heedful.hf.layout import read_hf_config

        kind = (read_hf_config(out) or {}).get("model_type", "huggingface")
        click.echo(f"exported {model_dir} to {out} (huggingface {kind}, float32 weights)")
        return
    from heedful.inference.export import export_ctranslate2

    out = export_ctranslate2(model_dir, output_dir, quantization)
    click.echo(f"exported {model_dir} to {out} ({format_}, {quantization or 'float32'} weights)")
