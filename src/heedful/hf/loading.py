"""Open a Hugging Face model directory as the parts of a heedful Translator.

Offline only: transformers is told to read local files (local_files_only), weights only from
safetensors (layout.check_layout refuses pickles before transformers sees the directory), no
code from the directory (trust_remote_code stays False), and attention computed eagerly, the
implementation that can return its weights (output_attentions).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path

import torch

from heedful.config import GenerationConfig
from heedful.hf.fields import Specials, check_configs
from heedful.hf.files import numbers, weight_files, weight_shapes
from heedful.hf.layout import (
    MULTILINGUAL,
    check_layout,
    import_transformers,
    languages,
    saved_languages,
)
from heedful.hf.model import HFSeq2Seq
from heedful.hf.tokenizer_files import check_tokenizer_files
from heedful.hf.vocab import HFTokenizer, IdMap, check_vocabulary, tokenizer_ids
from heedful.io import CheckpointError


def _language_token(tokenizer, lang: str, where: Path) -> int:
    """The id of a language's token: M2M100's get_lang_id("de") is __de__, mBART's and NLLB's
    codes (de_DE, deu_Latn) are tokens themselves."""
    getter = getattr(tokenizer, "get_lang_id", None)
    try:
        token_id = getter(lang) if getter else tokenizer.convert_tokens_to_ids(lang)
    except (KeyError, ValueError):
        token_id = None
    if token_id is None or token_id == tokenizer.unk_token_id:
        raise CheckpointError(f"{where}: the tokenizer has no language code {lang!r}")
    return int(token_id)


def _languages(tokenizer, model_type: str, src_lang, tgt_lang, where: Path):
    """(src_lang, tgt_lang, forced first token) of a multilingual model, from the arguments or
    those saved with the tokenizer; the source's code is set on the tokenizer."""
    saved = saved_languages(where)
    src_lang, tgt_lang = src_lang or saved[0], tgt_lang or saved[1]
    if not src_lang or not tgt_lang:
        raise CheckpointError(
            f"{where}: a {model_type} model translates between languages it is told: name them, "
            "heedful.load(DIR, src_lang=..., tgt_lang=...), or save them with the tokenizer "
            "(tokenizer.src_lang / tgt_lang in tokenizer_config.json)"
        )
    _language_token(tokenizer, src_lang, where)  # a code the tokenizer has
    tokenizer.src_lang = src_lang
    return src_lang, tgt_lang, _language_token(tokenizer, tgt_lang, where)


@contextmanager
def quiet(hf):
    """No "Loading weights" progress bar and no load report: the command line's output is the
    translations, and a report of missing weights is our CheckpointError."""
    logging = hf.utils.logging
    was_off, verbosity = not logging.is_progress_bar_enabled(), logging.get_verbosity()
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if not was_off:
            logging.enable_progress_bar()


def _load_model(hf, directory: Path):
    """The transformers model, or a CheckpointError naming the directory and the cause: a
    damaged file, or weights that are not the model's (transformers' own loading report: a
    tensor missing would be left randomly initialised, one unexpected left out)."""
    with quiet(hf):
        try:
            model, info = hf.AutoModelForSeq2SeqLM.from_pretrained(
                directory,
                local_files_only=True,
                use_safetensors=True,
                attn_implementation="eager",
                dtype=torch.float32,
                output_loading_info=True,
            )
        # transformers and safetensors report a damaged file as OSError, ValueError,
        # RuntimeError or SafetensorError, depending on where the damage is
        except Exception as error:  # noqa: BLE001
            raise CheckpointError(
                f"{directory}: transformers cannot load this model ({type(error).__name__}: "
                f"{str(error)[:500]})"
            ) from None
    missing, unexpected = sorted(info["missing_keys"]), sorted(info["unexpected_keys"])
    if missing or unexpected or info["mismatched_keys"]:
        raise CheckpointError(
            f"{directory}: the weights are not the model config.json describes (missing "
            f"{missing[:5]}, unexpected {unexpected[:5]}); they do not belong together"
        )
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(
                f"{directory}: tensor {name} holds NaN or infinite values; refusing to load "
                "weights that cannot translate"
            )
    return model


def _check_sizes(hf, config, directory: Path) -> None:
    """What config.json describes, built on the meta device (no memory), against the weights'
    headers: no tensor of another shape, no more weights than the files hold (more layers or
    larger sizes), before transformers allocates the model and fills the rest at random."""
    shapes = weight_shapes(weight_files(directory))
    try:
        with torch.device("meta"):
            skeleton = hf.AutoModelForSeq2SeqLM.from_config(config)
    except Exception as error:  # noqa: BLE001 - any config transformers cannot build
        raise CheckpointError(
            f"{directory / 'config.json'}: transformers cannot build the model it describes "
            f"({type(error).__name__}: {str(error)[:300]})"
        ) from None
    ignored = [re.compile(p) for p in skeleton._keys_to_ignore_on_load_missing or ()]
    tied: dict[int, tuple[torch.Tensor, list[str]]] = {}  # one entry per tensor, all its names
    for name, tensor in skeleton.named_parameters(remove_duplicate=False):
        tied.setdefault(id(tensor), (tensor, []))[1].append(name)
    needed, absent = 0, []
    for tensor, names in tied.values():
        for name in names:
            if name in shapes and shapes[name] != list(tensor.shape):
                raise CheckpointError(
                    f"{directory}: tensor {name} is {shapes[name]} in the weights, but "
                    f"config.json describes {list(tensor.shape)}; they do not belong together"
                )
        if not any(r.search(n) for r in ignored for n in names):
            needed += tensor.numel()
            absent += [] if any(n in shapes for n in names) else names[:1]
    if needed > numbers(shapes):
        raise CheckpointError(
            f"{directory}: config.json describes {needed:,} weights, the weights files hold "
            f"{numbers(shapes):,} (none for {absent[:5]}): it names more layers or larger "
            "sizes than the weights have"
        )


