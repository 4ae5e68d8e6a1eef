"""heedful export --format huggingface: a heedful Transformer as a Hugging Face model directory.

Post-norm models become Marian, pre-norm ones Pegasus: the two architectures of transformers
that compute our Transformer exactly, weight by weight (export_weights.py says how). Any
other model is refused by name before anything is written: an RNN, an image encoder, learned
positions (Marian's and Pegasus's tables are fixed sinusoids), an odd d_model, grouped-query
attention (model.num_kv_heads), SentencePiece BPE (export_tokenizer.py).

The directory holds, besides the weights and config.json:

    tokenizer.json, tokenizer_config.json   one vocabulary at our ids (export_tokenizer.py),
                                             no </s> added to a source (ours never read one),
                                             the languages as source_lang / target_lang
    generation_config.json                   our search: num_beams, length_penalty, and one
                                             max_new_tokens (generation_config below)
    heedful-export.json                      the marker: what it holds, our generation.json

Two SentencePiece models (no data.joint_vocab) keep Marian's two files instead
(source.spm, target.spm, vocab.json, target_vocab.json), which CTranslate2's converter cannot
read; pre-norm models need the one vocabulary (Pegasus has one).

CTranslate2: `ct2-transformers-converter --model OUTPUT` converts both. Its Pegasus loader
starts the decoder from the tokenizer's pad token, so Pegasus exports pad with our <s>
(pad_token_id 1), the start heedful decodes from (padded positions are masked: which token
pads them changes nothing); it reads normalize_before and normalize_embedding from
config.json, which transformers ignores. Its Marian loader drops the last token (Marian's
<pad>) and starts from a zero vector: Marian exports end with a <pad> of zero rows, the
decoder's start, and hold our <s> in the decoder's position 0 (export_weights._zero_start).

transformers 4.x builds Pegasus with one embedding table for encoder and decoder, where ours
has two: Pegasus exports need transformers 5 (docs/huggingface-export.md).
"""

from __future__ import annotations

from pathlib import Path

from heedful.checkpoint.model_dir import load_model_dir
from heedful.data.tokenizers import BOS_ID, EOS_ID, PAD_ID
from heedful.hf.export_tokenizer import (
    hf_tokenizer,
    layout,
    save_tokenizer,
    write_marian_tokenizer,
)
from heedful.hf.export_weights import hf_weights, stream_order
from heedful.hf.layout import import_transformers
from heedful.hf.loading import quiet
from heedful.io import CheckpointError, atomic_write_json, read_json, staged
from heedful.output_dirs import DirectoryKind, check_output, replaceable

MIN_POSITIONS = 1024  # the exports' tables are fixed, ours grows: cover any sentence one translates
MARKER, MARKER_FORMAT = "heedful-export.json", "heedful-huggingface-export"
# What exports made before the marker hold (transformers 4.x's save_pretrained and ours)
EARLIER_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "source.spm",
        "target.spm",
        "vocab.json",
        "target_vocab.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
    }
)


def _written(directory: Path) -> frozenset[str] | None:
    """The files an export of ours holds, by its marker (or, made before the marker, by the
    files only ours have: Marian with separate vocabularies); None: not an export of ours."""
    if (directory / MARKER).is_file():
        try:
            marker = read_json(directory / MARKER, 1 << 20)
        except CheckpointError:
            return None
        if not isinstance(marker, dict) or marker.get("format") != MARKER_FORMAT:
            return None
        files = marker.get("files")
        if not isinstance(files, list):
            return None
        return frozenset(name for name in files if isinstance(name, str)) | {MARKER}
    try:
        config = read_json(directory / "config.json", 1 << 20)
    except CheckpointError:
        return None
    ours = ("source.spm", "target.spm", "target_vocab.json")
    if isinstance(config, dict) and config.get("model_type") == "marian":
        return EARLIER_FILES if all((directory / n).is_file() for n in ours) else None
    return None


def _owned(path: Path) -> bool:
    files = _written(path.parent)
    return files is not None and path.name in files and path.is_file() and not path.is_symlink()


# What `heedful export --format huggingface` replaces: an export of its own, holding nothing else
MARIAN_EXPORT = DirectoryKind(
    "a heedful Hugging Face export", lambda d: _written(d) is not None, _owned
)


