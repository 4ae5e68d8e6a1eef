"""The one-command demo: learn to read human-written dates, then show where the model looks.

Generates the dates task (no download), trains a small character-level model with a progress
bar, scores exact match on 1,000 held-out dates, prints a few translations and writes an
attention heatmap.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from heedful.checkpoint import save_model_dir
from heedful.config import GenerationConfig, ModelConfig, TrainConfig
from heedful.data.tasks import dates_task
from heedful.data.tokenizers import CharTokenizer
from heedful.evaluation import exact_match
from heedful.models.build import build_model
from heedful.translator import Translator
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
    "rnn-bahdanau": replace(_RNN, attention="bahdanau"),
    "rnn-luong-dot": replace(_RNN, attention="luong-dot"),
    "rnn-luong-general": replace(_RNN, attention="luong-general"),
    "rnn-luong-concat": replace(_RNN, attention="luong-concat"),
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

# ISO dates are 10 characters: a fixed output limit, whatever the source length.
_SEARCH = GenerationConfig(num_beams=1, max_len_ratio=0.0, max_len_offset=12)


@dataclass
class DemoResult:
    model_name: str
    exact_match: float
    steps: int
    train_seconds: float
    heatmap: Path
    examples: list[tuple[str, str, str]]  # (source, output, reference)
    model_dir: Path | None = None  # the trained model, for `heedful attention` / `explain`


def _dates(train_size: int, test_size: int, seed: int) -> tuple[list, list, list]:
    """Training, development and held-out pairs of the dates task; the development pairs
    (at most 500) are generated with the training pairs, so they never repeat a test date."""
    dev_size = min(500, max(train_size // 10, 1))
    task = dates_task(train_size + dev_size, test_size, seed=seed)
    return task.train[:train_size], task.train[train_size:], task.test


def _train_config(max_steps: int | None, max_time: float | None, seed: int) -> TrainConfig:
    """DEMO_TRAIN with the caller's budget and seed."""
    config = replace(DEMO_TRAIN, seed=seed)
    if max_steps is not None:
        config = replace(config, max_steps=max_steps, eval_every=min(config.eval_every, max_steps))
    if max_time is not None:
        config = replace(config, max_time=max_time)
    return config


def _train(translator: Translator, train: list, dev: list, config: TrainConfig, progress: bool):
    """Train translator.model on `train`, stopping early once it gets every dev date right."""
    from heedful.training import train as train_model

    def validate(_model) -> dict:
        outputs = [t.text for t in translator.translate([s for s, _ in dev], batch_size=500)]
        return {"dev_exact_match": exact_match(outputs, [t for _, t in dev])}

    return train_model(
        translator.model,
        [translator.src_tokenizer.encode(s) for s, _ in train],
        [translator.tgt_tokenizer.encode(t) for _, t in train],
        config,
        validate=validate,
        good_enough=lambda m: m["dev_exact_match"] >= 0.999,
        progress=progress,
    )


def _score(translator: Translator, test: list, echo) -> tuple[float, list[tuple[str, str, str]]]:
    """Exact match on the held-out dates, and the first eight as (source, output, reference)."""
    start = time.perf_counter()
    sources = [s for s, _ in test]
    translations = translator.translate(sources, batch_size=500)
    accuracy = exact_match([t.text for t in translations], [t for _, t in test])
    echo(
        f"exact match on {len(sources)} held-out dates: {accuracy:.1%} "
        f"({time.perf_counter() - start:.1f} s to translate)"
    )
    examples = [(s, t.text, ref) for (s, ref), t in zip(test[:8], translations)]
    for source, output, reference in examples:
        mark = "ok" if output == reference else f"WRONG, expected {reference}"
        echo(f"  {source:<38} -> {output}  {mark}")
    return accuracy, examples


def run_demo(
    model_name: str = "transformer",
    out_dir: str | Path = "heedful-demo",
    train_size: int = 40_000,
    test_size: int = 1000,
    max_steps: int | None = None,
    max_time: float | None = None,
    seed: int = 1,
    progress: bool = True,
    echo=print,
) -> DemoResult:
    """Generate the dates task, train DEMO_MODELS[model_name] on it, score it, draw its
    attention and save it under out_dir; `echo` receives each line of the report."""
    if model_name not in DEMO_MODELS:
        raise ValueError(
            f"unknown demo model {model_name!r}; choose one of {', '.join(DEMO_MODELS)}"
        )
    torch.manual_seed(seed)
    train, dev, test = _dates(train_size, test_size, seed)
    src_tok = CharTokenizer.train(s for s, _ in train + dev)
    tgt_tok = CharTokenizer.train(t for _, t in train + dev)
    model = build_model(DEMO_MODELS[model_name], len(src_tok), len(tgt_tok))
    n_params = sum(p.numel() for p in model.parameters())
    echo(
        f"dates task: {len(train)} training pairs, {len(test)} held-out; e.g. "
        f"{train[0][0]!r} -> {train[0][1]!r}"
    )
    echo(f"model: {model_name} ({n_params / 1e6:.2f}M parameters)")

    translator = Translator(model, src_tok, tgt_tok, _SEARCH)
    result = _train(translator, train, dev, _train_config(max_steps, max_time, seed), progress)
    echo(f"trained {result.steps} steps in {result.seconds:.0f} s (stopped by {result.stopped_by})")
    accuracy, examples = _score(translator, test, echo)

    heatmap = _draw(translator, _showcase_source(test), Path(out_dir), model_name)
    echo(f"attention heatmap: {heatmap}")
    model_dir = save_model_dir(
        Path(out_dir) / f"model-{model_name}",
        model,
        DEMO_MODELS[model_name],
        src_tok,
        tgt_tok,
        _SEARCH,
        ("dates", "iso"),
    )
    hint = f' (try: heedful attention {model_dir} "{examples[0][0]}" --html viewer.html)'
    echo(f"model: {model_dir}{hint if heatmap.suffix == '.png' else ''}")
    return DemoResult(
        model_name, accuracy, result.steps, result.seconds, heatmap, examples, model_dir
    )


def _showcase_source(test_pairs) -> str:
    """A held-out date whose alignment is clearly non-diagonal: a month name, day first."""
    for source, _ in test_pairs:
        if any(c.isalpha() for c in source) and len(source) >= 18:
            return source
    return test_pairs[0][0]


def _draw(translator: Translator, source: str, out_dir: Path, model_name: str) -> Path:
    [t] = translator.translate([source], need_weights=True)
    if t.attention is None:  # rnn-none has no attention: show why it struggles instead
        return _bottleneck_note(out_dir, source, t.text)
    layers = t.attention.size(1)
    weights = t.attention[:, -1].mean(dim=1)  # last layer, heads averaged: (T, S)
    title = f"{model_name}: {source!r} -> {t.text!r}"
    if layers > 1 or t.attention.size(2) > 1:
        title += f"\n(cross-attention, layer {layers}, mean of {t.attention.size(2)} heads)"
    return plot_alignment(
        weights, t.source_tokens, t.tokens, out_dir / f"attention-{model_name}.png", title
    )


def _bottleneck_note(out_dir: Path, source: str, output: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "attention-rnn-none.txt"
    path.write_text(
        f"{source!r} -> {output!r}\nrnn-none has no attention: the decoder sees the source only "
        "through the encoder's final state (one fixed-size vector), so there is nothing to draw.\n",
        encoding="utf-8",
    )
    return path
