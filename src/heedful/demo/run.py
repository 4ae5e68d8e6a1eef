"""The one-command demo: learn a generated task in minutes, then show where the model looks.

Three tasks, no download: reading human-written dates ("dates", the default), the articles'
own example, a toy chatbot that answers "Hi, How are you?" with "I am fine" ("dialogue"), and
captions of generated scenes of shapes ("captions", demo/captions.py: pictures in, attention
drawn over them). Every task takes one path (run_demo): generate the data, make the untrained
Translator (of text or of pictures), train it with a progress bar, validating on development
pairs and logging to OUT/metrics.jsonl (as `heedful train` does, so `heedful curves OUT` draws
it; demo/training.py), score exact match on held-out pairs, print a few outputs, draw the
attention and save the model. A task (DemoTask) supplies only what is its own: its data,
models, vocabularies, training pairs, scores and picture.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar, Protocol

import torch

from heedful.checkpoint.model_dir import save_model_dir
from heedful.checkpoint.status import status_line
from heedful.config import (
    Config,
    DataConfig,
    DecoderConfig,
    GenerationConfig,
    ModelConfig,
    TextEncoderConfig,
    TrainConfig,
)
from heedful.cpu import set_threads
from heedful.data.batching import Pairs
from heedful.data.tokenizers import CharTokenizer
from heedful.demo.budgets import DATES_STEPS, DIALOGUE_STEPS, budget_rule
from heedful.demo.captions import CaptionDemo
from heedful.demo.training import (
    BestWeights,
    DemoData,
    WithExactMatch,
    budget,
    mark,
    snapshots_of,
    train_logged,
    training_status,
    undertrained_warning,
)
from heedful.evaluation import exact_match
from heedful.inference.translator import Translator
from heedful.layers.scores import SCORES
from heedful.models.build import build_model
from heedful.tasks.dates import Task, dates_task
from heedful.tasks.dialogue import ARTICLE_PAIR, dialogue_task
from heedful.visualize.heatmap import plot_alignment

# No dropout: 40,000 fresh pairs seen about twice do not overfit, and dropout slows learning.
_RNN = ModelConfig(
    arch="rnn",
    d_model=64,
    hidden_size=256,
    dropout=0.0,
    encoder=TextEncoderConfig(bidirectional=True),
)


def _rnn(attention: str, local_window: int = 10) -> ModelConfig:
    """The demo's RNN with this attention (and window, for a local one)."""
    return replace(_RNN, decoder=DecoderConfig(attention=attention, local_window=local_window))


# Small models that learn the task in a couple of minutes on two CPU cores.
DEMO_MODELS: dict[str, ModelConfig] = {
    "transformer": ModelConfig(
        arch="transformer",
        d_model=64,
        num_heads=4,
        d_ff=256,
        dropout=0.0,
        encoder=TextEncoderConfig(layers=2),
        decoder=DecoderConfig(layers=2),
    ),
    "rnn-none": _rnn("none"),
    # one per score of scores.py; Luong's local attention (§3.2) with a window of D = 5 each
    # side: a date's source is about 25 characters, so the paper's D = 10 would cover nearly all
    **{f"rnn-{name}": _rnn(name, 5 if score.local else 10) for name, score in SCORES.items()},
}

# Budgets are steps (DemoTask.step_budget), not seconds: a busy machine then trains the same
# model, only slower; max_steps here is what the tasks' own budgets replace
DEMO_TRAIN = TrainConfig(
    batch_tokens=2000,
    max_steps=6000,
    max_time=None,
    lr=3e-3,
    warmup_steps=100,
    schedule="inverse_sqrt",
    label_smoothing=0.1,
    clip_norm=1.0,
    eval_every=200,
    snapshot_sentences=2,  # the heatmap's sentence and a development one, over training
)


