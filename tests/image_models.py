"""Tiny image-captioning model directories for plumbing tests (viewer, PNG command, server):
built untrained with a fixed seed, so they take milliseconds and caption the same every run.
What they say is nonsense; where they look is a real model's attention all the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

SIZE = 16  # pixels: a 4 × 4 grid of 4-pixel patches, or of a CNN's cells after two blocks
CAPTIONS = ["a small red circle left of a blue square", "two green triangles"]


def image_model_dir(out: Path, encoder: str = "vit", seed: int = 1) -> Path:
    """A saved image model: ViT under a Transformer decoder, or a CNN under the RNN decoder
    with Bahdanau attention (Show, Attend and Tell)."""
    from heedful.checkpoint.model_dir import save_model_dir
    from heedful.config import (
        CNNEncoderConfig,
        DecoderConfig,
        GenerationConfig,
        ModelConfig,
        ViTEncoderConfig,
    )
    from heedful.data.images import ImageTransform
    from heedful.data.sources import ImageSource
    from heedful.data.tokenizers import SPECIALS, CharTokenizer
    from heedful.models.build import build_model

    if encoder == "vit":
        config = ModelConfig(
            arch="transformer",
            d_model=16,
            num_heads=2,
            d_ff=32,
            dropout=0.0,
            norm="pre",
            encoder=ViTEncoderConfig(image_size=SIZE, patch_size=4, layers=2),
            decoder=DecoderConfig(layers=1),
        )
    else:
        config = ModelConfig(
            arch="rnn",
            d_model=16,
            hidden_size=16,
            dropout=0.0,
            encoder=CNNEncoderConfig(image_size=SIZE, channels=4, blocks=2),
            decoder=DecoderConfig(attention="bahdanau"),
        )
    tokenizer = CharTokenizer.train(CAPTIONS)
    torch.manual_seed(seed)
    model = build_model(config, len(SPECIALS), len(tokenizer))
    generation = GenerationConfig(num_beams=1, max_len_ratio=0.0, max_len_offset=6)
    source = ImageSource(ImageTransform(size=SIZE))
    return save_model_dir(out, model, config, source, tokenizer, generation, ("image", "en"))


def picture(seed: int = 0, height: int = 24, width: int = 32) -> np.ndarray:
    """(H, W, 3) uint8: random blocks of colour, not square (the centre crop matters)."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(height // 8, width // 8, 3), dtype=np.uint8)
    return np.kron(blocks, np.ones((8, 8, 1), dtype=np.uint8))


def png_file(path: Path, pixels: np.ndarray) -> Path:
    from PIL import Image

    Image.fromarray(pixels).save(path)
    return path


def scene_files(folder: Path, count: int, seed: int, per_image: int = 2):
    """`count` generated scenes as PNG files in folder/images and a Flickr-style captions file,
    folder/captions-SEED.txt, of `per_image` captions each (the scene's own; then upper-cased,
    a second reference). Returns (scenes, the captions file)."""
    from PIL import Image

    from heedful.tasks.scenes import SceneSet

    scenes = SceneSet(count, seed=seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    lines = []
    for i, caption in enumerate(scenes.captions):
        Image.fromarray(scenes.pixels(i)).save(folder / "images" / f"s{seed}-{i}.png")
        lines += [f"s{seed}-{i}.png#{n}\t{caption.upper() if n else caption}"
                  for n in range(per_image)]  # fmt: skip
    path = folder / f"captions-{seed}.txt"
    path.write_text("\n".join(lines) + "\n")
    return scenes, path