def _check_exportable(loaded, model_dir) -> None:
    """Refuse, by name, what neither Marian nor Pegasus computes (module docstring)."""
    config, why = loaded.model_config, None
    if config.arch != "transformer":
        why = f"it is an {config.arch!r} model; Marian and Pegasus are Transformers"
    elif config.encoder.kind != "text":
        why = f"it reads images (model.encoder.kind {config.encoder.kind}); the exports read text"
    elif config.positional != "sinusoidal":
        why = "its positions are learned; Marian's and Pegasus's are fixed sinusoids"
    elif config.d_model % 2:
        why = f"d_model {config.d_model} is odd; the sinusoids come in pairs"
    elif config.num_kv_heads not in (None, config.num_heads):
        why = (
            f"its {config.num_heads} heads share {config.num_kv_heads} key/value heads "
            "(model.num_kv_heads); Marian and Pegasus have no grouped-query attention"
        )
    elif {loaded.src_tokenizer.kind, loaded.tgt_tokenizer.kind} - {"sentencepiece", "char"}:
        why = "its tokenizers are neither SentencePiece nor character ones"
    elif loaded.src_tokenizer.kind != loaded.tgt_tokenizer.kind:
        why = "one side is character level, the other SentencePiece"
    if why:
        raise CheckpointError(f"{model_dir}: cannot export to Hugging Face: {why}")


def start_ids(vocab, pre_norm: bool) -> tuple[int, int]:
    """(pad, decoder start) of the export: Pegasus's our <s> for both (module docstring),
    Marian's the <pad> last (export_tokenizer.with_marian_pad), or, with Marian's two files,
    ours."""
    if pre_norm:
        return BOS_ID, BOS_ID
    if vocab.zero_start:
        return len(vocab.tokens) - 1, len(vocab.tokens) - 1
    return PAD_ID, BOS_ID


def _common(config, pad: int, start: int) -> dict:
    """The settings Marian's and Pegasus's configs share: sizes, ReLU, √d_model, the ids."""
    return dict(
        d_model=config.d_model,
        encoder_layers=config.encoder.layers,
        decoder_layers=config.decoder.layers,
        encoder_attention_heads=config.num_heads,
        decoder_attention_heads=config.num_heads,
        encoder_ffn_dim=config.d_ff,
        decoder_ffn_dim=config.d_ff,
        activation_function="relu",
        scale_embedding=True,
        max_position_embeddings=max(config.max_positions, MIN_POSITIONS),
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=0.0,
        pad_token_id=pad,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=start,
        forced_eos_token_id=None,
        tie_word_embeddings=False,  # the output layer written out, tied or not
    )


def hf_config(hf, config, vocab):
    """MarianConfig (post-norm) or PegasusConfig (pre-norm) of our model config."""
    ids = start_ids(vocab, config.norm == "pre")
    if config.norm == "post":
        return hf.MarianConfig(
            vocab_size=len(vocab.our_src),
            decoder_vocab_size=len(vocab.our_tgt),
            share_encoder_decoder_embeddings=False,
            **_common(config, *ids),
        )
    # normalize_*: read by CTranslate2's converter only (its BART loader), not by transformers
    return hf.PegasusConfig(
        vocab_size=len(vocab.tokens),
        normalize_before=True,
        normalize_embedding=False,
        **_common(config, *ids),
    )


def generation_config(hf, generation, positions: int, pad: int, start: int):
    """Our search as generate() runs it with no arguments.

    Length: ours allows ratio · S + offset tokens for a source of S; generate() has one limit
    for every source. max_new_tokens is our limit for the longest source the export reads
    (its position table), capped by the table (the start token takes position 0): generate()
    then never stops before we do, and gives our outputs wherever ours end with </s>; where
    ours was cut at its limit, it goes on. With max_len_ratio 0 the limit is exact. To get
    ours exactly, pass max_new_tokens=int(ratio * len(input_ids) + offset).
    Beams: num_beams as ours. length_penalty is our GNMT alpha: generate() divides a score by
    length ** alpha, ours by ((5 + length) / 6) ** alpha; the two rank alike when alpha is 0
    (or num_beams 1), and may not otherwise on outputs of different lengths.
    """
    limit = min(generation.max_output_length(positions), positions - 1)
    settings = dict(
        max_new_tokens=limit,
        num_beams=1 if generation.sample else generation.num_beams,
        length_penalty=generation.length_penalty,
        early_stopping=False,
        do_sample=generation.sample,
        decoder_start_token_id=start,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=pad,
        forced_eos_token_id=None,
        bad_words_ids=None,  # heedful's search bans nothing
    )
    if generation.sample:
        settings |= dict(
            temperature=generation.temperature, top_p=generation.top_p, top_k=generation.top_k or 0
        )
    return hf.GenerationConfig(**settings)