class DemoTask(Protocol):
    """What a task supplies to the one demo path, run_demo."""

    models: dict[str, ModelConfig]  # the models that can learn it, by name
    model_name: str  # the one that does when none is named
    word: str  # what an unknown model of it is called: "demo", "captions"
    data_config: DataConfig  # the run log's record of its vocabularies
    train: TrainConfig
    search: GenerationConfig  # a fixed output limit, whatever the source length
    languages: tuple[str, str]  # saved with the model
    sizes: tuple[int, int]  # training and held-out inputs by default
    what: str  # the held-out inputs, in the report: "held-out dates"
    verb: str  # what the Translator does to them: "translate"
    keep_best: bool  # end with the weights best on the development pairs, not the last

    def make(self, train_size: int, test_size: int, seed: int) -> DemoData: ...
    def untrained(self, model: ModelConfig, data: DemoData, seed: int) -> Translator: ...
    def intro(self, data: DemoData) -> str: ...  # the report's first line
    def pairs(self, translator: Translator, data: DemoData) -> Pairs: ...  # to train on
    def validation(self, translator: Translator, data: DemoData, config: Config): ...
    def scores(self, outputs: list[str], references: list[str]) -> tuple[dict | None, str]: ...
    def example(self, item, output: str, reference: str) -> str: ...  # a report line
    def draw(self, translator, data: DemoData, out: Path, name: str, label: str, echo): ...
    def snapshot_inputs(self, data: DemoData) -> list: ...  # traced over training, drawn first
    def step_budget(self, model: str) -> int: ...  # its steps at most (docs/benchmarks.md)
    def hint(self, model_dir: Path, data: DemoData, out: Path, drawn: Path | None) -> str: ...


def _clear_alignment(test_pairs) -> str:
    """A held-out date whose alignment is clearly non-diagonal: a month name, day first."""
    for source, _ in test_pairs:
        if any(c.isalpha() for c in source) and len(source) >= 18:
            return source
    return test_pairs[0][0]