def _load_tokenizer(hf, directory: Path):
    try:
        return hf.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    # the tokenizers library raises its own Exception for a file it cannot read
    except Exception as error:  # noqa: BLE001
        raise CheckpointError(
            f"{directory}: transformers cannot load the tokenizer ({type(error).__name__}: "
            f"{str(error)[:500]})"
        ) from None


def _agree(tokenizer, pad: int, eos: tuple[int, ...], directory: Path) -> None:
    """The tokenizer's </s> and <pad> are the model's: a tokenizer of another model is not."""
    pairs = (("eos", tokenizer.eos_token_id, eos), ("pad", tokenizer.pad_token_id, (pad,)))
    for name, mine, model in pairs:
        if mine is not None and mine not in model:
            raise CheckpointError(
                f"{directory}: the tokenizer's {name} token is id {mine}, but config.json's "
                f"{name}_token_id is {model[0]}; the tokenizer and the model do not belong "
                "together"
            )


def _check_tokenizer(tokenizer, config, directory: Path) -> None:
    """Every id the tokenizer gives has a row in the model's embedding table."""
    if not getattr(tokenizer, "separate_vocabs", False):
        check_vocabulary(tokenizer_ids(tokenizer), config.vocab_size, directory)
        return
    target_size = config.decoder_vocab_size or config.vocab_size
    check_vocabulary(tokenizer.target_encoder.values(), target_size, directory, "target ")
    check_vocabulary(tokenizer.encoder.values(), config.vocab_size, directory, "source ")


def _vocabularies(tokenizer, config, specials: Specials, directory: Path):
    """(target IdMap, source IdMap, source pieces or None), checked against the model's
    embedding tables. Marian's separate_vocabs gives the source its own vocabulary."""
    pad = tokenizer.pad_token_id if specials.pad is None else specials.pad
    if pad is None:
        raise CheckpointError(
            f"{directory / 'config.json'}: pad_token_id is null and the tokenizer has no pad "
            "token; heedful pads batches with it: set pad_token_id"
        )
    start = pad if specials.start is None else specials.start
    if not getattr(tokenizer, "separate_vocabs", False):
        ids = IdMap.build(config.vocab_size, pad, start, specials.eos, tokenizer.unk_token_id)
        _agree(tokenizer, pad, specials.eos, directory)
        return ids, ids, None
    target_size = config.decoder_vocab_size or config.vocab_size
    unk = tokenizer.target_encoder.get(tokenizer.unk_token)
    ids = IdMap.build(target_size, pad, start, specials.eos, unk)
    source = tokenizer.encoder  # piece -> id
    src_ids = IdMap.build(
        config.vocab_size,
        source[tokenizer.pad_token],
        source[tokenizer.pad_token],
        source[tokenizer.eos_token],
        source.get(tokenizer.unk_token),
    )
    return ids, src_ids, {i: piece for piece, i in source.items()}


def load_parts(
    directory: str | Path,
    device: str | torch.device = "cpu",
    src_lang: str | None = None,
    tgt_lang: str | None = None,
):
    """(model, src_tokenizer, tgt_tokenizer, generation, languages) of a Hugging Face
    directory: what Translator's constructor takes. Everything is checked before the
    weights load: the layout and its files, every key of config.json and
    generation_config.json, the tokenizer's files and its vocabulary against config.json's,
    the weights' headers against the model config.json describes."""
    directory = Path(directory)
    model_type = check_layout(directory)
    _, specials = check_configs(directory)
    check_tokenizer_files(directory, model_type)
    hf = import_transformers()
    tokenizer = _load_tokenizer(hf, directory)
    try:
        config = hf.AutoConfig.from_pretrained(directory, local_files_only=True)
    except Exception as error:  # noqa: BLE001 - transformers' strict dataclasses' own errors
        raise CheckpointError(f"{directory}/config.json: {str(error)[:500]}") from None
    _check_tokenizer(tokenizer, config, directory)
    _check_sizes(hf, config, directory)  # before anything the size of the vocabulary is made
    ids, src_ids, src_pieces = _vocabularies(tokenizer, config, specials, directory)
    forced = None
    if model_type in MULTILINGUAL:
        src_lang, tgt_lang, forced = _languages(
            tokenizer, model_type, src_lang, tgt_lang, directory
        )
    model = _load_model(hf, directory)
    forced = specials.forced_bos if forced is None else forced
    generation = GenerationConfig(num_beams=specials.num_beams)
    adapter = HFSeq2Seq(model.eval(), model_type, ids, forced, specials.banned, src_ids)
    adapter = adapter.to(device)
    src = HFTokenizer(tokenizer, src_ids, "src", src_pieces)
    tgt = HFTokenizer(tokenizer, ids, "tgt")
    return adapter, src, tgt, generation, languages(directory, src_lang, tgt_lang)