def _build(hf, loaded, vocab):
    """(the transformers model holding our weights, every one set; the position tables it
    must be saved with, if any: export_weights._zero_start)."""
    config = hf_config(hf, loaded.model_config, vocab)
    model_class = (
        hf.MarianMTModel if config.model_type == "marian" else (hf.PegasusForConditionalGeneration)
    )
    model = model_class(config)
    perm = stream_order(loaded.model_config.d_model)  # the export's dim -> ours
    positions = config.max_position_embeddings
    weights = hf_weights(loaded.model, config.model_type, vocab, perm, positions)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [n for n in missing if not n.endswith("embed_positions.weight")]  # computed
    if missing or unexpected:
        raise RuntimeError(f"export left {sorted(missing)} unset, wrote {sorted(unexpected)}")
    tables = {name: w for name, w in weights.items() if name.endswith("embed_positions.weight")}
    return model.eval(), tables


def _save(model, tables: dict, build: Path) -> None:
    """save_pretrained, then the position tables it leaves out (transformers recomputes
    Marian's on creation, and loads the ones a file holds over them)."""
    from safetensors.torch import load_file, save_file

    with quiet(import_transformers()):  # the command's output is its one line
        model.save_pretrained(build)
    if tables:
        path = build / "model.safetensors"
        save_file(load_file(path) | tables, path, metadata={"format": "pt"})


def export_huggingface(model_dir: str | Path, output: str | Path) -> Path:
    """Write `output`: the Transformer in `model_dir` as a Marian (post-norm) or Pegasus
    (pre-norm) model directory that transformers loads (AutoModelForSeq2SeqLM /
    AutoTokenizer .from_pretrained(output)) and CTranslate2's converter converts."""
    hf = import_transformers()
    model_dir = Path(model_dir)
    check_output(output, MARIAN_EXPORT, [model_dir])  # before anything is read
    loaded = load_model_dir(model_dir)
    _check_exportable(loaded, model_dir)
    pre_norm = loaded.model_config.norm == "pre"
    vocab = layout(loaded.src_tokenizer, loaded.tgt_tokenizer, marian=not pre_norm)
    if pre_norm and not vocab.joint:
        raise CheckpointError(
            f"{model_dir}: cannot export to Hugging Face: a pre-norm model exports as Pegasus, "
            "which has one vocabulary, and this one has two SentencePiece models (train with "
            "data.joint_vocab: true)"
        )
    tokenizer = hf_tokenizer(hf, loaded, vocab, model_dir) if vocab.joint else None
    model, tables = _build(hf, loaded, vocab)
    positions = model.config.max_position_embeddings
    ids = start_ids(vocab, pre_norm)
    model.generation_config = generation_config(hf, loaded.generation, positions, *ids)
    languages = (loaded.src_lang, loaded.tgt_lang)
    with staged(Path(output), check=replaceable(MARIAN_EXPORT, [model_dir])) as build:
        _save(model, tables, build)
        if tokenizer is not None:
            save_tokenizer(tokenizer, build, languages)
        else:
            write_marian_tokenizer(hf, loaded, build, languages)
        files = sorted(path.name for path in build.iterdir())  # what a new export may replace
        marker = {
            "format": MARKER_FORMAT,
            "files": files,
            "generation": read_json(model_dir / "generation.json", 1 << 20),
            "pairs": [list(p) for p in loaded.pairs],
        }
        atomic_write_json(build / MARKER, marker)
    return Path(output)
