"""The one-command demo: learn a generated task in minutes, then show where the model looks.

Three tasks, no download: reading human-written dates ("dates", the default), the articles'
own example, a toy chatbot that answers "Hi, How are you?" with "I am fine" ("dialogue"), and
captions of generated scenes of shapes ("captions", demo/captions.py: pictures in, attention
drawn over them). The demo generates the task, trains a small model with a progress bar, logs
the training to OUT/metrics.jsonl (as `heedful train` does, so `heedful curves OUT` draws it;
demo/training.py, the same for every task), scores exact match on held-out pairs, prints a
few outputs and draws the attention.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from heedful.checkpoint.model_dir import save_model_dir
from heedful.config import Config, DataConfig, GenerationConfig, ModelConfig, TrainConfig
from heedful.data.tokenizers import CharTokenizer
from heedful.demo.captions import run_caption_demo
from heedful.demo.training import LOW_EXACT_MATCH, budget, train_logged, undertrained_warning
from heedful.evaluation import exact_match
from heedful.inference.translator import Translator
from heedful.layers.scores import SCORES
from heedful.models.build import build_model
from heedful.tasks.dates import Task, dates_task
from heedful.tasks.dialogue import ARTICLE_PAIR, dialogue_task
from heedful.visualize.heatmap import plot_alignment

# No dropout: 40,000 fresh pairs seen about twice do not overfit, and dropout slows learning.
_RNN = ModelConfig(arch="rnn", d_model=64, hidden_size=256, dropout=0.0, bidirectional=True)

# Small models that learn the task in a couple of minutes on two CPU cores.
DEMO_MODELS: dict[str, ModelConfig] = {
    "transformer": ModelConfig(
        arch="transformer",
        d_model=64,
        num_heads=4,
        encoder_layers=2,
        decoder_layers=2,
        d_ff=256,
        dropout=0.0,
    ),
    "rnn-none": replace(_RNN, attention="none"),
    # one per score of scores.py; Luong's local attention (§3.2) with a window of D = 5 each
    # side: a date's source is about 25 characters, so the paper's D = 10 would cover nearly all
    **{
        f"rnn-{name}": replace(_RNN, attention=name, local_window=5 if score.local else 10)
        for name, score in SCORES.items()
    },
}

DEMO_TRAIN = TrainConfig(
    batch_tokens=2000,
    max_steps=6000,
    max_time=150.0,
    lr=3e-3,
    warmup_steps=100,
    schedule="inverse_sqrt",
    label_smoothing=0.1,
    clip_norm=1.0,
    eval_every=200,
)


@dataclass(frozen=True)
class DemoTask:
    """A generated task the demo can learn, and how to show it."""

    make: Callable[[int, int, int], Task]  # (n_train, n_test, seed) -> Task
    model_name: str  # the model that learns it when none is named
    train_size: int
    test_size: int
    what: str  # what a pair's source is, in the report: "held-out dates"
    search: GenerationConfig  # a fixed output limit, whatever the source length
    languages: tuple[str, str]  # saved with the model
    showcase: Callable[[list[tuple[str, str]]], str]  # held-out pairs -> the source to draw


def _clear_alignment(test_pairs) -> str:
    """A held-out date whose alignment is clearly non-diagonal: a month name, day first."""
    for source, _ in test_pairs:
        if any(c.isalpha() for c in source) and len(source) >= 18:
            return source
    return test_pairs[0][0]


DEMO_TASKS: dict[str, DemoTask] = {
    # ISO dates are 10 characters
    "dates": DemoTask(
        dates_task, "transformer", 40_000, 1000, "held-out dates",
        GenerationConfig(num_beams=1, max_len_ratio=0.0, max_len_offset=12),
        ("dates", "iso"), _clear_alignment,
    ),
    # the seq2seq article's chatbot is an RNN; replies are at most 24 characters
    "dialogue": DemoTask(
        dialogue_task, "rnn-bahdanau", 6000, 500, "held-out questions",
        GenerationConfig(num_beams=1, max_len_ratio=0.0, max_len_offset=30),
        ("dialogue", "reply"), lambda _: ARTICLE_PAIR[0],
    ),
}  # fmt: skip


@dataclass
class DemoResult:
    model_name: str
    exact_match: float
    steps: int
    train_seconds: float
    heatmap: Path
    examples: list[tuple[str, str, str]]  # (source, output, reference)
    model_dir: Path | None = None  # the trained model, for `heedful attention` / `explain`
    stopped_by: str = ""  # validation (it reached its target) | max_steps | max_time
    metrics: Path | None = None  # the training log, for `heedful curves`
    undertrained: bool = False  # held-out exact match below LOW_EXACT_MATCH


def _split(task: DemoTask, train_size: int, test_size: int, seed: int) -> tuple[list, list, list]:
    """Training, development and held-out pairs; the development pairs (at most 500) are
    generated with the training pairs, so they never repeat a held-out source."""
    dev_size = min(500, max(train_size // 10, 1))
    pairs = task.make(train_size + dev_size, test_size, seed)
    return pairs.train[:train_size], pairs.train[train_size:], pairs.test


def _train(translator: Translator, pairs: tuple[list, list], config: Config, out: Path, progress):
    """Train translator.model on `pairs` (train, dev) as every demo trains (demo/training.py)."""
    from heedful.data.batching import InMemoryPairs
    from heedful.training.text_task import TextValidation
    from heedful.training.validation import make_validator

    train, dev = pairs
    tokenizers = translator.src_tokenizer, translator.tgt_tokenizer
    scores = make_validator(TextValidation(dev, *tokenizers, config), config, "cpu")

    def validate(model) -> dict:
        outputs = [t.text for t in translator.translate([s for s, _ in dev], batch_size=500)]
        return {**scores(model), "exact_match": exact_match(outputs, [t for _, t in dev])}

    pairs = InMemoryPairs(
        [translator.src_tokenizer.encode(s) for s, _ in train],
        [translator.tgt_tokenizer.encode(t) for _, t in train],
    )
    return train_logged(translator.model, pairs, config, validate, out, progress)


def _score(translator: Translator, test: list, what: str, echo) -> tuple[float, list]:
    """Exact match on the held-out pairs, and the first eight as (source, output, reference)."""
    start = time.perf_counter()
    sources = [s for s, _ in test]
    translations = translator.translate(sources, batch_size=500)
    accuracy = exact_match([t.text for t in translations], [t for _, t in test])
    echo(
        f"exact match on {len(sources)} {what}: {accuracy:.1%} "
        f"({time.perf_counter() - start:.1f} s to translate)"
    )
    examples = [(s, t.text, ref) for (s, ref), t in zip(test[:8], translations)]
    for source, output, reference in examples:
        mark = "ok" if output == reference else f"WRONG, expected {reference}"
        echo(f"  {source:<38} -> {output}  {mark}")
    return accuracy, examples


def _check_choice(kind: str, given: str, choices: dict) -> None:
    if given not in choices:
        raise ValueError(f"unknown demo {kind} {given!r}; choose one of {', '.join(choices)}")


def run_demo(
    model_name: str | None = None,
    out_dir: str | Path = "heedful-demo",
    train_size: int | None = None,
    test_size: int | None = None,
    max_steps: int | None = None,
    max_time: float | None = None,
    seed: int = 1,
    progress: bool = True,
    echo=print,
    task: str = "dates",
):
    """Generate the task, train a model on it (DEMO_MODELS[model_name] for text, for captions
    demo_captions.CAPTION_MODELS'), score it, draw its attention and save it under out_dir;
    `echo` receives each line of the report. The model and the sizes default to the task's.
    Returns a DemoResult (captions: demo_captions.CaptionDemoResult, with its BLEU)."""
    _check_choice("task", task, [*DEMO_TASKS, "captions"])
    sizes = dict(train_size=train_size, test_size=test_size, max_steps=max_steps)
    options = dict(**sizes, max_time=max_time, seed=seed, progress=progress, echo=echo)
    if task == "captions":  # pictures in: its own data, models, scores and drawing
        return run_caption_demo(model_name, out_dir, **options)
    return _run_text_demo(DEMO_TASKS[task], task, model_name, Path(out_dir), **options)


def _run_text_demo(
    demo: DemoTask,
    task: str,
    model_name: str | None,
    out_dir: Path,
    train_size: int | None,
    test_size: int | None,
    max_steps: int | None,
    max_time: float | None,
    seed: int,
    progress: bool,
    echo,
) -> DemoResult:
    model_name = model_name or demo.model_name
    _check_choice("model", model_name, DEMO_MODELS)
    torch.manual_seed(seed)
    train, dev, test = _split(
        demo, train_size or demo.train_size, test_size or demo.test_size, seed
    )
    translator = _untrained(task, model_name, train, dev, len(test), echo)
    config = Config(
        DataConfig(tokenizer="char"),
        DEMO_MODELS[model_name],
        generation=demo.search,
        train=budget(DEMO_TRAIN, max_steps, max_time, seed),
    )
    result = _train(translator, (train, dev), config, out_dir, progress)
    echo(f"trained {result.steps} steps in {result.seconds:.0f} s (stopped by {result.stopped_by})")
    curves = f"heedful curves {out_dir} --png {out_dir / 'curves.png'}"
    echo(f"training log: {out_dir / 'metrics.jsonl'} (draw it: {curves})")
    accuracy, examples = _score(translator, test, demo.what, echo)
    warning = undertrained_warning(result.stopped_by, accuracy, config.train)
    if warning:
        echo(warning)
    undertrained = accuracy < LOW_EXACT_MATCH
    label = f"UNDERTRAINED, exact match {accuracy:.0%}: " if undertrained else ""
    heatmap = _draw(translator, demo.showcase(test), out_dir, model_name, label, echo)
    model_dir = _save(translator, config.model, demo, out_dir / f"model-{model_name}")
    hint = f' (try: heedful attention {model_dir} "{demo.showcase(test)}" --html viewer.html)'
    echo(f"model: {model_dir}{hint if heatmap.suffix == '.png' else ''}")
    return DemoResult(
        model_name,
        accuracy,
        result.steps,
        result.seconds,
        heatmap,
        examples,
        model_dir,
        result.stopped_by,
        out_dir / "metrics.jsonl",
        undertrained,
    )


def _save(translator: Translator, model_config, demo, model_dir: Path) -> Path:
    """The trained demo model as a model directory that every command reads."""
    src, tgt = translator.src_tokenizer, translator.tgt_tokenizer
    search, languages = demo.search, demo.languages
    return save_model_dir(model_dir, translator.model, model_config, src, tgt, search, languages)


def _untrained(task: str, model_name: str, train, dev, test_size: int, echo) -> Translator:
    """The demo's character vocabularies (from its training and development pairs) and its
    untrained model, said in two lines of the report."""
    src_tok = CharTokenizer.train(s for s, _ in train + dev)
    tgt_tok = CharTokenizer.train(t for _, t in train + dev)
    model = build_model(DEMO_MODELS[model_name], len(src_tok), len(tgt_tok))
    n_params = sum(p.numel() for p in model.parameters())
    echo(
        f"{task} task: {len(train)} training pairs, {test_size} held-out; e.g. "
        f"{train[0][0]!r} -> {train[0][1]!r}"
    )
    echo(f"model: {model_name} ({n_params / 1e6:.2f}M parameters)")
    return Translator(model, src_tok, tgt_tok, DEMO_TASKS[task].search)


def _draw(translator: Translator, source: str, out_dir: Path, model_name: str, label: str, echo):
    """The heatmap of `source` (last layer's cross-attention, heads averaged); `label` (the
    undertrained warning, or "") starts its title."""
    [t] = translator.translate([source], need_weights=True)
    echo(f"{source!r} -> {t.text!r}")
    if t.attention is None:  # rnn-none has no attention: show why it struggles instead
        path = _bottleneck_note(out_dir, source, t.text, label)
    else:
        layers = t.attention.size(1)
        weights = t.attention[:, -1].mean(dim=1)  # last layer, heads averaged: (T, S)
        title = f"{label}{model_name}: {source!r} -> {t.text!r}"
        if layers > 1 or t.attention.size(2) > 1:
            title += f"\n(cross-attention, layer {layers}, mean of {t.attention.size(2)} heads)"
        path = plot_alignment(
            weights, t.source_tokens, t.tokens, out_dir / f"attention-{model_name}.png", title
        )
    echo(f"attention heatmap: {path}")
    return path


def _bottleneck_note(out_dir: Path, source: str, output: str, label: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "attention-rnn-none.txt"
    path.write_text(
        f"{label}{source!r} -> {output!r}\nrnn-none has no attention: the decoder sees the source "
        "only through the encoder's final state (one fixed-size vector), so there is nothing to "
        "draw.\n",
        encoding="utf-8",
    )
    return path
