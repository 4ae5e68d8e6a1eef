"""`heedful demo --task captions` (demo/run.py's third task): learn to caption generated scenes,
then show where it looks.

The scenes (tasks/scenes.py) need no download; the demo trains one of three models in a few
minutes on two CPU cores (a CNN under the RNN decoder with Bahdanau attention, as in Show,
Attend and Tell; a CNN under the Transformer decoder; a ViT under it), scores exact match and
BLEU-1..4 on 1,000 held-out scenes, prints a few captions, draws the attention over the image
for each word (visualize/overlay.py) and saves the model for `heedful caption`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from heedful.config import Config, DataConfig, GenerationConfig, ModelConfig, TrainConfig
from heedful.data.image_pairs import ImagePairs, ImageSource
from heedful.data.tokenizers import SPECIALS
from heedful.demo.training import budget, train_logged, undertrained_warning
from heedful.evaluation import caption_bleu, exact_match
from heedful.inference.captioner import Captioner
from heedful.models.build import build_model
from heedful.tasks.scenes import CANVAS, SceneSet, scenes_task

_CNN = dict(encoder="cnn", image_size=CANVAS, cnn_channels=16, cnn_blocks=3, dropout=0.0)
CAPTION_MODELS: dict[str, ModelConfig] = {
    # pre-norm, coordinate channels and one encoder layer over the 6 × 6 cells: see
    # docs/benchmarks.md ("Captions") for what each bought on the held-out kinds
    "cnn-transformer": ModelConfig(
        arch="transformer",
        d_model=64,
        num_heads=4,
        decoder_layers=2,
        d_ff=256,
        norm="pre",
        cnn_coords=True,
        cnn_layers=1,
        **_CNN,
    ),
    "cnn-rnn-bahdanau": ModelConfig(
        arch="rnn", d_model=64, hidden_size=128, attention="bahdanau", **_CNN
    ),
    "vit-transformer": ModelConfig(
        arch="transformer",
        encoder="vit",
        image_size=CANVAS,
        patch_size=8,
        d_model=64,
        num_heads=4,
        encoder_layers=2,
        decoder_layers=2,
        d_ff=256,
        dropout=0.0,
        norm="pre",
    ),
}
DEFAULT_MODEL = "cnn-transformer"  # the best measured at 600 steps (docs/benchmarks.md)
CAPTION_TRAIN = TrainConfig(
    batch_tokens=36 * 64,  # 64 scenes of 6 × 6 regions
    max_steps=20_000,
    max_time=150.0,
    lr=2e-3,
    warmup_steps=100,
    label_smoothing=0.1,
    clip_norm=1.0,
    eval_every=300,  # every 150 went with runs that stalled near 70% (docs/benchmarks.md)
)
SEARCH = GenerationConfig(num_beams=1, max_len_ratio=0.0, max_len_offset=16)  # captions: ≤ 11
VOCAB_SIZE = 80  # BPE pieces: the scenes' ~20 words whole, plus their letters
TRAIN_SIZE, DEV_SIZE, TEST_SIZE = 20_000, 300, 1000
# Training scenes' kinds (one, left of, above, count); None: uniform, as the held-out task is.
# A mixture rich in counts was tried and lost in the demo (docs/benchmarks.md).
TRAIN_MIXTURE: tuple[float, ...] | None = None


class SceneImages:
    """Scene j of a SceneSet as the model's input tensor (picklable, for DataLoader workers)."""

    def __init__(self, scenes: SceneSet, transform):
        self.scenes, self.transform = scenes, transform

    def __call__(self, j: int) -> torch.Tensor:
        from heedful.data.images import normalize

        return normalize(self.scenes.pixels(j), self.transform)


@dataclass
class CaptionDemoResult:
    model_name: str
    exact_match: float
    bleu: dict  # caption_bleu's bleu1..bleu4 and signature
    steps: int
    train_seconds: float
    overlay: Path | None
    examples: list[tuple[str, str]]  # (output, reference)
    model_dir: Path
    stopped_by: str


