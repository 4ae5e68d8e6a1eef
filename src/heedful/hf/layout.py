"""Which model directories are Hugging Face ones, and whether heedful can open them.

A directory written by `save_pretrained` (or fetched by `huggingface-cli download`) has a
config.json whose "model_type" names the architecture, weights in model.safetensors (or shards
listed in model.safetensors.index.json) and the tokenizer's files. heedful's own directories have
a config.json too, with a "model" section instead: the one key tells the two apart, and only
this module (no transformers import) is needed to do so.
"""

from __future__ import annotations

from pathlib import Path

from heedful.hf.files import check_files, weight_files
from heedful.io import CheckpointError, read_json

# model_type (config.json) -> what it is; NLLB checkpoints are model_type m2m_100
SUPPORTED = {
    "marian": "Marian (Helsinki-NLP opus-mt)",
    "bart": "BART",
    "mbart": "mBART (mBART-50)",
    "m2m_100": "M2M100 and NLLB",
    "t5": "T5",
    "pegasus": "Pegasus (heedful's pre-norm exports)",
}
# languages are chosen by a token: the source's in the tokenizer, the target's forced first
MULTILINGUAL = ("mbart", "m2m_100")
MAX_CONFIG_BYTES = 1 << 20
PICKLED = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")


def import_transformers():
    """The transformers module, or an error that says which extra installs it."""
    try:
        import transformers
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "Hugging Face models need the transformers library: pip install 'heedful[hf]'"
        ) from None
    return transformers


def read_hf_config(directory: Path) -> dict | None:
    """config.json as a dict when it is a Hugging Face one (it has "model_type"), else None."""
    data = _json_or_none(Path(directory) / "config.json")
    return data if isinstance(data, dict) and "model_type" in data else None


def _json_or_none(path: Path):
    """A small JSON file's contents, or None when it is missing, too big, not JSON (nested
    too deeply, say): heedful's own loader then reports what is wrong with config.json."""
    try:
        return read_json(path, MAX_CONFIG_BYTES) if path.is_file() else None
    except (CheckpointError, OSError):
        return None


def is_huggingface_dir(directory: str | Path) -> bool:
    return read_hf_config(Path(directory)) is not None


def check_layout(directory: str | Path) -> str:
    """The model_type of a Hugging Face directory heedful can open, or a CheckpointError
    that says why not: an architecture outside SUPPORTED, weights only in pickle files, or a
    file (or a shard the index names) outside the directory (files.py)."""
    directory = Path(directory)
    config = read_hf_config(directory)
    if config is None:
        raise CheckpointError(f"{directory}: no Hugging Face config.json (with a model_type)")
    model_type = config["model_type"]
    if model_type not in SUPPORTED:
        names = ", ".join(f"{k} ({v})" for k, v in SUPPORTED.items())
        raise CheckpointError(
            f"{directory}: model_type {model_type!r} is not supported; heedful opens these "
            f"Hugging Face encoder-decoders: {names}"
        )
    if config.get("is_encoder_decoder") is False:
        raise CheckpointError(f"{directory}: not an encoder-decoder (is_encoder_decoder false)")
    safetensors = directory / "model.safetensors"
    index = directory / "model.safetensors.index.json"
    if not (safetensors.is_file() or index.is_file()):
        pickled = [name for name in PICKLED if (directory / name).exists()]
        found = f"only {', '.join(pickled)}" if pickled else "no weights file"
        raise CheckpointError(
            f"{directory}: {found}; heedful reads safetensors weights only and never "
            "unpickles a file (a pickle can run code). Convert it first, e.g. in Python: "
            "AutoModelForSeq2SeqLM.from_pretrained(DIR).save_pretrained(DIR, "
            "safe_serialization=True), on a machine where you trust the file"
        )
    check_files(directory)  # every file inside the directory, shards included
    weight_files(directory)
    return model_type


def saved_languages(directory: str | Path) -> tuple[str | None, str | None]:
    """The languages saved with the tokenizer (tokenizer_config.json: mBART's and M2M100's
    src_lang / tgt_lang, Marian's source_lang / target_lang), None where there are none; read
    without transformers, so the server names its languages before the model has loaded."""
    data = _json_or_none(Path(directory) / "tokenizer_config.json")
    if not isinstance(data, dict):
        return None, None
    src = data.get("src_lang") or data.get("source_lang")
    tgt = data.get("tgt_lang") or data.get("target_lang")
    return (src if isinstance(src, str) else None), (tgt if isinstance(tgt, str) else None)


def exported_pairs(directory: str | Path) -> tuple[tuple[str, str], ...] | None:
    """A multilingual heedful model's language pairs, kept in its export's marker
    (heedful-export.json, hf/export.py); None for any other directory or a one-pair model."""
    data = _json_or_none(Path(directory) / "heedful-export.json")
    pairs = data.get("pairs") if isinstance(data, dict) else None
    if not isinstance(pairs, list) or len(pairs) < 2:
        return None
    if not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(c, str) for c in p) for p in pairs
    ):
        return None
    return tuple((src, tgt) for src, tgt in pairs)


def languages(directory: str | Path, src_lang=None, tgt_lang=None) -> tuple[str, str]:
    """What a Translator of this directory names its languages (the server's source and
    target): the ones given, else the saved ones, else "src" and "tgt"."""
    saved = saved_languages(directory)
    return (src_lang or saved[0] or "src", tgt_lang or saved[1] or "tgt")
