"""`heedful train` for image captioning: a config whose model.encoder reads images, data from
an image folder and captions files (data.images, data.captions, data.valid_captions).

The same run directory, training loop, checkpoints and resume as text (experiment.py): only
the data and the validation differ. Validation reports the teacher-forced loss, BLEU (sacreBLEU
BLEU-4 against every reference of an image, as `bleu`, so early stopping works unchanged),
BLEU-1..3 and exact match against any reference.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from heedful.checkpoint import CheckpointError, load_model_dir
from heedful.config import Config, ConfigError
from heedful.cpu import set_threads
from heedful.data.corpus import CorpusError
from heedful.data.image_pairs import FileImages, ImageSource, caption_batch, caption_pairs
from heedful.experiment import _device, _train_run
from heedful.models.build import build_model
from heedful.run_dir import Run
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


def _tokenizer(config: Config, items):
    """The target tokenizer, trained on the training captions as data.tokenizer says."""
    from heedful.data.tokenizers import CharTokenizer, SentencePieceTokenizer

    captions = [c for _, caps in items for c in caps]
    if config.data.tokenizer == "char":
        return CharTokenizer.train(captions)
    try:
        return SentencePieceTokenizer.train(
            captions, config.data.vocab_size, config.data.sp_model_type
        )
    except ValueError as error:
        raise ConfigError(f"data.vocab_size: {error}") from None


def _model(config: Config, latest: Path | None, items, transform):
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
    tgt_tok = _tokenizer(config, items)
    seed_generators(config.train.seed)
    model = build_model(config.model, len(ImageSource(transform)), len(tgt_tok))
    if config.model.encoder_weights is not None:
        from heedful.models.vision import load_backbone_weights

        load_backbone_weights(model.image_encoder, config.model.encoder_weights)
    return model, ImageSource(transform), tgt_tok


def make_caption_validator(items, source: ImageSource, tgt_tok, config: Config, device):
    """Loss, BLEU-1..4 and exact match of greedy captions of the validation images."""
    from heedful.captioner import Captioner
    from heedful.evaluation import caption_bleu, exact_match

    load = FileImages([path for path, _ in items], source.transform)
    references = [caps for _, caps in items]
    greedy = replace(config.generation, num_beams=1, n_best=1)
    batch = max(1, config.train.batch_tokens // 64)

    def validate(model) -> dict:
        total, tokens = 0.0, 0
        for start in range(0, len(items), batch):
            rows = range(start, min(start + batch, len(items)))
            images = torch.stack([load(j) for j in rows])
            first = [tgt_tok.encode(references[j][0])[: config.data.max_length] for j in rows]
            b = caption_batch(images, first).to(device)  # each image's first caption
            logits = model(b.src, b.tgt_in).logits  # (B, T, V)
            total += sequence_loss(logits, b.tgt_out, 0.0, "sum").item()
            tokens += b.target_tokens()
        captioner = Captioner(model, source.transform, tgt_tok, greedy, device)
        outputs = [c.text for c in captioner.caption([p for p, _ in items], batch_size=batch)]
        bleu = caption_bleu(outputs, references)
        loss = total / max(tokens, 1)
        hits = [any(o == r for r in refs) for o, refs in zip(outputs, references)]
        return {
            "loss": loss, "ppl": math.exp(min(loss, 50)), "bleu": bleu["bleu4"],
            "bleu1": bleu["bleu1"], "bleu2": bleu["bleu2"], "bleu3": bleu["bleu3"],
            "exact_match": exact_match(["x" if h else "" for h in hits], ["x"] * len(hits)),
        }  # fmt: skip

    return validate


def train_captions(
    config: Config, run_dir: str | Path, force: bool = False, progress: bool = True, echo=print
) -> TrainResult:
    """Train (or resume) an image captioning run; every input is read before the run dir
    changes, as for text."""
    from heedful.data.images import ImageTransform

    set_threads(config.train.threads)
    dist = Distributed.from_env()
    device = _device(dist)
    dist.start(echo)
    train_items, valid_items = _read(config, "captions"), _read(config, "valid_captions")
    transform = ImageTransform(size=config.model.image_size)
    run = Run(Path(run_dir), config, dist)
    with run.locked():
        latest = None if force else run.resume_point(echo)
        model, source, tgt_tok = _model(config, latest, train_items, transform)
        regions = int(np.prod(model.grid(config.model.image_size)))
        load = FileImages([path for path, _ in train_items], source.transform)
        pairs = caption_pairs(train_items, tgt_tok, config.data.max_length, load, regions)
        echo(f"training pairs: {len(pairs)} captions of {len(train_items)} images")
        validate = make_caption_validator(valid_items, source, tgt_tok, config, device)
        if force:
            run.clear()
        return _train_run(
            run, model, (source, tgt_tok), pairs, validate, latest, progress, echo, device
        )