class MixedPairs:
    """ImagePairs whose every batch is a random draw of scenes, whatever their captions' lengths.

    The batcher sorts pairs by target length to save padding; here the caption's length tells
    its kind (4 tokens: one shape, 9: "above", 10: "left of"), so sorted batches each hold one
    kind, and a model learns the relation word of a batch from the batch, not from the image:
    it ends up saying one relation for every pair. Reporting every caption as the longest one
    makes the sort a shuffle (the images' regions fix the batch size anyway). The batcher also
    reads these lengths as the batch's token count, the loss's divisor: the loss is then a mean
    over B × (longest + 1) positions, a nearly constant multiple (about 0.75) of the token mean
    for batches of 64 random captions.
    """

    def __init__(self, pairs: ImagePairs):
        self.pairs, self.src_lengths = pairs, pairs.src_lengths
        self.tgt_lengths = np.full(len(pairs), pairs.tgt_lengths.max(), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.pairs)

    def ids(self, indices: np.ndarray):
        return self.pairs.ids(indices)

    def batch(self, indices: np.ndarray):
        return self.pairs.batch(indices)


def _pixels(scenes: SceneSet) -> list[np.ndarray]:
    return [scenes.pixels(j) for j in range(len(scenes))]


def _train(
    captioner: Captioner, train: SceneSet, dev: SceneSet, config: Config, out: Path, progress: bool
):
    """Train on `train` as every demo trains (demo/training.py), validating on `dev` by exact
    match, and end with the weights that scored best on dev (the score swings by a few points
    late in training, and the run stops on the clock, wherever it is then)."""
    tok, model = captioner.tgt_tokenizer, captioner.model
    regions = int(np.prod(model.grid(CANVAS)))
    ids = [tok.encode(c) for c in train.captions]
    pairs = ImagePairs(SceneImages(train, captioner.transform), range(len(train)), ids, regions)
    pairs = MixedPairs(pairs)
    dev_pixels, best = _pixels(dev), _Best()

    def validate(_model) -> dict:
        outputs = [c.text for c in captioner.caption(dev_pixels, batch_size=300)]
        return best.offer(model, exact_match(outputs, dev.captions))

    result = train_logged(model, pairs, config, validate, out, progress)
    with torch.no_grad():
        validate(model)  # the steps since the last validation count too
    model.load_state_dict(best.weights)
    return result, best.score


class _Best:
    """The best dev exact match so far and a copy of the weights that scored it."""

    def __init__(self):
        self.score, self.weights = -1.0, None

    def offer(self, model: torch.nn.Module, score: float) -> dict:
        if score > self.score:
            self.score = score
            self.weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return {"exact_match": score}


def _score(captioner: Captioner, test: SceneSet, echo) -> tuple[float, dict, list]:
    start = time.perf_counter()
    outputs = [c.text for c in captioner.caption(_pixels(test), batch_size=500)]
    accuracy = exact_match(outputs, test.captions)
    bleu = caption_bleu(outputs, [[c] for c in test.captions])
    echo(
        f"exact match on {len(test)} held-out scenes: {accuracy:.1%}; BLEU-1..4 "
        f"{bleu['bleu1']:.1f} / {bleu['bleu2']:.1f} / {bleu['bleu3']:.1f} / {bleu['bleu4']:.1f} "
        f"({time.perf_counter() - start:.1f} s to caption)"
    )
    examples = list(zip(outputs[:8], test.captions[:8]))
    for output, reference in examples:
        echo(f"  {output:<50} {'ok' if output == reference else f'WRONG, expected {reference}'}")
    return accuracy, bleu, examples


def _draw(captioner: Captioner, test: SceneSet, out: Path, name: str, echo) -> Path | None:
    """The overlay of the first held-out scene with two shapes (one panel per word)."""
    from heedful.visualize.overlay import draw_overlay

    j = next((j for j, s in enumerate(test.scenes) if len(s.shapes) == 2), 0)
    [caption] = captioner.caption([test.pixels(j)], need_weights=True)
    if caption.attention is None:
        return None
    scale = 6  # a 48-pixel scene drawn 288 pixels wide: the regions stay exactly in place
    pixels = np.kron(test.pixels(j), np.ones((scale, scale, 1), dtype=np.uint8))
    title = f"{name}: {caption.text!r} (reference {test.captions[j]!r})"
    path = draw_overlay(
        pixels, caption.attention_grid(), caption.tokens, out / f"overlay-{name}.png", title
    )
    echo(f"attention over the image, word by word: {path}")
    return path


