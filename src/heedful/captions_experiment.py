"""`heedful train` for image captioning: a config whose model.encoder reads images, data from
an image folder and captions files (data.images, data.captions, data.valid_captions).

The same run directory, training loop, checkpoints and resume as text (experiment.py): only
the data and the validation differ. Validation reports the teacher-forced loss, BLEU (sacreBLEU
BLEU-4 against every reference of an image, as `bleu`, so early stopping works unchanged),
BLEU-1..3 and exact match against any reference.

With model.freeze_encoder and data.feature_cache, the frozen trunk (models/frozen.py) reads
every training and validation image once, before training, into the cache folder
(data/features.py, keyed by the trunk's weights and the ImageTransform; a second run or a
resume reads it back), and the model trains and validates on those cells, the trunk passed
over. They are held in memory: N images × S cells × C channels × 4 bytes (a ResNet-50 at 224
pixels: 400 kB an image). The cells are those of the image as ImageTransform gives it,
resized and centre-cropped, the same every epoch: captions training has no random
augmentation, which a cache could not hold. Checkpoints hold the whole model all the same,
trunk included: a model directory captions pictures.
"""

from __future__ import annotations

import math
import os
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from heedful.checkpoint import CheckpointError, load_model_dir
from heedful.config import Config, ConfigError
from heedful.cpu import set_threads
from heedful.data.corpus import CorpusError
from heedful.data.image_pairs import FileImages, ImageSource, caption_batch, caption_pairs
from heedful.data.sentencepiece_model import fill_vocabulary
from heedful.logs import RunLog
from heedful.models.build import build_model
from heedful.models.frozen import Trunk, cells_to_map, image_encoder, reading_cells
from heedful.run_dir import Run, run_training
from heedful.training import Distributed, TrainResult, sequence_loss
from heedful.training_state import seed_generators


def _read(config: Config, key: str) -> list:
    from heedful.data.caption_files import read_captions

    data = config.data
    path = getattr(data, key)
    if path is None or data.images is None:
        raise ConfigError(
            f"model.encoder {config.model.encoder} trains on images: give data.images (the "
            "folder) and data.captions and data.valid_captions (the captions files)"
        )
    items = read_captions(path, data.images, data.captions_format, key=f"data.{key}")
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
        return fill_vocabulary(
            lambda size: SentencePieceTokenizer.train(captions, size, config.data.sp_model_type),
            config.data.vocab_size,
            echo,
        )
    except ValueError as error:
        raise ConfigError(f"data.vocab_size: {error}") from None


def _model(config: Config, latest: Path | None, items, transform, echo=print):
    """(model, ImageSource, target tokenizer): from the checkpoint resumed, or new (with the
    backbone's weights from model.encoder_weights, when given)."""
    if latest is not None:
        loaded = load_model_dir(latest)
        if loaded.model_config != config.model:
            raise CheckpointError(
                f"{latest}: its model config differs from the config given; use --force to "
                "start over"
            )
        return loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer
    tgt_tok = _tokenizer(config, items, echo)
    seed_generators(config.train.seed)
    model = build_model(config.model, len(ImageSource(transform)), len(tgt_tok))
    if config.model.encoder_weights is not None:
        from heedful.models.pretrained import load_backbone_weights

        load_backbone_weights(image_encoder(model), config.model.encoder_weights)
    return model, ImageSource(transform), tgt_tok


