"""Hostile Hugging Face directories (issue 14's "Bad input") and exports that cannot be done.

Each row of CASES makes a directory from one of the tiny models (or a heedful model) and names
the words the error must hold. heedful.load must raise CheckpointError with them, and the
command (`heedful translate`, or `heedful export --format huggingface`) must exit 1 with them
and no traceback: nothing is unpickled, downloaded or half-loaded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import heedful
from heedful.cli import main
from heedful.io import CheckpointError

from .test_export import heedful_model_dir


def copy_of(arch: str):
    def make(tmp_path: Path, hf_dirs) -> Path:
        return Path(shutil.copytree(hf_dirs[arch], tmp_path / arch))

    return make


def edit_json(arch: str, name: str, change):
    def make(tmp_path, hf_dirs):
        directory = copy_of(arch)(tmp_path, hf_dirs)
        data = json.loads((directory / name).read_text(encoding="utf-8"))
        change(data)
        (directory / name).write_text(json.dumps(data), encoding="utf-8")
        return directory

    return make


def write(arch: str, name: str, content: bytes, remove: tuple[str, ...] = ()):
    def make(tmp_path, hf_dirs):
        directory = copy_of(arch)(tmp_path, hf_dirs)
        for gone in remove:
            (directory / gone).unlink()
        if name:
            (directory / name).write_bytes(content)
        return directory

    return make


def plain(tmp_path, hf_dirs):
    directory = tmp_path / "plain"
    directory.mkdir()
    (directory / "config.json").write_text('{"hidden_size": 8}', encoding="utf-8")
    return directory


def more_pieces(data):  # a vocab.json whose ids reach past the model's 50 embedding rows
    data.update({f"extra{i}": 50 + i for i in range(10)})


# a pickle whose loading would run code: it must never be opened
PICKLE = b"\x80\x04cos\nsystem\n(S'touch /tmp/heedful-pwned'\ntR."

IMPORT = [
    ("neither-layout", plain, ["config.json", "not a heedful model config", "model_type"]),
    ("not-a-directory", lambda t, h: t / "missing", ["not found"]),
    ("unsupported-arch", edit_json("marian", "config.json", lambda d: d.update(model_type="gpt2")),
     ["'gpt2' is not supported", "marian", "bart", "mbart", "m2m_100", "t5"]),
    ("encoder-only-arch", edit_json("bart", "config.json", lambda d: d.update(model_type="bert")),
     ["'bert' is not supported", "m2m_100"]),
    ("pickled-bin-only", write("marian", "pytorch_model.bin", PICKLE, ("model.safetensors",)),
     ["only pytorch_model.bin", "never", "unpickles", "safetensors"]),
    ("no-weights", write("t5", "", b"", ("model.safetensors",)), ["no weights file"]),
    ("weights-truncated", write("bart", "model.safetensors", b"\x10\x00\x00\x00\x00\x00"),
     ["transformers cannot load this model"]),
    ("tokenizer-larger-than-model", edit_json("marian", "vocab.json", more_pieces),
     ["the tokenizer has ids up to 59", "50 tokens", "do not belong together"]),
    ("model-vocab-smaller", edit_json("t5", "config.json", lambda d: d.update(vocab_size=20)),
     ["the tokenizer has ids up to", "20 tokens", "do not belong together"]),
    ("tokenizer-files-missing", write("marian", "", b"", ("source.spm", "target.spm")),
     ["cannot load the tokenizer"]),
    ("m2m100-no-languages", edit_json("m2m_100", "tokenizer_config.json",
                                      lambda d: d.update(src_lang=None, tgt_lang=None)),
     ["name them", "src_lang", "tgt_lang"]),
    ("mbart-unknown-language", edit_json("mbart", "tokenizer_config.json",
                                         lambda d: d.update(tgt_lang="xx_YY")),
     ["no language code 'xx_YY'"]),
    ("pad-equals-eos", edit_json("bart", "config.json", lambda d: d.update(pad_token_id=2)),
     ["pad and eos are the same token"]),
    ("eos-outside-vocabulary", edit_json("t5", "config.json", lambda d: d.update(eos_token_id=999)),
     ["eos token id 999 is outside"]),
]  # fmt: skip


def heedful_model(**options):
    def make(tmp_path, hf_dirs):
        return heedful_model_dir(tmp_path / "model", **options)

    return make


def char_model(tmp_path, hf_dirs):
    from heedful.checkpoint import save_model_dir
    from heedful.config import ModelConfig
    from heedful.data.tokenizers import CharTokenizer
    from heedful.models.build import build_model

    tokenizer = CharTokenizer.train(["abc"])
    config = ModelConfig(d_model=8, num_heads=2, encoder_layers=1, decoder_layers=1, d_ff=16)
    model = build_model(config, len(tokenizer), len(tokenizer))
    return save_model_dir(tmp_path / "chars", model, config, tokenizer, tokenizer)


EXPORT = [
    ("export-pre-norm", heedful_model(norm="pre"), ["pre-norm", "post-norm"]),
    ("export-char-tokenizer", char_model, ["SentencePiece"]),
    ("export-a-hugging-face-dir", copy_of("marian"), ["a Hugging Face model ('marian')"]),
]
CASES = [pytest.param(*case[1:], "import", id=case[0]) for case in IMPORT] + [
    pytest.param(*case[1:], "export", id=case[0]) for case in EXPORT
]


@pytest.mark.parametrize("make, words, surface", CASES)
def test_a_hostile_directory_is_a_named_error(make, words, surface, hf_dirs, tmp_path):
    directory = make(tmp_path, hf_dirs)
    if surface == "import":
        with pytest.raises(CheckpointError) as caught:
            heedful.load(directory)
        args = ["translate", str(directory)]
    else:
        from heedful.hf.export import export_huggingface

        with pytest.raises(CheckpointError) as caught:
            export_huggingface(directory, tmp_path / "out")
        args = ["export", str(directory), "--format", "huggingface", "-o", str(tmp_path / "o")]
    for word in words:
        assert word in str(caught.value), f"{word!r} not in {caught.value}"
    result = CliRunner().invoke(main, args, input="a dog\n", prog_name="heedful")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert all(word in result.output for word in words), result.output
    assert not Path("/tmp/heedful-pwned").exists()
    assert not (tmp_path / "out").exists() and not (tmp_path / "o").exists()


def test_a_tokenizer_smaller_than_the_model_is_fine(hf_dirs, tmp_path):
    """T5 pads its vocabulary to a multiple of 128: more embedding rows than tokens is normal."""
    directory = edit_json("t5", "config.json", lambda d: d.update(vocab_size=64))(tmp_path, {
        "t5": hf_dirs["t5"]})  # fmt: skip
    weights = directory / "model.safetensors"
    from safetensors.torch import load_file, save_file

    tensors = load_file(weights)
    for name in ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                 "lm_head.weight"):  # fmt: skip
        if name in tensors:
            rows = tensors[name]
            tensors[name] = torch.cat([rows, torch.zeros(64 - rows.size(0), rows.size(1))])
    save_file(tensors, weights, metadata={"format": "pt"})
    [out] = heedful.load(directory).translate(["a small dog"])
    assert isinstance(out.text, str)
