"""Image captioning, the task `heedful train` runs for a model.encoder that reads images
(experiment.py): data from an image folder and captions files (data.source.images,
data.captions, data.valid_captions), a target tokenizer given (data.tgt_tokenizer alone) or
trained on the training captions (data.tokenizer, data.vocab_size, data.tokenizer_sample).

The same pipeline as text: processes, rank logs, run directory, training loop, checkpoints,
resume and the validator's shape (validation.py); the text keys an image model cannot read
(data.prepared, data.corpora, ...) are refused by name when the config is read
(configvision.check_task_keys). Validation reports the teacher-forced loss of each image's first
caption, BLEU (sacreBLEU BLEU-4 against every reference of an image, as `bleu`, so early
stopping works unchanged), BLEU-1..3 and exact match against any reference, on the first
data.valid_max_sentences images when that is set.

With model.encoder.freeze and data.source.feature_cache, the frozen trunk (models/frozen.py)
reads every training and validation image once, before training, into the cache folder
(data/features.py, keyed by the trunk's weights and the ImageTransform; a second run or a
resume reads it back), and the model trains and validates on those cells, the trunk passed
over. They are held in memory: N images × S cells × C channels × 4 bytes (a ResNet-50 at 224
pixels: 400 kB an image). The cells are those of the image as ImageTransform gives it,
resized and centre-cropped, the same every epoch: captions training has no random
augmentation, which a cache could not hold. Checkpoints hold the whole model all the same,
trunk included: a model directory captions pictures.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from heedful.checkpoint.model_dir import CheckpointError
from heedful.config import Config, ConfigError
from heedful.data.batching import Batch
from heedful.data.corpus import CorpusError
from heedful.data.image_pairs import FileImages, caption_batch, caption_pairs
from heedful.data.images import ImageTransform
from heedful.data.sentencepiece_model import fill_vocabulary
from heedful.data.sources import ImageSource
from heedful.data.tokenizers import Tokenizer
from heedful.models.build import build_model
from heedful.models.frozen import Trunk, cells_to_map, reading_cells
from heedful.training.distributed import Distributed
from heedful.training.inputs import given_tokenizer, resumed, same_tokenizer
from heedful.training.state import seed_generators


def _read(config: Config, key: str) -> list:
    from heedful.data.caption_files import read_captions

    data = config.data
    path, images = getattr(data, key), data.source.images
    if path is None or images is None:
        raise ConfigError(
            f"model.encoder.kind {config.model.encoder.kind} trains on images: give "
            "data.source.images (the folder) and data.captions and data.valid_captions (the "
            "captions files)"
        )
    items = read_captions(path, images, data.captions_format, key=f"data.{key}")
    if not items:
        raise CorpusError(f"data.{key}: {path}: no captioned images")
    return items


def _tokenizer(config: Config, items, echo):
    """The target tokenizer, trained on the training captions as data.tokenizer says (with a
    data.vocab_size they cannot fill, the most they can: sentencepiece_model.fill_vocabulary)."""
    from heedful.data.tokenizers import CharTokenizer, SentencePieceTokenizer

    captions = [c for _, caps in items for c in caps]
    if config.data.tokenizer == "char":
        return CharTokenizer.train(captions)
    try:
        sample, kind = config.data.tokenizer_sample, config.data.sp_model_type
        return fill_vocabulary(
            lambda size: SentencePieceTokenizer.train(
                captions, size, kind, input_sentence_size=sample
            ),
            config.data.vocab_size,
            echo,
        )
    except ValueError as error:
        raise ConfigError(f"data.vocab_size: {error}") from None


def _model(config: Config, latest: Path | None, items, transform, echo=print, given=None):
    """(model, ImageSource, target tokenizer): from the checkpoint resumed, or new (with the
    backbone's weights from model.encoder.weights, when given) and the `given` target
    tokenizer (data.tgt_tokenizer) or one trained on the captions."""
    if latest is not None:
        loaded = resumed(latest, config)
        if given is not None and not same_tokenizer(loaded.tgt_tokenizer, given):
            raise CheckpointError(
                f"{latest}: its target tokenizer differs from data.tgt_tokenizer "
                f"({config.data.tgt_tokenizer}); use --force to start over"
            )
        return loaded.model, loaded.source, loaded.tgt_tokenizer
    tgt_tok = given or _tokenizer(config, items, echo)
    seed_generators(config.train.seed)
    model = build_model(config.model, 0, len(tgt_tok))  # pixels: no source vocabulary
    weights = getattr(config.model.encoder, "weights", None)  # torchvision:<name> only
    if weights is not None:
        from heedful.models.pretrained import load_backbone_weights

        load_backbone_weights(model.encoder, weights)
    return model, ImageSource(transform), tgt_tok


class CaptionValidation:
    """The validation images of a captions task (validation.py), in batches of
    train.batch_tokens // 64 images: `references`, each image's captions; `load(j)`, the
    model's input for image j (its pixels, FileImages; or cached trunk cells). Each validation
    reads an image twice, for the loss and for the search: a cached trunk's cells cost nothing
    to read again."""

    def __init__(
        self,
        references: list[list[str]],
        load,
        source: ImageSource,
        tgt_tok,
        config: Config,
        inputs=(),
    ):
        self.load, self.references = load, references
        self.inputs = inputs  # the first pictures as files or pixels: what snapshots trace
        length = config.data.max_length
        self.first = [tgt_tok.encode(refs[0])[:length] for refs in self.references]
        size, count = max(1, config.train.batch_tokens // 64), len(references)
        self.rows = [range(i, min(i + size, count)) for i in range(0, count, size)]
        self.sides = (source, tgt_tok)

    def _images(self, rows: range) -> torch.Tensor:
        return torch.stack([self.load(j) for j in rows])  # (B, 3, H, W) or (B, C, gh, gw)

    def loss_batches(self) -> Iterator[Batch]:
        for rows in self.rows:  # each image's first caption
            yield caption_batch(self._images(rows), [self.first[j] for j in rows])

    def outputs(self, searcher) -> list[str]:
        decode = self.sides[1].decode  # searched as Translator.translate searches
        found = (searcher.search(self._images(rows).to(searcher.device), 1) for rows in self.rows)
        return [decode(hyps[0].tokens) for batch in found for hyps in batch]

    def scores(self, outputs: list[str]) -> dict:
        from heedful.evaluation import caption_bleu, exact_match

        bleu = caption_bleu(outputs, self.references)
        hits = [any(o == r for r in refs) for o, refs in zip(outputs, self.references)]
        return {
            "bleu": bleu["bleu4"],
            "bleu1": bleu["bleu1"],
            "bleu2": bleu["bleu2"],
            "bleu3": bleu["bleu3"],
            "exact_match": exact_match(["x" if h else "" for h in hits], ["x"] * len(hits)),
        }


class CachedCells:
    """Image j's trunk output (C, gh, gw), from cached_features' (N, S, C): what a model
    reading cells (models/frozen.py) takes in place of image j's pixels."""

    def __init__(self, cells: torch.Tensor, grid: tuple[int, int]):
        self.cells, self.grid = cells, grid

    def __call__(self, j: int) -> torch.Tensor:
        return cells_to_map(self.cells[j], self.grid)


def _cache_folder(name: str | None) -> Path | None:
    """data.source.feature_cache as a folder to write to, made if missing (None: no cache)."""
    if name is None:
        return None
    folder = Path(name).expanduser()
    try:
        a_file = folder.exists() and not folder.is_dir()
        if not a_file:
            folder.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as error:  # a file on the way, no permission, a NUL in it
        why = getattr(error, "strerror", None) or error  # not the whole path once more
        raise ConfigError(
            f"data.source.feature_cache: cannot make the folder {folder}: {why}"
        ) from None
    if a_file:
        raise ConfigError(f"data.source.feature_cache: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"data.source.feature_cache: {folder} is not writable")
    return folder


def _sources(config: Config, model, splits, transform, folder, device, echo) -> list:
    """For each split's items, `load(j)`: image j's pixels, or with a cache `folder` its
    trunk's cells, read from the cache or computed into it (data/features.py)."""
    if folder is None:
        return [FileImages([path for path, _ in items], transform) for items in splits]
    from heedful.data.features import cached_features

    grid = model.grid(config.model.encoder.image_size)
    trunk = Trunk(model.encoder).to(device)  # the model's own modules, on the device
    loads = []
    for name, items in zip(("training", "validation"), splits):
        try:
            found = cached_features(trunk, [path for path, _ in items], transform, folder)
        except OSError as error:  # a full disk, a folder made read-only meanwhile
            raise ConfigError(
                f"data.source.feature_cache: cannot write to {folder}: {error}"
            ) from None
        echo(
            f"feature cache {folder}: {name} images {found.reused} reused, "
            f"{found.computed} computed, {found.rebuilt} rebuilt"
        )
        loads.append(CachedCells(found.features, grid))
    return loads


@dataclass(frozen=True)
class CaptionData:
    """What a captions run trains and validates on, read and checked before anything else."""

    train: list  # (image path, its captions) of data.captions
    valid: list  # of data.valid_captions, the first data.valid_max_sentences when set
    transform: ImageTransform  # of model.encoder.image_size
    cache: Path | None  # data.source.feature_cache, made and writable
    given: Tokenizer | None  # the target tokenizer of data.tgt_tokenizer


class CaptionTask:
    """What image captioning supplies to experiment.train_from_config."""

    def read(self, config: Config, dist: Distributed, progress: bool, echo) -> CaptionData:
        train_items, valid_items = _read(config, "captions"), _read(config, "valid_captions")
        limit, path = config.data.valid_max_sentences, config.data.tgt_tokenizer
        return CaptionData(
            train_items,
            valid_items[:limit] if limit else valid_items,
            ImageTransform(size=config.model.encoder.image_size),
            _cache_folder(config.data.source.feature_cache),
            None if path is None else given_tokenizer("data.tgt_tokenizer", path),
        )

    def model(self, config: Config, latest: Path | None, data: CaptionData, echo):
        """(model, (ImageSource, target tokenizer)), resumed or new."""
        model, *tokenizers = _model(config, latest, data.train, data.transform, echo, data.given)
        return model, tuple(tokenizers)

    def examples(self, config: Config, data: CaptionData, model, tokenizers, device, echo):
        """The training pairs (one per caption), and the validation; with a cache, both read
        the trunk's cells, computed first where the cache lacks them."""
        source, tgt_tok = tokenizers
        regions = int(np.prod(model.grid(config.model.encoder.image_size)))
        splits, cache = (data.train, data.valid), data.cache
        load, valid_load = _sources(config, model, splits, source.transform, cache, device, echo)
        pairs = caption_pairs(data.train, tgt_tok, config.data.max_length, load, regions)
        echo(f"training pairs: {len(pairs)} captions of {len(data.train)} images")
        references = [captions for _, captions in data.valid]
        paths = [path for path, _ in data.valid]
        valid = CaptionValidation(references, valid_load, source, tgt_tok, config, paths)
        return pairs, valid

    def reading(self, model, data: CaptionData):
        """With a cache, the model reads cells: its trunk passed over."""
        return reading_cells(model) if data.cache is not None else nullcontext()
