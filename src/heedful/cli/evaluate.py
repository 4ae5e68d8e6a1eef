"""`heedful evaluate`: a model's translations of a test set scored against its references, as
text for a reader or as one JSON document (--json) for a script."""

from __future__ import annotations

import click

from heedful.cli.options import DIRECTORY, FILE, POSITIVE, Deferred, runtime_options, search_options
from heedful.config import MAX_LINE_BYTES

STDIN_FILE = "/dev/stdin"  # `-`: the files are read by path, and this path is standard input


def _stdin_for_dash(paths: dict[str, str | None]) -> dict[str, str | None]:
    """The paths with `-` as standard input; only one option can read it."""
    import os

    dashes = [option for option, path in paths.items() if path == "-"]
    if len(dashes) > 1:
        raise click.UsageError(f"{' and '.join(dashes)} cannot both read stdin (-)")
    if dashes and not os.path.exists(STDIN_FILE):
        raise click.UsageError(f"{dashes[0]} -: this system has no {STDIN_FILE}; give a file")
    return {option: STDIN_FILE if path == "-" else path for option, path in paths.items()}


def _evaluation_reader(src_path, ref_path, jsonl_path, fields: str, max_line_bytes: int):
    """What reads the (source, reference) pairs, from --src and --ref or from --jsonl's two
    --fields; the options are checked now, the files read when it is called."""
    from functools import partial
    from pathlib import Path

    from heedful.data.corpus import LineLimit, read_jsonl, read_parallel

    limit = LineLimit(max_line_bytes, "--max-line-bytes")
    ctx = click.get_current_context()
    if jsonl_path is None:
        if src_path is None or ref_path is None:
            raise click.UsageError("give --src and --ref (aligned files), or --jsonl", ctx)
        paths = _stdin_for_dash({"--src": src_path, "--ref": ref_path})
        src, ref = Path(paths["--src"]), Path(paths["--ref"])
        return partial(read_parallel, src, ref, "--src", "--ref", limit=limit)
    if src_path is not None or ref_path is not None:
        message = "--jsonl holds the sources and references: leave out --src and --ref"
        raise click.UsageError(message, ctx)
    names = fields.split(",")
    if len(names) != 2 or not all(names):
        message = f"expected two names with a comma between, got {fields!r}"
        raise click.BadParameter(message, ctx, param_hint="--fields")
    jsonl = Path(_stdin_for_dash({"--jsonl": jsonl_path})["--jsonl"])
    return partial(read_jsonl, jsonl, "--jsonl", *names, limit=limit)


def _json_report(model_dir, settings: dict, texts, language: str, metric) -> str:
    """One JSON document: each metric as sacreBLEU's `--format json` gives it (name, score,
    signature, verbose_score), the tokenized BLEU papers report, the settings that made the
    outputs, and BLEU per length. texts: (sources, outputs, references)."""
    import json
    from dataclasses import asdict

    from heedful.evaluation import bleu_by_length, corpus_scores, tokenized_bleu

    sources, outputs, references = texts

    scores = corpus_scores(outputs, references).records()
    if metric == "rouge":
        from heedful.evaluation import rouge_scores

        scores += rouge_scores(outputs, references).records()
    report = {
        "model": str(model_dir),
        "sentences": len(references),
        "settings": settings,
        "scores": scores,
        "tokenized_bleu": tokenized_bleu(outputs, references, language).record(),
        "bleu_by_length": [asdict(b) for b in bleu_by_length(sources, outputs, references)],
    }
    return json.dumps(report, indent=1, ensure_ascii=False)


def _text_report(texts, language: str, metric) -> str:
    from heedful.evaluation import (
        bleu_by_length,
        corpus_scores,
        format_length_table,
        tokenized_bleu,
    )

    sources, outputs, references = texts
    lines = [str(corpus_scores(outputs, references))]
    lines.append(str(tokenized_bleu(outputs, references, language)))
    if metric == "rouge":
        from heedful.evaluation import rouge_scores

        lines.append(str(rouge_scores(outputs, references)))
    lines.append(format_length_table(bleu_by_length(sources, outputs, references)))
    return "\n".join(lines)


@click.command(
    cls=Deferred, later=runtime_options, short_help="Score a model on a test set: BLEU, chrF, TER."
)
@click.argument("model_dir", type=DIRECTORY)
@click.option(
    "--src", "src_path", type=FILE, help="Source lines, aligned with --ref (- reads stdin)."
)
@click.option("--ref", "ref_path", type=FILE, help="Reference lines (- reads stdin).")
@click.option(
    "--jsonl",
    "jsonl_path",
    type=FILE,
    help="Instead of --src and --ref: a JSON Lines file of both (summarization test sets; - "
    "reads stdin).",
)
@click.option(
    "--fields",
    default="document,summary",
    show_default=True,
    help="--jsonl's source and reference fields (CNN/DailyMail: article,highlights).",
)
@click.option(
    "--output",
    "output_path",
    type=FILE,
    default=None,
    help="Also write the translations to FILE.",
)
@click.option(
    "--metric",
    type=click.Choice(["bleu", "rouge"]),
    default="bleu",
    show_default=True,
    help="bleu: BLEU, chrF and TER; rouge: ROUGE-1/2/L F1 (rouge-score, for summaries) too.",
)
@click.option("--target", default=None, help="Language to write, for a multilingual model.")
@click.option(
    "--max-line-bytes",
    type=POSITIVE,
    default=MAX_LINE_BYTES,
    show_default=True,
    help="Longest line of --src, --ref or --jsonl, in bytes; a longer one is an error.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON document: each metric's name, score and signature (as sacreBLEU's "
    "--format json), the settings and BLEU per source length.",
)
@search_options
def evaluate(
    model_dir,
    src_path,
    ref_path,
    jsonl_path,
    fields,
    output_path,
    metric,
    target,
    max_line_bytes,
    as_json,
    num_beams,
    batch_size,
    engine,
    quantize,
) -> None:
    """Translate --src and score it against --ref: BLEU, chrF, TER (with --metric rouge also
    ROUGE-1/2/L) and BLEU per source length."""
    from pathlib import Path

    from heedful.cli.translate import director
    from heedful.inference.runtime import load_translator

    if metric == "rouge":  # before any translating: say now if the package is missing
        from heedful.evaluation import require_rouge

        require_rouge()
    read_pairs = _evaluation_reader(src_path, ref_path, jsonl_path, fields, max_line_bytes)
    translator = load_translator(model_dir, engine, quantize)
    direct = director(model_dir, target, None)  # after <2xx> for a multilingual model
    pairs = read_pairs()
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    beams = num_beams or translator.generation.num_beams
    found = translator.translate(direct(sources), num_beams=beams, batch_size=batch_size)
    outputs = [t.text for t in found]
    if output_path:
        Path(output_path).write_text("".join(o + "\n" for o in outputs), encoding="utf-8")
    texts, language = (sources, outputs, references), target or translator.languages[1]
    if not as_json:
        return click.echo(_text_report(texts, language, metric))
    settings = dict(num_beams=beams, batch_size=batch_size, engine=engine, quantize=quantize)
    settings |= dict(target=target, metric=metric, src=src_path, ref=ref_path)
    settings |= dict(jsonl=jsonl_path, fields=fields if jsonl_path else None)
    click.echo(_json_report(model_dir, settings, texts, language, metric))
