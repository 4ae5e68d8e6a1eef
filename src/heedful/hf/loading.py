"""Open a Hugging Face model directory as the parts of a heedful Translator.

Offline only: transformers is told to read local files (local_files_only), weights only from
safetensors (layout.check_layout refuses pickles before transformers sees the directory), no
code from the directory (trust_remote_code stays False), and attention computed eagerly, the
implementation that can return its weights (output_attentions).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch

from heedful.config import GenerationConfig
from heedful.hf.layout import (
    MULTILINGUAL,
    check_layout,
    import_transformers,
    languages,
    saved_languages,
)
from heedful.hf.model import HFSeq2Seq
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
            "heedful.hf.load(DIR, src_lang=..., tgt_lang=...), or save them with the tokenizer "
            "(tokenizer.src_lang / tgt_lang in tokenizer_config.json)"
        )
    _language_token(tokenizer, src_lang, where)  # a code the tokenizer has
    tokenizer.src_lang = src_lang
    return src_lang, tgt_lang, _language_token(tokenizer, tgt_lang, where)


def _generation(hf_generation) -> tuple[GenerationConfig, list[int]]:
    """Our search settings (the beam size from the model's generation config) and the tokens
    its bad_words_ids ban one by one (longer banned sequences are not applied)."""
    beams = getattr(hf_generation, "num_beams", None) or 1
    bad = getattr(hf_generation, "bad_words_ids", None) or []
    banned = [words[0] for words in bad if len(words) == 1]
    return GenerationConfig(num_beams=beams), banned


@contextmanager
def _quiet(hf):
    """No "Loading weights" progress bar: the command line's output is the translations."""
    was_off = not hf.utils.logging.is_progress_bar_enabled()
    hf.utils.logging.disable_progress_bar()
    try:
        yield
    finally:
        if not was_off:
            hf.utils.logging.enable_progress_bar()


def _load_model(hf, directory: Path):
    """The transformers model, or a CheckpointError naming the directory and the cause."""
    with _quiet(hf):
        try:
            return hf.AutoModelForSeq2SeqLM.from_pretrained(
                directory,
                local_files_only=True,
                use_safetensors=True,
                attn_implementation="eager",
                dtype=torch.float32,
            )
        # transformers and safetensors report a damaged file as OSError, ValueError,
        # RuntimeError or SafetensorError, depending on where the damage is
        except Exception as error:  # noqa: BLE001
            raise CheckpointError(
                f"{directory}: transformers cannot load this model ({type(error).__name__}: "
                f"{str(error)[:500]})"
            ) from None


def _load_tokenizer(hf, directory: Path):
    try:
        return hf.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, RuntimeError, KeyError, TypeError) as error:
        raise CheckpointError(
            f"{directory}: transformers cannot load the tokenizer ({type(error).__name__}: "
            f"{str(error)[:500]})"
        ) from None


def _vocabularies(tokenizer, config, directory: Path):
    """(target IdMap, source IdMap, source pieces or None), checked against the model's
    embedding tables. Marian's separate_vocabs gives the source its own vocabulary."""
    start = config.decoder_start_token_id
    start = config.pad_token_id if start is None else start
    if not getattr(tokenizer, "separate_vocabs", False):
        check_vocabulary(tokenizer_ids(tokenizer), config.vocab_size, directory)
        ids = IdMap.build(
            config.vocab_size,
            config.pad_token_id,
            start,
            config.eos_token_id,
            tokenizer.unk_token_id,
        )
        return ids, ids, None
    target_size = config.decoder_vocab_size or config.vocab_size
    check_vocabulary(tokenizer.target_encoder.values(), target_size, directory, "target ")
    check_vocabulary(tokenizer.encoder.values(), config.vocab_size, directory, "source ")
    ids = IdMap.build(
        target_size,
        config.pad_token_id,
        start,
        config.eos_token_id,
        tokenizer.target_encoder.get(tokenizer.unk_token),
    )
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
    weights load: the layout, the tokenizer and its vocabulary against config.json's."""
    directory = Path(directory)
    model_type = check_layout(directory)
    hf = import_transformers()
    tokenizer = _load_tokenizer(hf, directory)
    try:
        config = hf.AutoConfig.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{directory}/config.json: {str(error)[:500]}") from None
    ids, src_ids, src_pieces = _vocabularies(tokenizer, config, directory)
    forced = None
    if model_type in MULTILINGUAL:
        src_lang, tgt_lang, forced = _languages(
            tokenizer, model_type, src_lang, tgt_lang, directory
        )
    model = _load_model(hf, directory)
    forced = model.generation_config.forced_bos_token_id if forced is None else forced
    generation, banned = _generation(model.generation_config)
    adapter = HFSeq2Seq(model.eval(), model_type, ids, forced, banned, src_ids).to(device)
    src = HFTokenizer(tokenizer, src_ids, "src", src_pieces)
    tgt = HFTokenizer(tokenizer, ids, "tgt")
    return adapter, src, tgt, generation, languages(directory, src_lang, tgt_lang)