def _new_captioner(model_name: str, captions: list[str], seed: int) -> Captioner:
    from heedful.data.images import ImageTransform
    from heedful.data.tokenizers import SentencePieceTokenizer

    model_config = CAPTION_MODELS[model_name]
    tokenizer = SentencePieceTokenizer.train(captions, VOCAB_SIZE, "bpe")
    torch.manual_seed(seed)
    model = build_model(model_config, len(SPECIALS), len(tokenizer))
    return Captioner(model, ImageTransform(size=CANVAS), tokenizer, SEARCH)


def _config(model_name: str, max_steps: int | None, max_time: float | None, seed: int):
    """CAPTION_TRAIN with the caller's budget and seed, in a whole Config (for the run log)."""
    train = budget(CAPTION_TRAIN, max_steps, max_time, seed)
    data = DataConfig(tokenizer="sentencepiece", vocab_size=VOCAB_SIZE, sp_model_type="bpe")
    return Config(data, CAPTION_MODELS[model_name], train=train, generation=SEARCH)


def _save(captioner: Captioner, test: SceneSet, out_dir: Path, model_name: str, echo) -> Path:
    """The model directory, and a held-out scene as a PNG to try it on."""
    from heedful.checkpoint.model_dir import save_model_dir

    model_dir = save_model_dir(
        out_dir / f"model-{model_name}",
        captioner.model,
        CAPTION_MODELS[model_name],
        ImageSource(captioner.transform),
        captioner.tgt_tokenizer,
        SEARCH,
        ("image", "en"),
    )
    import matplotlib.pyplot as plt

    example = out_dir / "scene.png"
    plt.imsave(example, test.pixels(0))
    echo(f"model: {model_dir} (try: heedful caption {model_dir} {example})")
    return model_dir


def run_caption_demo(
    model_name: str | None = None,
    out_dir: str | Path = "heedful-demo",
    train_size: int | None = None,
    test_size: int | None = None,
    max_steps: int | None = None,
    max_time: float | None = None,
    seed: int = 1,
    progress: bool = True,
    echo=print,
) -> CaptionDemoResult:
    """Generate scenes, train CAPTION_MODELS[model_name] on them, score, draw and save under
    out_dir; `echo` receives each line of the report."""
    model_name, out_dir = model_name or DEFAULT_MODEL, Path(out_dir)
    if model_name not in CAPTION_MODELS:
        raise ValueError(
            f"unknown captions model {model_name!r}; choose one of {', '.join(CAPTION_MODELS)}"
        )
    n_train = train_size or TRAIN_SIZE
    train, test = scenes_task(n_train, test_size or TEST_SIZE, seed, mixture=TRAIN_MIXTURE)
    dev_size = min(DEV_SIZE, max(n_train // 10, 20))
    dev = SceneSet(dev_size, seed, split=2)  # a stream of its own, apart from train and test
    captioner = _new_captioner(model_name, train.captions, seed)
    n_params = sum(p.numel() for p in captioner.model.parameters())
    echo(
        f"captions task: {n_train} training scenes, {len(test)} held-out; e.g. "
        f"{train.captions[0]!r}"
    )
    echo(f"model: {model_name} ({n_params / 1e6:.2f}M parameters)")
    config = _config(model_name, max_steps, max_time, seed)
    result, dev_score = _train(captioner, train, dev, config, out_dir, progress)
    echo(
        f"trained {result.steps} steps in {result.seconds:.0f} s (stopped by "
        f"{result.stopped_by}); kept the weights best on {len(dev)} dev scenes "
        f"({dev_score:.1%})"
    )
    accuracy, bleu, examples = _score(captioner, test, echo)
    warning = undertrained_warning(result.stopped_by, accuracy, config.train)
    if warning:  # as the text demos say it: a busy machine's budget ended training early
        echo(warning)
    overlay = _draw(captioner, test, out_dir, model_name, echo)
    model_dir = _save(captioner, test, out_dir, model_name, echo)
    return CaptionDemoResult(
        model_name,
        accuracy,
        bleu,
        result.steps,
        result.seconds,
        overlay,
        examples,
        model_dir,
        result.stopped_by,
    )
