"""`heedful demo --task captions`, demo/run.py's third task: learn to caption generated scenes,
then show where it looks.

The scenes (tasks/scenes.py) need no download; demo/run.py's one path trains one of three
models in a few minutes on two CPU cores (a CNN under the RNN decoder with Bahdanau attention,
as in Show, Attend and Tell; a CNN under the Transformer decoder; a ViT under it), scores exact
match and BLEU-1..4 on 1,000 held-out scenes, prints a few captions, draws the attention over
the image for each word (visualize/overlay.py) and saves the model for `heedful caption`. What
is the task's own is here: the scenes, the models, the BPE vocabulary, the pictures' pairs and
the overlay.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from heedful.config import (
    MAX_SNAPSHOT_SENTENCES,
    CNNEncoderConfig,
    Config,
    DataConfig,
    DecoderConfig,
    GenerationConfig,
    ModelConfig,
    TrainConfig,
    ViTEncoderConfig,
)
from heedful.data.image_pairs import ImagePairs
from heedful.data.sources import ImageSource
from heedful.demo.budgets import CAPTION_STEPS, budget_rule
from heedful.demo.training import DemoData, mark
from heedful.inference.translator import Translator
from heedful.models.build import build_model
from heedful.tasks.scenes import CANVAS, SceneSet, scenes_task

_CNN = CNNEncoderConfig(image_size=CANVAS, channels=16, blocks=3)
CAPTION_MODELS: dict[str, ModelConfig] = {
    # pre-norm, coordinate channels and one encoder layer over the 6 × 6 cells: see
    # docs/benchmarks.md ("Captions") for what each bought on the held-out kinds
    "cnn-transformer": ModelConfig(
        arch="transformer",
        d_model=64,
        num_heads=4,
        d_ff=256,
        norm="pre",
        dropout=0.0,
        encoder=replace(_CNN, coords=True, layers=1),
        decoder=DecoderConfig(layers=2),
    ),
    "cnn-rnn-bahdanau": ModelConfig(
        arch="rnn",
        d_model=64,
        hidden_size=128,
        dropout=0.0,
        encoder=_CNN,
        decoder=DecoderConfig(attention="bahdanau"),
    ),
    "vit-transformer": ModelConfig(
        arch="transformer",
        d_model=64,
        num_heads=4,
        d_ff=256,
        dropout=0.0,
        norm="pre",
        encoder=ViTEncoderConfig(image_size=CANVAS, patch_size=8, layers=2),
        decoder=DecoderConfig(layers=2),
    ),
}
DEFAULT_MODEL = "cnn-transformer"  # the best measured at 600 steps (docs/benchmarks.md)
CAPTION_TRAIN = TrainConfig(
    batch_tokens=36 * 64,  # 64 scenes of 6 × 6 regions
    max_steps=20_000,
    max_time=None,
    lr=2e-3,
    warmup_steps=100,
    label_smoothing=0.1,
    clip_norm=1.0,
    eval_every=300,  # every 150 went with runs that stalled near 70% (docs/benchmarks.md)
    snapshot_sentences=2,  # the overlay's scene and a development one, over training
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


def _pairs(scenes: SceneSet) -> list[tuple[np.ndarray, str]]:
    """Each scene's pixels and caption: the (input, reference) pairs of the demo's path."""
    return [(scenes.pixels(j), caption) for j, caption in enumerate(scenes.captions)]


def _two_shapes(scenes: SceneSet) -> int:
    """The first scene with two shapes (a relation to say), or the first."""
    return next((j for j, s in enumerate(scenes.scenes) if len(s.shapes) == 2), 0)


class CaptionDemo:
    """What the captions task supplies to demo/run.py's one path (its DemoTask): the scenes
    (DemoData.own: training, development and held-out SceneSets), CAPTION_MODELS over an
    ImageSource, a BPE vocabulary of the training captions, BLEU beside exact match, and the
    overlay of a held-out scene with two shapes."""

    models, model_name, word = CAPTION_MODELS, DEFAULT_MODEL, "captions"
    data_config = DataConfig(tokenizer="sentencepiece", vocab_size=VOCAB_SIZE, sp_model_type="bpe")
    train, search, languages = CAPTION_TRAIN, SEARCH, ("image", "en")
    sizes, what, verb = (TRAIN_SIZE, TEST_SIZE), "held-out scenes", "caption"
    keep_best = True  # the dev score swings by a few points late in training

    def make(self, train_size: int, test_size: int, seed: int) -> DemoData:
        train, test = scenes_task(train_size, test_size, seed, mixture=TRAIN_MIXTURE)
        dev = SceneSet(min(DEV_SIZE, max(train_size // 10, 20)), seed, split=2)  # its own stream
        return DemoData((train, dev, test), _pairs(dev), _pairs(test))

    def untrained(self, model: ModelConfig, data: DemoData, seed: int) -> Translator:
        from heedful.data.images import ImageTransform
        from heedful.data.tokenizers import SentencePieceTokenizer

        tokenizer = SentencePieceTokenizer.train(data.own[0].captions, VOCAB_SIZE, "bpe")
        torch.manual_seed(seed)
        network = build_model(model, 0, len(tokenizer))  # pixels: no source vocabulary
        return Translator(network, ImageSource(ImageTransform(size=CANVAS)), tokenizer, SEARCH)

    def intro(self, data: DemoData) -> str:
        train = data.own[0]
        return (
            f"captions task: {len(train)} training scenes, {len(data.test)} held-out; e.g. "
            f"{train.captions[0]!r}"
        )

    def pairs(self, translator: Translator, data: DemoData) -> MixedPairs:
        train, source = data.own[0], translator.source
        ids = [translator.tgt_tokenizer.encode(c) for c in train.captions]
        regions = int(np.prod(source.grid))
        images = SceneImages(train, source.transform)
        return MixedPairs(ImagePairs(images, range(len(train)), ids, regions))

    def validation(self, translator: Translator, data: DemoData, config: Config):
        from heedful.training.captions_task import CaptionValidation

        dev, source = data.own[1], translator.source
        images = SceneImages(dev, source.transform)
        references = [[caption] for caption in dev.captions]
        first = [dev.pixels(j) for j in range(min(len(dev), MAX_SNAPSHOT_SENTENCES))]
        tgt_tok = translator.tgt_tokenizer
        return CaptionValidation(references, images, source, tgt_tok, config, first)

    def scores(self, outputs: list[str], references: list[str]) -> tuple[dict, str]:
        from heedful.evaluation import caption_bleu

        bleu = caption_bleu(outputs, [[reference] for reference in references])
        said = " / ".join(f"{bleu[f'bleu{n}']:.1f}" for n in range(1, 5))
        return bleu, f"; BLEU-1..4 {said}"

    def example(self, item, output: str, reference: str) -> str:
        return f"  {output:<50} {mark(output, reference)}"

    def draw(self, translator, data: DemoData, out: Path, name: str, label: str, echo):
        """The overlay of the first held-out scene with two shapes (one panel per word)."""
        from heedful.visualize.overlay import draw_overlay

        test = data.own[2]
        j = _two_shapes(test)
        [caption] = translator.translate([test.pixels(j)], need_weights=True)
        if caption.attention is None:
            return None
        scale = 6  # a 48-pixel scene drawn 288 pixels wide: the regions stay exactly in place
        pixels = np.kron(test.pixels(j), np.ones((scale, scale, 1), dtype=np.uint8))
        title = f"{label}{name}: {caption.text!r} (reference {test.captions[j]!r})"
        path = out / f"overlay-{name}.png"
        path = draw_overlay(pixels, caption.attention_grid(), caption.tokens, path, title)
        echo(f"attention over the image, word by word: {path}")
        return path

    def snapshot_inputs(self, data: DemoData) -> list[np.ndarray]:
        """The scene the overlay draws, then the first development scenes."""
        test, dev = data.own[2], data.own[1]
        first = range(min(len(dev), MAX_SNAPSHOT_SENTENCES))
        return [test.pixels(_two_shapes(test)), *(dev.pixels(j) for j in first)]

    def step_budget(self, model: str) -> int:
        return budget_rule(CAPTION_STEPS, CAPTION_TRAIN.eval_every)[model]

    def hint(self, model_dir: Path, data: DemoData, out: Path, drawn) -> str:
        """What to try the model on: a held-out scene, written as out/scene.png."""
        import matplotlib.pyplot as plt

        example = out / "scene.png"
        plt.imsave(example, data.own[2].pixels(0))
        return f" (try: heedful caption {model_dir} {example})"
