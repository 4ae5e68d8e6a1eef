"""Text translation, the task `heedful train` runs for model.encoder.kind text (experiment.py):
parallel text from aligned files, a TSV, JSON Lines or several corpora (data.corpora), or
token ids prepared once (data.prepared); tokenizers given (data.source.tokenizer and
data.tgt_tokenizer) or trained on the training text; validation by BLEU and chrF.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from heedful.checkpoint.model_dir import CheckpointError
from heedful.config import Config, ConfigError
from heedful.data.batching import Batch, InMemoryPairs, Pairs, bucketed_batches, collate
from heedful.data.corpus import CorpusError, iter_split, split_source
from heedful.data.sentencepiece_model import fill_vocabulary
from heedful.models.build import build_model
from heedful.training.distributed import Distributed
from heedful.training.inputs import given_tokenizer, resumed, same_tokenizer
from heedful.training.state import seed_generators


def read_split(config: Config, split: str) -> list[tuple[str, str]]:
    """The (source, target) pairs of `train` or `valid`, from aligned files or a TSV; at least
    one, since an empty split fails later, deep inside training or the first validation.
    With data.corpora, every corpus's pairs, each source after its target token."""
    if config.data.corpora:
        from heedful.data.languages import read_corpora

        return read_corpora(config.data, split)
    pairs = list(iter_split(config.data, split))
    if not pairs:
        raise CorpusError(
            f"{split_source(config.data, split)}: empty, no sentence pairs; the {split} split "
            "needs at least one line"
        )
    return pairs