def make_caption_validator(items, source: ImageSource, tgt_tok, config: Config, device, load=None):
    """Loss, BLEU-1..4 and exact match of greedy captions of the validation images; `load(j)`
    gives the model's input for image j (default: its pixels; cached trunk cells instead)."""
    from heedful.evaluation import caption_bleu, exact_match
    from heedful.translator import Translator

    load = load or FileImages([path for path, _ in items], source.transform)
    references = [caps for _, caps in items]
    greedy = replace(config.generation, num_beams=1, n_best=1)
    batch = max(1, config.train.batch_tokens // 64)

    def validate(model) -> dict:
        total, tokens, outputs = 0.0, 0, []
        searcher = Translator(model, source, tgt_tok, greedy, device)  # as Captioner searches
        for start in range(0, len(items), batch):
            rows = range(start, min(start + batch, len(items)))
            src = torch.stack([load(j) for j in rows])  # (B, 3, H, W) or (B, C, gh, gw)
            first = [tgt_tok.encode(references[j][0])[: config.data.max_length] for j in rows]
            b = caption_batch(src, first).to(device)  # each image's first caption
            logits = model(b.src, b.tgt_in).logits  # (B, T, V)
            total += sequence_loss(logits, b.tgt_out, 0.0, "sum").item()
            tokens += b.target_tokens()
            outputs += [tgt_tok.decode(hyps[0].tokens) for hyps in searcher.search(b.src, 1)]
        bleu = caption_bleu(outputs, references)
        loss = total / max(tokens, 1)
        hits = [any(o == r for r in refs) for o, refs in zip(outputs, references)]
        return {
            "loss": loss,
            "ppl": math.exp(min(loss, 50)),
            "bleu": bleu["bleu4"],
            "bleu1": bleu["bleu1"],
            "bleu2": bleu["bleu2"],
            "bleu3": bleu["bleu3"],
            "exact_match": exact_match(["x" if h else "" for h in hits], ["x"] * len(hits)),
        }

    return validate


class CachedCells:
    """Image j's trunk output (C, gh, gw), from cached_features' (N, S, C): what a model
    reading cells (models/frozen.py) takes in place of image j's pixels."""

    def __init__(self, cells: torch.Tensor, grid: tuple[int, int]):
        self.cells, self.grid = cells, grid

    def __call__(self, j: int) -> torch.Tensor:
        return cells_to_map(self.cells[j], self.grid)


def _cache_folder(name: str | None) -> Path | None:
    """data.feature_cache as a folder we can write to, made if missing (None: no cache)."""
    if name is None:
        return None
    folder = Path(name).expanduser()
    try:
        a_file = folder.exists() and not folder.is_dir()
        if not a_file:
            folder.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as error:  # a file on the way, no permission, a NUL in it
        why = getattr(error, "strerror", None) or error  # not the whole path once more
        raise ConfigError(f"data.feature_cache: cannot make the folder {folder}: {why}") from None
    if a_file:
        raise ConfigError(f"data.feature_cache: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"data.feature_cache: {folder} is not writable")
    return folder


def _sources(config: Config, model, splits, transform, folder, device, echo) -> list:
    """For each split's items, `load(j)`: image j's pixels, or with a cache `folder` its
    trunk's cells, read from the cache or computed into it (data/features.py)."""
    if folder is None:
        return [FileImages([path for path, _ in items], transform) for items in splits]
    from heedful.data.features import cached_features

    grid = model.grid(config.model.image_size)
    trunk = Trunk(image_encoder(model)).to(device)  # the model's own modules, on the device
    loads = []
    for name, items in zip(("training", "validation"), splits):
        try:
            found = cached_features(trunk, [path for path, _ in items], transform, folder)
        except OSError as error:  # a full disk, a folder made read-only meanwhile
            raise ConfigError(f"data.feature_cache: cannot write to {folder}: {error}") from None
        echo(
            f"feature cache {folder}: {name} images {found.reused} reused, "
            f"{found.computed} computed, {found.rebuilt} rebuilt"
        )
        loads.append(CachedCells(found.features, grid))
    return loads


def train_captions(
    config: Config, run_dir: str | Path, force: bool = False, progress: bool = True, echo=print
) -> TrainResult:
    """Train (or resume) an image captioning run; every input is read before the run dir
    changes, as for text."""
    from heedful.data.images import ImageTransform

    set_threads(config.train.threads)
    dist = Distributed.from_env()
    device = dist.device()
    dist.start(echo)
    echo = RunLog(echo, hold=dist.is_main)  # stamped; in RUN_DIR/train.log once it trains
    train_items, valid_items = _read(config, "captions"), _read(config, "valid_captions")
    transform = ImageTransform(size=config.model.image_size)
    cache = _cache_folder(config.data.feature_cache)
    run = Run(Path(run_dir), config, dist)
    with run.locked():
        latest = None if force else run.resume_point(echo)
        model, source, tgt_tok = _model(config, latest, train_items, transform, echo)
        regions = int(np.prod(model.grid(config.model.image_size)))
        splits = (train_items, valid_items)
        load, valid_load = _sources(config, model, splits, source.transform, cache, device, echo)
        pairs = caption_pairs(train_items, tgt_tok, config.data.max_length, load, regions)
        echo(f"training pairs: {len(pairs)} captions of {len(train_items)} images")
        validate = make_caption_validator(valid_items, source, tgt_tok, config, device, valid_load)
        if force:
            run.clear()
        with reading_cells(model) if cache else nullcontext():  # the trunk passed over
            return run_training(
                run, model, (source, tgt_tok), pairs, validate, latest, progress, echo, device
            )
