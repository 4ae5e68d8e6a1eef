"""Captioner: pictures in, captions out, with the attention over the image behind every word.

The image side of translator.py: the same search (decoding.py through Translator.search) and
the same replay for attention, with images in place of token ids. A model directory of an
image model keeps its ImageTransform where a text model keeps its source tokenizer
(data/image_pairs.py's ImageSource), so `heedful.load(DIR)` gives a Captioner for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from heedful.config import ModelConfig
from heedful.config.search import SearchSettings, call_settings
from heedful.data.tokenizers import EOS
from heedful.inference.engine import Capabilities, check_supported
from heedful.inference.translator import DEFAULT_GENERATION, Translator
from heedful.search.decoding import Hypothesis

# a file, its bytes, (H, W, 3) uint8 RGB pixels, or a (3, size, size) tensor load_image made
ImageInput = str | Path | bytes | np.ndarray | torch.Tensor
PICTURE_ONLY = "a text model: a caption starts from the picture alone"


@dataclass
class Caption:
    """One image's caption.

    tokens: the pieces written (ending with </s> when the caption finished), one per row of
    the attention. attention: cross-attention (len(tokens), L, H, S) over the S = gh·gw regions
    (row-major: region s = i·gw + j), or None; grid: (gh, gw). alternatives: the other n-best.
    """

    text: str
    tokens: list[str]
    score: float
    grid: tuple[int, int]
    attention: torch.Tensor | None = None
    alternatives: list[Caption] | None = None

    def weights(self, layer: int = -1) -> torch.Tensor:
        """(T, S): one layer's attention (the last by default), heads averaged."""
        if self.attention is None:
            raise ValueError("no attention: caption with need_weights=True")
        return self.attention[:, layer].mean(dim=1)

    def attention_grid(self, layer: int = -1) -> np.ndarray:
        """(T, gh, gw): the weights laid on the grid, what visualize/overlay.draw_overlay draws."""
        return self.weights(layer).reshape(-1, *self.grid).numpy()


def image_tensor(source: ImageInput, transform, name: str | None = None) -> torch.Tensor:
    """(3, size, size) float32 of a file, bytes, or (H, W, 3) uint8 pixels, normalised by
    `transform` (data/images.py's rules; pixels of another size are resized there too)."""
    from heedful.data.images import ImageError, load_image, normalize

    if isinstance(source, torch.Tensor):  # already decoded (the server's upload, decoded once)
        if tuple(source.shape) != (3, transform.size, transform.size):
            wanted, got = (3, transform.size, transform.size), tuple(source.shape)
            raise ImageError(f"{name or 'image tensor'}: expected {wanted}, got {got}")
        return source
    if not isinstance(source, np.ndarray):
        return load_image(source, transform, name)
    if source.ndim != 3 or source.shape[2] != 3 or source.dtype != np.uint8:
        raise ImageError(
            f"{name or 'image array'}: pixels must be (H, W, 3) uint8 RGB, got "
            f"{tuple(source.shape)} {source.dtype}"
        )
    if source.shape[:2] == (transform.size, transform.size):
        return normalize(source, transform)
    return load_image(_png_bytes(source), transform, name or "image array")


def _png_bytes(pixels: np.ndarray) -> bytes:
    """Pixels of another size as a PNG, so that they are resized as files are (Pillow)."""
    import io

    from heedful.data.images import ImageError

    try:
        from PIL import Image
    except ImportError:
        raise ImageError("resizing an image array needs Pillow: pip install pillow") from None
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


