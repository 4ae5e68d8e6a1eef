"""The config keys that captions once ignored without a word (issue 27): text and captions are
two tasks of one pipeline (experiment.py), so each such key either works for an image model,
checked here, or is refused by name when the config is read, before anything is trained or
written; and the image keys are refused for a text model in the same way."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from image_models import scene_files

from heedful.checkpoint.model_dir import CheckpointError, load_model_dir
from heedful.cli import main
from heedful.config import ConfigError, load_config
from heedful.training.experiment import train_from_config

IMAGE_MODEL = ["model.arch=rnn", "model.encoder=cnn", "model.image_size=48", "model.cnn_channels=4",
               "model.cnn_blocks=3", "model.d_model=8", "model.hidden_size=16"]  # fmt: skip
TRAIN = ["train.batch_tokens=288", "train.eval_every=2", "train.log_every=1", "train.max_steps=2",
         "train.warmup_steps=2", "generation.num_beams=1", "generation.max_len_ratio=0.0",
         "generation.max_len_offset=20"]  # fmt: skip
IMAGES = (
    "model.encoder cnn trains on images and captions (data.images, data.captions, "
    "data.valid_captions)"
)
TEXT_MODEL = (
    "only an image model (model.encoder cnn, vit or torchvision:<name>) reads it; "
    "this model's model.encoder is text: remove the key"
)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """12 training and 4 validation scenes, their captions files, and a character tokenizer of
    the training captions (a model directory's tokenizer.tgt)."""
    from heedful.data.caption_files import read_captions
    from heedful.data.tokenizers import CharTokenizer

    folder = tmp_path_factory.mktemp("scenes")
    scene_files(folder, 12, seed=1)
    scene_files(folder, 4, seed=2)
    items = read_captions(folder / "captions-1.txt", folder / "images")
    CharTokenizer.train(c for _, caps in items for c in caps).save(folder / "tokenizer.tgt")
    return folder


def captions(files: Path) -> list[str]:
    names = {"images": "images", "captions": "captions-1.txt", "valid_captions": "captions-2.txt"}
    return [f"data.{key}={files / name}" for key, name in names.items()]


def train(files: Path, run: Path, *overrides: str) -> list[str]:
    """Train the tiny captions run in `run`; the lines it said."""
    config = load_config(None, [*captions(files), *IMAGE_MODEL, *TRAIN, *overrides])
    lines: list[str] = []
    train_from_config(config, run, progress=False, echo=lambda line: lines.append(str(line)))
    return lines


# ------------------------------------------------------------------------------------------
# the keys that work for captions: each row trains and checks what the key did
# ------------------------------------------------------------------------------------------


def rank_logs(files, tmp_path, monkeypatch):
    """Rank 1 of a run (alone, as its group is not started) says nothing; rank-1.log holds
    what it would have said, as for text."""
    monkeypatch.setenv("RANK", "1")
    said = train(files, tmp_path / "run", "data.tokenizer=char", "train.rank_logs=true")
    assert said == []
    log = (tmp_path / "run" / "rank-1.log").read_text()
    assert "training pairs: 24 captions of 12 images" in log and "stopped by max_steps" in log


def tokenizer_sample(files, tmp_path, monkeypatch):
    """SentencePiece trains on a sample of 6 captions: 40 pieces could not cover the 47
    characters of all 24 (upper and lower case)."""
    from heedful.data.caption_files import read_captions
    from heedful.data.tokenizers import SentencePieceTokenizer

    sentencepiece = ("data.tokenizer=sentencepiece", "data.vocab_size=40")
    train(files, tmp_path / "run", *sentencepiece, "data.tokenizer_sample=6")
    items = read_captions(files / "captions-1.txt", files / "images")
    texts = [c for _, caps in items for c in caps]
    expected = SentencePieceTokenizer.train(texts, 40, "unigram", input_sentence_size=6)
    got = load_model_dir(tmp_path / "run" / "latest").tgt_tokenizer
    assert got.model_proto == expected.model_proto


def target_tokenizer(files, tmp_path, monkeypatch):
    """data.tgt_tokenizer alone (an image has no source tokenizer): the run's target tokenizer
    is that file, byte for byte; a resume checks it against the checkpoint's."""
    from heedful.data.tokenizers import CharTokenizer

    given = f"data.tgt_tokenizer={files / 'tokenizer.tgt'}"
    train(files, tmp_path / "run", given)
    saved = tmp_path / "run" / "latest" / "tokenizer.tgt"
    assert saved.read_bytes() == (files / "tokenizer.tgt").read_bytes()
    said = train(files, tmp_path / "run", given, "train.max_steps=3")
    assert any("resuming from" in line for line in said)
    CharTokenizer.train(["other captions"]).save(tmp_path / "other.tgt")
    with pytest.raises(CheckpointError, match="its target tokenizer differs from data.tgt_"):
        train(files, tmp_path / "run", f"data.tgt_tokenizer={tmp_path / 'other.tgt'}")


def valid_max_sentences(files, tmp_path, monkeypatch):
    """Only the first 2 of the 4 validation images are read (here: into the feature cache)
    and scored."""
    cache = ("model.freeze_encoder=true", f"data.feature_cache={tmp_path / 'cache'}")
    said = train(
        files, tmp_path / "run", "data.tokenizer=char", "data.valid_max_sentences=2", *cache
    )
    assert any("validation images 0 reused, 2 computed" in line for line in said), said
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["step"] for r in records if "bleu" in r] == [2]