@dataclass(frozen=True)
class TextDemo:
    """A generated text task: character vocabularies from its pairs, DEMO_MODELS, exact match,
    and the heatmap of one held-out source."""

    name: str  # in the report: "dates task: ..."
    make_pairs: Callable[[int, int, int], Task]  # (n_train, n_test, seed) -> Task
    model_name: str
    sizes: tuple[int, int]
    what: str
    search: GenerationConfig
    languages: tuple[str, str]
    showcase: Callable[[list[tuple[str, str]]], str]  # held-out pairs -> the source to draw
    # each model's steps at most (budget_rule), from the steps measured to its target
    budgets: dict[str, int]
    models: ClassVar[dict] = DEMO_MODELS
    word: ClassVar[str] = "demo"
    data_config: ClassVar[DataConfig] = DataConfig(tokenizer="char")
    train: ClassVar[TrainConfig] = DEMO_TRAIN
    verb: ClassVar[str] = "translate"
    keep_best: ClassVar[bool] = False

    def make(self, train_size: int, test_size: int, seed: int) -> DemoData:
        """Training, development and held-out pairs; the development pairs (at most 500) are
        generated with the training pairs, so they never repeat a held-out source."""
        dev_size = min(500, max(train_size // 10, 1))
        pairs = self.make_pairs(train_size + dev_size, test_size, seed)
        return DemoData(pairs.train[:train_size], pairs.train[train_size:], pairs.test)

    def untrained(self, model: ModelConfig, data: DemoData, seed: int) -> Translator:
        src_tok = CharTokenizer.train(s for s, _ in data.own + data.dev)
        tgt_tok = CharTokenizer.train(t for _, t in data.own + data.dev)
        torch.manual_seed(seed)
        model = build_model(model, len(src_tok), len(tgt_tok))
        return Translator(model, src_tok, tgt_tok, self.search)

    def intro(self, data: DemoData) -> str:
        (source, target), count = data.own[0], len(data.own)
        e_g = f"e.g. {source!r} -> {target!r}"
        return f"{self.name} task: {count} training pairs, {len(data.test)} held-out; {e_g}"

    def pairs(self, translator: Translator, data: DemoData) -> Pairs:
        from heedful.data.batching import InMemoryPairs

        src_tok, tgt_tok = translator.src_tokenizer, translator.tgt_tokenizer
        return InMemoryPairs(
            [src_tok.encode(s) for s, _ in data.own], [tgt_tok.encode(t) for _, t in data.own]
        )

    def validation(self, translator: Translator, data: DemoData, config: Config):
        from heedful.training.text_task import TextValidation

        return TextValidation(data.dev, translator.src_tokenizer, translator.tgt_tokenizer, config)

    def scores(self, outputs: list[str], references: list[str]) -> tuple[dict | None, str]:
        return None, ""

    def example(self, item: str, output: str, reference: str) -> str:
        return f"  {item:<38} -> {output}  {mark(output, reference)}"

    def draw(self, translator, data: DemoData, out: Path, name: str, label: str, echo) -> Path:
        return _draw(translator, self.showcase(data.test), out, name, label, echo)

    def snapshot_inputs(self, data: DemoData) -> list[str]:
        """The source the heatmap draws, then the development sources."""
        return [self.showcase(data.test), *(source for source, _ in data.dev)]

    def step_budget(self, model: str) -> int:
        return self.budgets[model]

    def hint(self, model_dir: Path, data: DemoData, out: Path, drawn: Path | None) -> str:
        source = self.showcase(data.test)
        shown = drawn is not None and drawn.suffix == ".png"  # rnn-none draws no heatmap
        return f' (try: heedful attention {model_dir} "{source}" --html viewer.html)' * shown


DEMO_TASKS: dict[str, DemoTask] = {
    # ISO dates are 10 characters
    "dates": TextDemo(
        "dates", dates_task, "transformer", (40_000, 1000), "held-out dates",
        GenerationConfig(num_beams=1, max_len_ratio=0.0, max_len_offset=12),
        ("dates", "iso"), _clear_alignment, budget_rule(DATES_STEPS, DEMO_TRAIN.eval_every),
    ),
    # the seq2seq article's chatbot is an RNN; replies are at most 24 characters
    "dialogue": TextDemo(
        "dialogue", dialogue_task, "rnn-bahdanau", (6000, 500), "held-out questions",
        GenerationConfig(num_beams=1, max_len_ratio=0.0, max_len_offset=30),
        ("dialogue", "reply"), lambda _: ARTICLE_PAIR[0],
        budget_rule(DIALOGUE_STEPS, DEMO_TRAIN.eval_every),
    ),
    "captions": CaptionDemo(),  # pictures in (demo/captions.py)
}  # fmt: skip


@dataclass
class DemoResult:
    model_name: str
    exact_match: float
    steps: int
    train_seconds: float
    heatmap: Path | None  # the attention drawn: a heatmap, an overlay on the picture, a note
    examples: list[tuple]  # (input, output, reference)
    model_dir: Path | None = None  # the trained model, for `heedful attention` / `explain`
    stopped_by: str = ""  # validation (it reached its target) | max_steps | max_time
    metrics: Path | None = None  # the training log, for `heedful curves`
    undertrained: bool = False  # held-out exact match below demo/training.py's LOW_EXACT_MATCH
    bleu: dict | None = None  # captions: caption_bleu's bleu1..bleu4 and signature


def _check_choice(kind: str, given: str, choices: dict) -> None:
    if given not in choices:
        raise ValueError(f"unknown {kind} {given!r}; choose one of {', '.join(choices)}")


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
    snapshots: int | None = None,
) -> DemoResult:
    """Generate the task, train a model on it (the task's models[model_name]: DEMO_MODELS for
    text, demo/captions.py's CAPTION_MODELS for captions), score it, draw its attention and
    save it under out_dir; `echo` receives each line of the report. The model and the sizes
    default to the task's; `snapshots`, the inputs traced over training into
    out_dir/snapshots.json (0: none), too."""
    _check_choice("demo task", task, DEMO_TASKS)
    set_threads(torch.get_num_threads())  # pinned: the tour's results, whatever else runs
    demo, out_dir = DEMO_TASKS[task], Path(out_dir)
    model_name = model_name or demo.model_name
    _check_choice(f"{demo.word} model", model_name, demo.models)
    sizes = (train_size or demo.sizes[0], test_size or demo.sizes[1])
    data = demo.make(*sizes, seed)
    translator = demo.untrained(demo.models[model_name], data, seed)
    n_params = sum(p.numel() for p in translator.model.parameters())
    echo(demo.intro(data))
    echo(f"model: {model_name} ({n_params / 1e6:.2f}M parameters)")
    train = budget(demo.train, max_steps or demo.step_budget(model_name), max_time, seed, snapshots)
    config = Config(demo.data_config, demo.models[model_name], train=train, generation=demo.search)
    result, kept = _train(translator, demo, data, config, out_dir, progress)
    stopped = f"(stopped by {result.stopped_by}){kept}"
    echo(f"trained {result.steps} steps in {result.seconds:.0f} s {stopped}")
    curves = f"heedful curves {out_dir} --png {out_dir / 'curves.png'}"
    echo(f"training log: {out_dir / 'metrics.jsonl'} (draw it: {curves})")
    if config.train.snapshot_sentences:
        slider = f"heedful attention {out_dir} --html {out_dir / 'training.html'}"
        echo(f"attention over training: {out_dir / 'snapshots.json'} (see it: {slider})")
    accuracy, bleu, examples = _score(translator, demo, data.test, echo)
    warning = undertrained_warning(result.stopped_by, accuracy, config.train)
    if warning:
        echo(warning)
    status = training_status(result, accuracy, bleu, f"{len(data.test)} {demo.what}")
    translator.training = status  # its model directory and every trace of it say it too
    label = status_line(status, sep="\n") + "\n"  # the picture's title starts with it
    drawn = demo.draw(translator, data, out_dir, model_name, label, echo)
    model_dir = _save(translator, config.model, demo, out_dir / f"model-{model_name}", status)
    echo(f"model: {model_dir}{demo.hint(model_dir, data, out_dir, drawn)}")
    metrics = out_dir / "metrics.jsonl"
    run = (result.steps, result.seconds, drawn, examples, model_dir, result.stopped_by, metrics)
    return DemoResult(model_name, accuracy, *run, status["undertrained"], bleu)


def _train(translator: Translator, demo, data: DemoData, config: Config, out: Path, progress):
    """Train translator.model on the task's pairs as every demo trains (demo/training.py),
    validating on the development pairs; a task that keeps its best weights ends with them.
    Returns the TrainResult and what the report says of the weights kept ("" or the score)."""
    from heedful.training.validation import make_validator

    references = [reference for _, reference in data.dev]
    valid = WithExactMatch(demo.validation(translator, data, config), references)
    scores, best = make_validator(valid, config, "cpu"), BestWeights()

    def validate(model) -> dict:
        metrics = scores(model)
        return best.offer(model, metrics) if demo.keep_best else metrics

    pairs = demo.pairs(translator, data)
    snapshots = snapshots_of(translator, demo.snapshot_inputs(data), config, out)
    result = train_logged(translator.model, pairs, config, validate, out, progress, snapshots)
    if not demo.keep_best:
        return result, ""
    with torch.no_grad():
        validate(translator.model.eval())  # the steps since the last validation count too
    translator.model.load_state_dict(best.weights)
    kept = f"; kept the weights best on {len(data.dev)} dev {demo.what.split()[-1]}"
    return result, f"{kept} ({best.score:.1%})"


def _save(translator: Translator, model_config, demo, model_dir: Path, status: dict) -> Path:
    """The trained demo model as a model directory that every command reads, saying how it
    was trained (checkpoint/status.py)."""
    src, tgt, model = translator.source, translator.tgt_tokenizer, translator.model
    sides = (model, model_config, src, tgt, demo.search, demo.languages)
    return save_model_dir(model_dir, *sides, status=status)


def _score(translator: Translator, demo, test: list, echo) -> tuple[float, dict | None, list]:
    """Exact match (and the task's other scores) on the held-out pairs, and the first eight
    as (input, output, reference)."""
    start = time.perf_counter()
    outputs = [t.text for t in translator.translate([s for s, _ in test], batch_size=500)]
    references = [reference for _, reference in test]
    accuracy = exact_match(outputs, references)
    scores, said = demo.scores(outputs, references)
    seconds = time.perf_counter() - start
    took = f"({seconds:.1f} s to {demo.verb})"
    echo(f"exact match on {len(test)} {demo.what}: {accuracy:.1%}{said} {took}")
    examples = [(s, output, r) for (s, r), output in zip(test[:8], outputs)]
    for example in examples:
        echo(demo.example(*example))
    return accuracy, scores, examples


def _draw(translator: Translator, source: str, out_dir: Path, model_name: str, label: str, echo):
    """The heatmap of `source` (last layer's cross-attention, heads averaged); `label` (the
    training status, "UNDERTRAINED" first when it is) starts its title."""
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