class TextValidation:
    """The validation pairs of a text task (validation.py): their ids in batches of up to
    train.batch_tokens tokens, as in training (without gradients they take less memory), and
    BLEU and chrF of their translations (with data.corpora, BLEU into each target language).
    """

    def __init__(self, valid_pairs, src_tok, tgt_tok, config: Config):
        limit = config.data.valid_max_sentences
        limit = limit * max(1, len(config.data.corpora)) if limit else None  # per corpus
        pairs = valid_pairs[:limit] if limit else valid_pairs
        self.sources, self.references = [s for s, _ in pairs], [t for _, t in pairs]
        src_ids = [src_tok.encode(s) for s in self.sources]
        _check_valid_lengths(src_ids, config)
        self.src_ids = [ids[: config.data.max_length] for ids in src_ids]
        self.tgt_ids = [tgt_tok.encode(t)[: config.data.max_length] for t in self.references]
        budget = config.train.batch_tokens
        lengths = [len(s) for s in self.src_ids], [len(t) + 1 for t in self.tgt_ids]
        self.plan = bucketed_batches(*lengths, budget)
        self.sentences = max(1, budget // max(1, *map(len, self.src_ids)))  # per search batch
        self.sides, self.config = (src_tok, tgt_tok), config
        self.inputs = self.sources  # what snapshots trace (training/snapshots.py)

    def loss_batches(self) -> Iterator[Batch]:
        for rows in self.plan:
            yield collate([self.src_ids[i] for i in rows], [self.tgt_ids[i] for i in rows])

    def outputs(self, searcher) -> list[str]:
        return [t.text for t in searcher.translate(self.sources, batch_size=self.sentences)]

    def scores(self, outputs: list[str]) -> dict:
        from heedful.evaluation import corpus_scores

        scores = corpus_scores(outputs, self.references)
        by_target = _bleu_by_target(self.sources, outputs, self.references, self.config)
        return {"bleu": scores.bleu, "chrf": scores.chrf, **by_target}


def _bleu_by_target(sources, outputs, references, config: Config) -> dict:
    """A multilingual model's BLEU into each target language (bleu_de, bleu_fr), beside the
    overall one: one direction may learn while another does not."""
    from heedful.data.tokenizers import TARGET_TOKEN
    from heedful.evaluation import corpus_scores

    if len({c.target for c in config.data.corpora}) < 2:
        return {}
    groups: dict[str, list[int]] = {}
    for i, source in enumerate(sources):
        token = TARGET_TOKEN.match(source)  # none on a blank source: in the overall BLEU only
        if token:
            groups.setdefault(token[0][2:-1], []).append(i)
    return {
        f"bleu_{code}": corpus_scores(
            [outputs[i] for i in rows], [references[i] for i in rows]
        ).bleu
        for code, rows in groups.items()
    }


def _check_valid_lengths(src_ids, config: Config) -> None:
    """Validation translates whole sources: one too long for the model (a multi-megabyte line,
    say) would exhaust memory or time at the first validation; say so before training."""
    limit = config.model.max_positions
    for number, ids in enumerate(src_ids, start=1):
        if len(ids) > limit:
            raise CorpusError(
                f"{split_source(config.data, 'valid')}: pair {number} has a source of {len(ids):,} "
                f"tokens, more than model.max_positions ({limit}); validation translates whole "
                "sentences: shorten or remove that line, or raise model.max_positions"
            )


def _given_tokenizers(config: Config):
    """The tokenizers named by data.source.tokenizer / data.tgt_tokenizer, or None."""
    data, source = config.data, config.data.source.tokenizer
    if source is None:
        return None
    loaded = [
        given_tokenizer("data.source.tokenizer", source),
        given_tokenizer("data.tgt_tokenizer", data.tgt_tokenizer),
    ]
    if data.corpora:  # a multilingual model reads each target token as one symbol
        from heedful.data.languages import check_symbols

        try:
            check_symbols(loaded[0], data.pairs(), f"data.source.tokenizer ({source})")
        except ValueError as error:
            raise ConfigError(str(error)) from None
    return tuple(loaded)


def _new_tokenizers(config: Config, train_pairs, echo=print):
    data = config.data
    try:
        return fill_vocabulary(
            lambda size: _train_tokenizers(data, train_pairs, size), data.vocab_size, echo
        )
    except ValueError as e:
        raise ConfigError(
            f"cannot train the data.tokenizer ({data.tokenizer}) on "
            f"{split_source(config.data, 'train')}: {e} (data.vocab_size = {data.vocab_size})"
        ) from None


def _train_tokenizers(data, train_pairs, vocab_size: int):
    from heedful.data.languages import target_tokens
    from heedful.data.tokenizers import train_tokenizers

    return train_tokenizers(
        [s for s, _ in train_pairs],
        [t for _, t in train_pairs],
        kind=data.tokenizer,
        vocab_size=vocab_size,
        model_type=data.sp_model_type,
        joint=data.joint_vocab,
        sample=data.tokenizer_sample,
        symbols=target_tokens(data),
    )


def _model_and_tokenizers(config: Config, latest: Path | None, given, train_pairs, echo=print):
    """From the checkpoint resumed, or new: given or newly trained tokenizers, seeded model."""
    if latest is not None:
        loaded = resumed(latest, config)
        tokenizers = (loaded.src_tokenizer, loaded.tgt_tokenizer)
        if given is not None and not all(map(same_tokenizer, tokenizers, given)):
            raise CheckpointError(
                f"{latest}: its tokenizers differ from the ones the data was encoded with "
                "(data.prepared or data.source.tokenizer); use --force to start over"
            )
        return loaded.model, *tokenizers
    src_tok, tgt_tok = given or _new_tokenizers(config, train_pairs, echo)
    seed_generators(config.train.seed)  # the initial weights, drawn from the seed
    return build_model(config.model, len(src_tok), len(tgt_tok)), src_tok, tgt_tok


def _training_ids(config: Config, train_pairs, src_tok, tgt_tok, echo):
    """Tokenized training pairs, filtered by length; none left is an error, not an IndexError."""
    from heedful.data.corpus import filter_pairs

    src_ids, tgt_ids, report = filter_pairs(train_pairs, src_tok, tgt_tok, config.data.max_length)
    if not src_ids:
        raise CorpusError(
            f"{split_source(config.data, 'train')}: no training pairs left: {report}; check the "
            f"files, or raise data.max_length (now {config.data.max_length})"
        )
    echo(f"training pairs: {report}")
    return src_ids, tgt_ids


@dataclass
class TrainingData:
    """What a run trains and validates on, read and checked before anything else happens."""

    valid: list[tuple[str, str]]
    given: tuple | None  # tokenizers the data fixes (data.source.tokenizer, or a prepared dir's)
    text: list[tuple[str, str]] | None  # the training pairs as text, when read into memory
    prepared: Pairs | None  # the training pairs as ids, memory-mapped from data.prepared

    def pairs(self, config: Config, src_tok, tgt_tok, echo) -> Pairs:
        if self.prepared is not None:
            return self.prepared
        return InMemoryPairs(*_training_ids(config, self.text, src_tok, tgt_tok, echo))


def read_training_data(config: Config, dist: Distributed, progress: bool, echo) -> TrainingData:
    """The corpus in memory, or (data.prepared) a prepared directory, prepared first by rank 0
    when it is missing or its inputs changed; the other processes wait, then open it too."""
    if config.data.prepared is None:
        train_pairs, valid_pairs = read_split(config, "train"), read_split(config, "valid")
        return TrainingData(valid_pairs, _given_tokenizers(config), train_pairs, None)
    from heedful.data.prepare import prepare, settings
    from heedful.data.prepared import PreparedError, check_prepared, open_prepared, read_manifest

    directory = Path(config.data.prepared)
    if dist.is_main:
        try:
            prepare(config.data, directory, progress=progress, echo=echo)
        except PreparedError as error:  # an input is missing: a copied directory may do
            if not (directory / "manifest.json").exists():
                raise
            echo(f"warning: {error}; training on {directory} as it was prepared")
            check_prepared(directory)  # its files as the manifest's hashes say, ids in range
    dist.barrier()
    if read_manifest(directory).get("settings") != settings(config.data):
        raise PreparedError(
            f"{directory}: prepared with other data settings than the config's (tokenizer, "
            "vocabulary, max_length, shard size); run heedful prepare with this config"
        )
    prepared = open_prepared(directory)
    echo(f"prepared data: {directory}: {len(prepared.train):,} training pairs")
    return TrainingData(prepared.valid, prepared.tokenizers, None, prepared.train)


class TextTask:
    """What translation supplies to experiment.train_from_config."""

    def read(self, config: Config, dist: Distributed, progress: bool, echo) -> TrainingData:
        return read_training_data(config, dist, progress, echo)

    def model(self, config: Config, latest: Path | None, data: TrainingData, echo):
        """(model, (source tokenizer, target tokenizer)), resumed or new."""
        model, *tokenizers = _model_and_tokenizers(config, latest, data.given, data.text, echo)
        return model, tuple(tokenizers)

    def examples(self, config: Config, data: TrainingData, model, tokenizers, device, echo):
        """The training pairs as ids, and the validation."""
        pairs = data.pairs(config, *tokenizers, echo)
        return pairs, TextValidation(data.valid, *tokenizers, config)

    def reading(self, model, data: TrainingData):
        """The model as training runs it: whole, as built."""
        return nullcontext()