WORKS: dict[str, Callable] = {
    "train.rank_logs": rank_logs,
    "data.tokenizer_sample": tokenizer_sample,
    "data.tgt_tokenizer": target_tokenizer,
    "data.valid_max_sentences": valid_max_sentences,
}


# ------------------------------------------------------------------------------------------
# the keys refused: (id, overrides, the exact message); the first group for an image model
# ------------------------------------------------------------------------------------------

REFUSED = [
    ("image-prepared", ["data.prepared=prepared"],
     f"data.prepared: text pairs as token ids (heedful prepare); {IMAGES}: remove the key"),
    ("image-shard-tokens", ["data.shard_tokens=1000"],
     f"data.shard_tokens: the shard size of data.prepared; {IMAGES}: remove the key"),
    ("image-corpora", ["data.corpora=[{source: en, target: de, train_tsv: a.tsv, "
                       "valid_tsv: b.tsv}]"],
     f"data.corpora: text corpora, one per language pair; {IMAGES}: remove the key"),
    ("image-src-tokenizer", ["data.src_tokenizer=tokenizer.src"],
     f"data.src_tokenizer: the tokenizer of source text; {IMAGES}: give data.tgt_tokenizer "
     "alone"),
    ("image-both-tokenizers", ["data.src_tokenizer=t.src", "data.tgt_tokenizer=t.tgt"],
     f"data.src_tokenizer: the tokenizer of source text; {IMAGES}: give data.tgt_tokenizer "
     "alone"),
    ("image-train-src", ["data.train_src=train.en"],
     f"data.train_src: a text corpus file; {IMAGES}: remove the key"),
    ("image-valid-tsv", ["data.valid_tsv=valid.tsv"],
     f"data.valid_tsv: a text corpus file; {IMAGES}: remove the key"),
    ("image-train-jsonl", ["data.train_jsonl=train.jsonl"],
     f"data.train_jsonl: a text corpus file; {IMAGES}: remove the key"),
    ("image-jsonl-field", ["data.jsonl_tgt_field=headline"],
     f"data.jsonl_tgt_field: a field of JSON Lines text corpora; {IMAGES}: remove the key"),
    ("image-joint-vocab", ["data.joint_vocab=false"],
     f"data.joint_vocab: one vocabulary for source and target text; {IMAGES}: remove the key"),
    ("image-max-line-bytes", ["data.max_line_bytes=1000"],
     f"data.max_line_bytes: the longest line of a text corpus; {IMAGES}: remove the key "
     "(captions files are read with the default, 16 MiB a line)"),
    ("image-early-stopping-chrf", ["train.early_stopping_metric=chrf"],
     "train.early_stopping_metric: chrf is not among a captions run's validation scores "
     "(loss, ppl, bleu, bleu1 to bleu3, exact_match); use bleu or loss"),
    ("text-images", ["model.encoder=text", "data.images=images"], f"data.images: {TEXT_MODEL}"),
    ("text-captions", ["model.encoder=text", "data.captions=c.txt"],
     f"data.captions: {TEXT_MODEL}"),
    ("text-valid-captions", ["model.encoder=text", "data.valid_captions=c.txt"],
     f"data.valid_captions: {TEXT_MODEL}"),
    ("text-captions-format", ["model.encoder=text", "data.captions_format=coco"],
     f"data.captions_format: {TEXT_MODEL}"),
    ("text-target-tokenizer-alone", ["model.encoder=text", "data.tgt_tokenizer=t.tgt"],
     "data.src_tokenizer and data.tgt_tokenizer: give both or neither"),
    # in sections (issue 27, item 6): each key named as it was given, flat or nested
    ("image-nested-source-tokenizer", ["data.source.tokenizer=tokenizer.src"],
     f"data.source.tokenizer: the tokenizer of source text; {IMAGES}: give data.tgt_tokenizer "
     "alone"),
    ("text-nested-images", ["model.encoder.kind=text", "data.source.images=images"],
     "data.source.images: only an image model (model.encoder.kind cnn, vit or "
     "torchvision:<name>) reads it; this model's model.encoder.kind is text: remove the key"),
]  # fmt: skip

CASES = [(key, "works") for key in WORKS] + [(case[0], "refused") for case in REFUSED]


@pytest.mark.parametrize("key", WORKS)
def test_a_key_captions_read_works(key, files, tmp_path, monkeypatch):
    WORKS[key](files, tmp_path, monkeypatch)


@pytest.mark.parametrize("case", REFUSED, ids=[c[0] for c in REFUSED])
def test_a_key_the_task_does_not_read_is_refused_by_name(case, files, tmp_path):
    """By load_config, and by `heedful train` as one line, before the run directory exists."""
    name, overrides, message = case
    text = ["model.arch=rnn", "model.d_model=8", "model.hidden_size=16", *TRAIN]
    base = text if name.startswith("text-") else [*captions(files), *IMAGE_MODEL, *TRAIN]
    keys = [*base, *overrides]
    with pytest.raises(ConfigError) as error:
        load_config(None, keys)
    assert str(error.value) == message
    config, run = tmp_path / "c.yaml", tmp_path / "run"
    config.write_text("{}\n")
    sets = [arg for key in keys for arg in ("--set", key)]
    result = CliRunner().invoke(main, ["train", str(config), "--run-dir", str(run), *sets])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert message in " ".join(result.output.split()), result.output
    assert not run.exists()