class Captioner:
    """An image model, its ImageTransform, target tokenizer and search settings."""

    engine = "torch"
    # the Translator's search on images: every setting; no prefixes (engine.py)
    capabilities = Capabilities(prefixes=False, instead=PICTURE_ONLY)

    def __init__(
        self,
        model: nn.Module,
        transform,
        tgt_tokenizer,
        generation: SearchSettings = DEFAULT_GENERATION,
        device: str | torch.device = "cpu",
    ):
        from heedful.data.image_pairs import ImageSource

        self.transform, self.tgt_tokenizer = transform, tgt_tokenizer
        # the search and the replay are the Translator's, on images instead of ids
        self.searcher = Translator(model, ImageSource(transform), tgt_tokenizer, generation, device)
        self.model, self.device = self.searcher.model, self.searcher.device

    @classmethod
    def load(cls, model_dir: str | Path, device: str | torch.device = "cpu") -> Captioner:
        from heedful.checkpoint.model_dir import CheckpointError, load_model_dir

        loaded = load_model_dir(model_dir)
        transform = getattr(loaded.src_tokenizer, "transform", None)
        if transform is None:
            raise CheckpointError(f"{model_dir}: a text model; translate text with it")
        if transform.size != loaded.model_config.image_size:
            raise CheckpointError(
                f"{Path(model_dir) / 'tokenizer.src'}: images of {transform.size} pixels, but "
                f"config.json's model.image_size is {loaded.model_config.image_size}"
            )
        return cls(
            loaded.model.to(device), transform, loaded.tgt_tokenizer, loaded.generation, device
        )

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @property
    def generation(self) -> SearchSettings:
        return self.searcher.generation

    def grid(self) -> tuple[int, int]:
        return self.model.grid(self.transform.size)

    def images(self, sources: Sequence[ImageInput]) -> torch.Tensor:
        """(B, 3, size, size) on the model's device; a bad image is an ImageError naming it."""
        tensors = [image_tensor(s, self.transform, _name(s, i)) for i, s in enumerate(sources)]
        return torch.stack(tensors).to(self.device)

    def caption(
        self,
        sources: Sequence[ImageInput],
        num_beams: int | None = None,
        n_best: int | None = None,
        batch_size: int = 64,
        need_weights: bool = False,
        *,
        settings: SearchSettings | None = None,
        **overrides,
    ) -> list[Caption]:
        """Caption images in order, `batch_size` at a time. settings, num_beams (1: greedy),
        n_best and `overrides`: as Translator.translate's (max_len_offset is the caption's
        limit in tokens). need_weights: each Caption's attention, from one teacher-forced
        replay of it."""
        asked = call_settings(
            self.generation, settings, num_beams=num_beams, n_best=n_best, **overrides
        )
        check_supported(self.engine, self.capabilities, asked, False, need_weights)
        if isinstance(sources, (str, Path, bytes, np.ndarray, torch.Tensor)):
            raise TypeError("caption() takes a list of images, not one image")
        out, grid = [], self.grid()
        for start in range(0, len(sources), batch_size):
            images = self.images(sources[start : start + batch_size])
            found = self.searcher.search(images, settings=asked)
            for row, hyps in enumerate(found):
                first, *rest = [self._caption(h, grid) for h in hyps]
                if need_weights:
                    for caption, hyp in zip([first, *rest], hyps):
                        caption.attention = self._attention(images[row : row + 1], hyp)
                first.alternatives = rest or None
                out.append(first)
        return out

    translate = caption  # the Translator's name, for code that serves both

    def _attention(self, image: torch.Tensor, hyp: Hypothesis) -> torch.Tensor | None:
        """(T, L, H, S) cross-attention of one caption, or None (a decoder without attention)."""
        maps = self.searcher.replay(image, hyp).attention
        return None if maps.cross is None else maps.cross[0].permute(2, 0, 1, 3).cpu()

    def _caption(self, hyp: Hypothesis, grid: tuple[int, int]) -> Caption:
        tokens = [self.tgt_tokenizer.id_to_token(i) for i in hyp.tokens]
        text = self.tgt_tokenizer.decode(hyp.tokens)
        return Caption(text, tokens + ([EOS] if hyp.finished else []), hyp.score, grid)


def _name(source: ImageInput, index: int) -> str | None:
    """What an error calls an input that is not a file: bytes or an array, by position."""
    if isinstance(source, bytes):
        return f"image {index + 1} (bytes)"
    if isinstance(source, (np.ndarray, torch.Tensor)):
        return f"image {index + 1} (array)"
    return None


def is_image_model(model_dir: str | Path) -> bool:
    """Whether a directory holds an image model: its config.json's model.encoder is not text.
    Anything unreadable answers False, so that the text path reports it as it always did."""
    from heedful.io import read_json

    try:
        meta = read_json(Path(model_dir) / "config.json", 1 << 20)
    except Exception:  # noqa: BLE001 - the text loader names the problem
        return False
    model = meta.get("model") if isinstance(meta, dict) else None
    return isinstance(model, dict) and model.get("encoder", "text") != "text"
