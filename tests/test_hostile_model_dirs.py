"""Hostile model directories and hostile `heedful translate` input (issue #9).

Each row of CASES copies the trained reverse-task model directory, damages one file in one way
and loads it every way a user can: heedful.load, runtime.load_translator (both engines where
they apply), `heedful translate` and `heedful average`. The outcome must be a named error whose
message holds the given words (the file, the field, the sizes), or, where words is None, a model
that translates as the undamaged one does. Loading runs under an address-space limit of 1 GiB
above what the process already maps, so a config.json that describes a huge model must be
refused before its tensors are allocated, not after.

INPUT_CASES feed `heedful translate` the same bytes on stdin and through -i FILE: both must
give the same lines (one output line per "\\n"-terminated input line) or the same error.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from earlier import flat_model
from memory import memory_cap
from safetensors.torch import load_file, save_file

import heedful
from heedful.checkpoint.model_dir import CheckpointError, average_checkpoints, save_model_dir
from heedful.cli import main
from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig
from heedful.data.tokenizers import CharTokenizer
from heedful.inference.export import export_ctranslate2, import_ctranslate2
from heedful.inference.runtime import load_translator
from heedful.models.build import build_model

import_ctranslate2()  # its libraries mapped before any memory cap below, not inside one

WORDS = ["abc", "hgfe", "ba", "cabbage"]  # the reverse model reverses words of a-h


# ---------------------------------------------------------------------------------------------
# Ways to damage a model directory: each returns corrupt(model_dir)
# ---------------------------------------------------------------------------------------------


def write(name: str, data: bytes | str):
    def corrupt(d: Path) -> None:
        (d / name).unlink(missing_ok=True)
        (d / name).write_bytes(data.encode() if isinstance(data, str) else data)

    return corrupt


def edit_json(name: str, change):
    def corrupt(d: Path) -> None:
        data = json.loads((d / name).read_text(encoding="utf-8"))
        change(data)
        (d / name).write_text(json.dumps(data), encoding="utf-8")  # NaN stays NaN

    return corrupt


def model_field(**fields):
    """config.json's model with its keys flat, as an earlier heedful wrote it, and `fields`."""
    return edit_json("config.json", lambda c: c.update(model=flat_model(c["model"]) | fields))


def model_part(path: str | None, value):
    """config.json's model, nested as it is written, with `path` (decoder.layers) set, or
    (None) updated with the mapping `value`."""
    if path is None:
        return edit_json("config.json", lambda c: c["model"].update(value))
    part, key = path.split(".")
    return edit_json("config.json", lambda c: c["model"][part].update({key: value}))


def config_field(**fields):
    return edit_json("config.json", lambda c: c.update(fields))


def generation_field(**fields):
    return edit_json("generation.json", lambda g: g.update(fields))


def drop(name: str, key: str):
    return edit_json(name, lambda data: data.pop(key))


def reencode(name: str, encoding: str):
    def corrupt(d: Path) -> None:
        (d / name).write_bytes((d / name).read_text(encoding="utf-8").encode(encoding))

    return corrupt


def cut(name: str):
    def corrupt(d: Path) -> None:
        data = (d / name).read_bytes()
        (d / name).write_bytes(data[: len(data) // 2])

    return corrupt


def remove(name: str):
    def corrupt(d: Path) -> None:
        path = d / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()

    return corrupt


def directory(name: str):
    def corrupt(d: Path) -> None:
        (d / name).unlink()
        (d / name).mkdir()

    return corrupt


def symlink(name: str, target: str):
    """`name` becomes a link to `target`, relative to the directory (itself: a loop)."""

    def corrupt(d: Path) -> None:
        if target != name:
            shutil.move(d / name, d / target)
        else:
            (d / name).unlink()
        os.symlink(target, d / name)

    return corrupt


def weights(change):
    def corrupt(d: Path) -> None:
        tensors = load_file(d / "model.safetensors")
        change(tensors)
        save_file(tensors, d / "model.safetensors")

    return corrupt


def poke(name: str, value: float):
    def change(tensors):
        tensors[name][0, 0] = value

    return weights(change)


def char_tokenizer(name: str, chars: str):
    return lambda d: CharTokenizer.train([chars]).save(d / name)


def safetensors_header(header: dict, data: bytes = b""):
    """A model.safetensors of this header (hostile shapes and offsets) and data bytes."""
    raw = json.dumps(header).encode()
    return write("model.safetensors", struct.pack("<Q", len(raw)) + raw + data)


def weights_of(config: ModelConfig):
    """model.safetensors of another architecture, with the same vocabulary."""

    def corrupt(d: Path) -> None:
        tokenizer = CharTokenizer.train(["abcdefgh"])
        other = d.parent / "other"
        model = build_model(config, len(tokenizer), len(tokenizer))
        save_model_dir(other, model, config, tokenizer, tokenizer)
        shutil.copyfile(other / "model.safetensors", d / "model.safetensors")

    return corrupt


def then(*steps):
    def corrupt(d: Path) -> None:
        for step in steps:
            step(d)

    return corrupt


def nothing(d: Path) -> None:
    pass


def huge_json(d: Path) -> None:
    data = json.loads((d / "config.json").read_text())
    data["padding"] = "x" * (8 << 20)
    (d / "config.json").write_text(json.dumps(data))


def ct2(name: str) -> str:
    return f"ctranslate2/{name}"


def hugecount_model_bin(d: Path) -> None:
    """A CTranslate2 model.bin whose first string length is absurd (found to raise
    UnicodeDecodeError inside ctranslate2 4.x)."""
    data = (d / ct2("model.bin")).read_bytes()
    (d / ct2("model.bin")).write_bytes(data[:4] + b"\xff\xff\xff\x7f" + data[8:])


def case(id: str, corrupt, words: list[str] | None, engine: str = "torch"):
    """One row: damage done by corrupt(model_dir); words the error must hold, or None when the
    model must load and translate as the undamaged one does; engine: "ctranslate2" starts from
    a `heedful export` of the model instead of the model directory."""
    return pytest.param(corrupt, words, engine, id=id)


BIG = dict(d_model=4096, num_heads=16, encoder_layers=48, decoder_layers=48, d_ff=16384)
SIZE = "2147483647"  # checkpoint.MAX_SIZE
CT2 = "ctranslate2"
CT2_BROKEN = ["ctranslate2", "CTranslate2 cannot load"]
DEEPER = ModelConfig(
    d_model=32,
    num_heads=4,
    d_ff=64,
    encoder=TextEncoderConfig(layers=2),
    decoder=DecoderConfig(layers=1),
)
HAN = "".join(map(chr, range(0x4E00, 0x9FFF)))  # 20991 characters: a tokenizer of 20995
HEADER_4EB = {"w": {"dtype": "F32", "shape": [10**9, 10**9], "data_offsets": [0, 4 * 10**18]}}


def transpose(name: str):
    return weights(lambda t: t.update({name: t[name].T.contiguous()}))


def half(name: str):
    return weights(lambda t: t.update({name: t[name].half()}))


def dangling(name: str):
    return then(remove(name), lambda d: os.symlink("gone", d / name))


# The reverse model: a character Transformer, 12 tokens (8 letters + 4 specials), d_model 32.
CASES = [
    # Row 4: sizes in config.json that would allocate gigabytes; weights that do not fit
    case("row4-d-model-10M", model_field(d_model=10_000_000),
         ["model.safetensors", "encoder.embed.tokens.weight", "[12, 32]", "[12, 10000000]"]),
    case("row4-48+48-layers-at-4096", model_field(**BIG),
         ["model.safetensors", "encoder.embed.tokens.weight", "[12, 32]", "[12, 4096]"]),
    case("row4-vocab-size-2**31", config_field(src_vocab_size=2**31 - 1),
         ["encoder.embed.tokens.weight", f"[{SIZE}, 32]"]),
    case("row4-max-positions-1e9", model_field(max_positions=10**9),
         ["config.json", "encoder.embed.positions.table", "max_positions"]),
    case("row4-d-model-beyond-int64", model_field(d_model=10**30),
         ["config.json", "model.d_model", SIZE]),
    case("row4-header-claims-4-exabytes", safetensors_header(HEADER_4EB),
         ["model.safetensors", "not a valid"]),
    case("row4-weights-extra-tensor", weights(lambda t: t.update(extra=torch.zeros(2))),
         ["model.safetensors", "unexpected", "extra"]),
    case("row4-weights-missing-tensor", weights(lambda t: t.pop("decoder.generator.bias")),
         ["model.safetensors", "missing", "decoder.generator.bias"]),
    case("row4-weights-transposed", transpose("decoder.generator.weight"),
         ["decoder.generator.weight", "[32, 12]", "[12, 32]"]),
    case("row4-weights-float16", half("decoder.generator.weight"),
         ["decoder.generator.weight", "F16", "F32"]),
    case("row4-weights-of-a-deeper-model", weights_of(DEEPER),
         ["model.safetensors", "unexpected", "encoder.layers.1"]),
    # Row 5: tokenizers whose size is not the model's vocabulary size
    case("row5-tokenizer-larger", char_tokenizer("tokenizer.src", "abcdefghijk"),
         ["tokenizer.src", "15", "12"]),
    case("row5-tokenizer-smaller", char_tokenizer("tokenizer.tgt", "abcdef"),
         ["tokenizer.tgt", "10", "12"]),
    case("row5-huge-tokenizer", char_tokenizer("tokenizer.tgt", HAN),
         ["tokenizer.tgt", "20995", "12"]),
    case("row5-config-vocab-size-not-the-weights", config_field(tgt_vocab_size=13),
         ["decoder.embed.tokens.weight", "[12, 32]", "[13, 32]"]),
    case("row5-ct2-tokenizer-larger", char_tokenizer("tokenizer.src", "abcdefghijk"),
         ["tokenizer.src", "15", "12"], CT2),
    case("row5-ct2-tokenizer-smaller", char_tokenizer("tokenizer.tgt", "abcdef"),
         ["tokenizer.tgt", "10", "12"], CT2),
    case("row5-ct2-vocabulary-shorter",
         write(ct2("shared_vocabulary.json"), '["<pad>", "<s>", "</s>", "<unk>"]'),
         ["shared_vocabulary.json", "tokenizer.src"], CT2),
    # Row 10: malformed values in config.json and generation.json
    case("row10-config-string-for-number", model_field(d_model="32"),
         ["config.json", "model.d_model", "expected int"]),
    case("row10-config-float-for-int", model_field(d_model=32.0),
         ["config.json", "model.d_model", "expected int"]),
    case("row10-config-negative-layers", model_field(encoder_layers=-1),
         ["config.json", "model.encoder_layers"]),
    case("row10-config-nan", model_field(dropout=float("nan")), ["config.json", "model.dropout"]),
    case("row10-config-string-for-bool", model_field(tie_embeddings="yes"),
         ["config.json", "model.tie_embeddings"]),
    case("row10-config-unknown-arch", model_field(arch="lstm"),
         ["config.json", "model.arch", "lstm"]),
    case("row10-config-unknown-key", model_field(layers=2), ["config.json", "model.layers"]),
    case("row10-config-model-not-an-object", config_field(model=[1, 2]),
         ["config.json", "field model"]),
    case("row10-config-vocab-size-string", config_field(src_vocab_size="12"),
         ["config.json", "src_vocab_size"]),
    case("row10-config-vocab-size-bool", config_field(src_vocab_size=True),
         ["config.json", "src_vocab_size"]),
    case("row10-config-vocab-size-negative", config_field(tgt_vocab_size=-12),
         ["config.json", "tgt_vocab_size"]),
    case("row10-config-vocab-size-missing", drop("config.json", "tgt_vocab_size"),
         ["config.json", "tgt_vocab_size"]),
    case("row10-config-language-not-a-string", config_field(src_lang=7),
         ["config.json", "src_lang"]),
    # the Transformer keys left in config.json are refused before any weight is read
    case("row10-config-rnn-over-transformer-weights", model_field(arch="rnn"),
         ["config.json", "model.d_ff", "only arch transformer uses it"]),
    # config.json's model as written now, in sections (issue 27, item 6)
    case("row10-nested-negative-layers", model_part("decoder.layers", -1),
         ["config.json", "model.decoder.layers: must be > 0"]),
    case("row10-nested-string-for-bool", model_part("decoder.tie_embeddings", "yes"),
         ["config.json", "model.decoder.tie_embeddings: expected true or false"]),
    case("row10-nested-unknown-key", model_part("encoder.heads", 2),
         ["config.json", "unknown config key model.encoder.heads"]),
    case("row10-nested-kind-a-number", model_part("encoder.kind", 7),
         ["config.json", "model.encoder.kind: expected str, got int 7"]),
    case("row10-nested-rnn-key-of-a-transformer", model_part("decoder.attention", "luong-dot"),
         ["config.json", "model.decoder.attention: only arch rnn uses it"]),
    case("row10-nested-and-flat-at-once", model_part(None, {"decoder_layers": 1}),
         ["config.json", "model.decoder_layers and model.decoder.layers: one key given twice"]),
    case("row10-config-repeated-key", write("config.json", '{"format": 1, "format": 2}'),
         ["config.json", "'format' appears twice"]),
    case("row10-config-nested-too-deep", write("config.json", "[" * 100_000),
         ["config.json", "not valid JSON"]),
    case("row10-generation-no-beams", generation_field(num_beams=0),
         ["generation.json", "generation.num_beams"]),
    case("row10-generation-1e9-beams", generation_field(num_beams=10**9),
         ["generation.json", "generation.num_beams"]),
    case("row10-generation-n-best-above-beams", generation_field(n_best=2),
         ["generation.json", "generation.n_best"]),
    case("row10-generation-nan", generation_field(length_penalty=float("nan")),
         ["generation.json", "generation.length_penalty"]),
    case("row10-generation-inf", write("generation.json", '{"max_len_ratio": 1e400}'),
         ["generation.json", "generation.max_len_ratio"]),
    case("row10-generation-string", generation_field(max_len_offset="10"),
         ["generation.json", "generation.max_len_offset"]),
    case("row10-generation-unknown-key", generation_field(beams=4),
         ["generation.json", "generation.beams"]),
    # Row 10: a tokenizer or weights path that is a directory; a damaged CTranslate2 model.bin
    case("row10-tokenizer-is-a-directory", directory("tokenizer.src"),
         ["tokenizer.src", "directory"]),
    case("row10-ct2-tokenizer-is-a-directory", directory("tokenizer.tgt"),
         ["tokenizer.tgt", "directory"], CT2),
    case("row10-weights-is-a-directory", directory("model.safetensors"),
         ["model.safetensors", "directory"]),
    case("row10-ct2-model-bin-truncated", cut(ct2("model.bin")), CT2_BROKEN, CT2),
    case("row10-ct2-model-bin-zeros", write(ct2("model.bin"), bytes(100)), CT2_BROKEN, CT2),
    case("row10-ct2-model-bin-absurd-length", hugecount_model_bin, CT2_BROKEN, CT2),
    case("row10-ct2-model-bin-empty", write(ct2("model.bin"), b""), CT2_BROKEN, CT2),
    case("row10-ct2-model-bin-missing", remove(ct2("model.bin")), CT2_BROKEN, CT2),
    # Row 14: format versions
    case("row14-format-version-newer", config_field(format_version=99),
         ["config.json", "format_version", "99", "reads format_version 1", "upgrade"]),
    case("row14-ct2-format-version-newer", config_field(format_version=99),
         ["config.json", "format_version", "99", "reads format_version 1"], CT2),
    case("row14-format-version-string", config_field(format_version="1"),
         ["config.json", "format_version", "'1'"]),
    case("row14-format-version-missing", drop("config.json", "format_version"),
         ["config.json", "format_version", "None"]),
    # Every file: empty
    case("row10-empty-config", write("config.json", ""), ["config.json", "not valid JSON"]),
    case("row10-empty-generation", write("generation.json", ""),
         ["generation.json", "not valid JSON"]),
    case("row10-empty-weights", write("model.safetensors", ""),
         ["model.safetensors", "not a valid"]),
    case("row10-empty-tokenizer", write("tokenizer.src", ""),
         ["tokenizer.src", "not a tokenizer file"]),
    # Every file: huge (the huge tokenizer is row5-huge-tokenizer)
    case("row10-huge-config", huge_json, ["config.json", "bytes", "more than"]),
    case("row10-huge-generation", write("generation.json", " " * (2 << 20) + "{}"),
         ["generation.json", "more than"]),
    # Every file: truncated
    case("row10-truncated-config", cut("config.json"), ["config.json", "not valid JSON"]),
    case("row10-truncated-generation", cut("generation.json"),
         ["generation.json", "not valid JSON"]),
    case("row10-truncated-weights", cut("model.safetensors"),
         ["model.safetensors", "not a valid"]),
    case("row10-truncated-tokenizer", cut("tokenizer.src"),
         ["tokenizer.src", "not a tokenizer file"]),
    # Every file: the wrong type of content
    case("row10-config-is-a-string", write("config.json", '"heedful-model"'),
         ["config.json", "not a heedful"]),
    case("row10-generation-is-a-list", write("generation.json", "[5]"),
         ["generation.json", "object"]),
    case("row10-weights-are-a-pickle", write("model.safetensors", b"\x80\x04K\x01."),
         ["model.safetensors", "not a valid"]),
    case("row10-tokenizer-vocab-of-numbers",
         write("tokenizer.src", '{"kind": "char", "vocab": [1, 2]}'),
         ["tokenizer.src", "vocab entry 0"]),
    case("row10-tokenizer-repeats", write("tokenizer.src", '{"kind": "char", "vocab": "aa"}'),
         ["tokenizer.src", "not a heedful character tokenizer"]),
    case("row10-tokenizer-character-twice",
         write("tokenizer.src", '{"kind": "char", "vocab": ["a", "a"]}'),
         ["tokenizer.src", "twice"]),
    # Every file: non-finite numbers (weights with NaN or inf are refused, naming the tensor)
    case("row10-weights-nan", poke("decoder.generator.weight", float("nan")),
         ["model.safetensors", "decoder.generator.weight", "NaN or infinite"]),
    case("row10-weights-inf", poke("encoder.embed.tokens.weight", float("inf")),
         ["encoder.embed.tokens.weight", "NaN or infinite"]),
    # Every file: encodings
    case("row10-config-utf16", reencode("config.json", "utf-16"), ["config.json", "UTF-16"]),
    case("row10-config-utf16-without-bom", reencode("config.json", "utf-16-le"),
         ["config.json", "UTF-16"]),
    case("row10-config-invalid-utf8", write("config.json", b'{"format": "\xff"}'),
         ["config.json", "not UTF-8", "0xff", "byte offset 12"]),
    case("row10-generation-utf8-bom-is-fine", reencode("generation.json", "utf-8-sig"), None),
    case("row10-tokenizer-utf16", reencode("tokenizer.src", "utf-16"),
         ["tokenizer.src", "not a tokenizer"]),
    # Every file: missing, or behind a symbolic link
    case("row10-missing-config", remove("config.json"), ["missing config.json"]),
    case("row10-missing-weights", remove("model.safetensors"), ["missing model.safetensors"]),
    case("row10-missing-tokenizer", remove("tokenizer.tgt"), ["missing tokenizer.tgt"]),
    case("row10-missing-generation", remove("generation.json"), ["missing generation.json"]),
    case("row10-ct2-missing-tokenizer", remove("tokenizer.src"), ["missing tokenizer.src"], CT2),
    case("row10-config-symlink-loop", symlink("config.json", "config.json"),
         ["config.json", "symbolic links"]),
    case("row10-weights-symlink-loop", symlink("model.safetensors", "model.safetensors"),
         ["model.safetensors", "symbolic links"]),
    case("row10-tokenizer-symlink-loop", symlink("tokenizer.src", "tokenizer.src"),
         ["tokenizer.src", "symbolic links"]),
    case("row10-weights-dangling-symlink", dangling("model.safetensors"),
         ["model.safetensors", "link to nothing"]),
    case("row10-weights-symlink-is-fine", symlink("model.safetensors", "weights.bin"), None),
    # Undamaged: both engines load and translate
    case("row10-undamaged", nothing, None),
    case("row10-ct2-undamaged", nothing, None, CT2),
]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Loading every way, under a memory cap
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reverse_export_dir(reverse_model_dir, tmp_path_factory) -> Path:
    return export_ctranslate2(reverse_model_dir, tmp_path_factory.mktemp("export") / "model")


@pytest.fixture(scope="module")
def reference(reverse_model_dir) -> list[str]:
    return [t.text for t in heedful.load(reverse_model_dir).translate(WORDS)]


def test_the_memory_cap_stops_a_large_allocation():
    with memory_cap(), pytest.raises((RuntimeError, MemoryError)):
        torch.empty(4 << 30, dtype=torch.uint8)
    torch.empty(4 << 20, dtype=torch.uint8)  # and is lifted afterwards


def _cli(args: list[str], **kwargs):
    result = CliRunner().invoke(main, args, **kwargs)
    assert "Traceback" not in result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args}: uncaught {result.exception!r}") from result.exception
    return result


@pytest.mark.parametrize("corrupt, words, engine", CASES)
def test_a_hostile_model_directory(
    corrupt, words, engine, reverse_model_dir, reverse_export_dir, reference, tmp_path
):
    model_dir = tmp_path / "model"
    shutil.copytree(reverse_export_dir if engine == "ctranslate2" else reverse_model_dir, model_dir)
    corrupt(model_dir)
    loaders = {"load_translator": lambda: load_translator(model_dir, engine)}
    if engine == "torch":
        loaders["heedful.load"] = lambda: heedful.load(model_dir)
        loaders["average"] = lambda: average_checkpoints([model_dir] * 2, tmp_path / "avg")
    with memory_cap():
        for name, load in loaders.items():
            if words is None:
                if name != "average":
                    assert [t.text for t in load().translate(WORDS)] == reference, name
                continue
            with pytest.raises(CheckpointError) as caught:
                load()
            for word in words:
                assert word in str(caught.value), f"{name}: {word!r} not in {caught.value}"
        command = ["translate", str(model_dir), "--engine", engine]
        result = _cli(command, input="".join(w + "\n" for w in WORDS))
        if words is None:
            assert result.exit_code == 0 and result.output.splitlines() == reference
        else:
            assert result.exit_code == 1 and all(word in result.output for word in words)
        if engine == "torch":
            result = _cli(["average", str(model_dir), "-o", str(tmp_path / "avg2")])
            if words is None:
                assert result.exit_code == 0, result.output
            else:
                assert result.exit_code == 1 and all(word in result.output for word in words)


SERVED = [
    "row4-48+48-layers-at-4096",
    "row5-tokenizer-larger",
    "row10-weights-nan",
    "row14-format-version-newer",
    "row5-ct2-tokenizer-larger",
]


@pytest.mark.parametrize("corrupt, words, engine", [c for c in CASES if c.id in SERVED], ids=SERVED)
def test_serve_refuses_a_hostile_model_directory(
    corrupt, words, engine, reverse_model_dir, reverse_export_dir, tmp_path
):
    """`heedful serve` loads through runtime.load_translator (server.py), so the same checks
    stop it: a config.json problem at once, the others when the weights load, before serving."""
    model_dir = tmp_path / "model"
    shutil.copytree(reverse_export_dir if engine == "ctranslate2" else reverse_model_dir, model_dir)
    corrupt(model_dir)
    with memory_cap():
        result = _cli(["serve", str(model_dir), "--port", "0", "--engine", engine])
    assert result.exit_code == 1 and all(word in result.output for word in words), result.output


# ---------------------------------------------------------------------------------------------
# Row 14: files and directories readable under the user's umask
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_written_files_follow_the_umask(umask, reverse_model_dir, tmp_path):
    old = os.umask(umask)
    try:
        average_checkpoints([reverse_model_dir], tmp_path / "avg")
        export_ctranslate2(reverse_model_dir, tmp_path / "export")
    finally:
        os.umask(old)
    for root in (tmp_path / "avg", tmp_path / "export"):
        for path in [root, *root.rglob("*")]:
            want = (0o777 if path.is_dir() else 0o666) & ~umask
            assert path.stat().st_mode & 0o777 == want, f"{path}: {oct(path.stat().st_mode)}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["avg", "export"]  # no leftovers


# ---------------------------------------------------------------------------------------------
# Rows 3 and 14: what `heedful translate` reads, from stdin and from -i FILE alike
# ---------------------------------------------------------------------------------------------


def read_as(id: str, data: bytes, lines: list[str] | None, words=None, args=()):
    """One row: `heedful translate [args]` given `data` must translate exactly `lines`, or, where
    lines is None, stop with an error that holds `words`."""
    return pytest.param(data, list(args), lines, words, id=id)


MAX_9 = ["--max-chars", "9"]
INPUT_CASES = [
    read_as("row3-empty-input", b"", []),
    read_as("row3-one-empty-line", b"\n", [""]),
    read_as("row3-plain", b"abc\nhgfe\n", ["abc", "hgfe"]),
    read_as("row3-no-final-newline", b"abc\nhgfe", ["abc", "hgfe"]),
    # CRLF: "\r\n" ends a line as "\n" does (data/corpus.py's rule for every file)
    read_as("row3-crlf-endings", b"abc\r\nhgfe\r\n", ["abc", "hgfe"]),
    read_as("row3-form-feed", b"abc\n\x0chgfe\nba\n", ["abc", "\x0chgfe", "ba"]),
    read_as("row3-line-separator-u2028", "ab\u2028c\nhgfe\nba\n".encode(),
            ["ab\u2028c", "hgfe", "ba"]),
    read_as("row3-nel-and-lone-cr", "ab\x85c\nab\rc\n".encode(), ["ab\x85c", "ab\rc"]),
    read_as("row3-utf8-bom", b"\xef\xbb\xbfabc\n", ["abc"]),
    read_as("row3-invalid-utf8", b"abc\nab\xffc\n", None, ["line 2", "0xff", "byte offset 6"]),
    read_as("row3-utf16", "abc\n".encode("utf-16"), None, ["UTF-16"]),
    read_as("row14-1mb-line", b"abc\n" + b"a" * 1_000_000 + b"\n", None,
            ["line 2", "1,000,000", "--max-chars 1,000"]),
    read_as("row14-max-chars-option", b"abcdefgh\nabcdefghab\n", None,
            ["line 2", "10 characters", "--max-chars 9"], MAX_9),
    read_as("row14-line-at-the-limit", b"abcdefghi\n", ["abcdefghi"], args=MAX_9),
    read_as("row14-max-chars-0-is-no-limit", b"abcdefgh" * 130, ["abcdefgh" * 130],
            args=["--max-chars", "0"]),
]  # fmt: skip


@pytest.mark.parametrize("data, args, lines, words", INPUT_CASES)
@pytest.mark.parametrize("source", ["stdin", "file"])
def test_translate_input(source, data, args, lines, words, reverse_model_dir, tmp_path):
    command = ["translate", str(reverse_model_dir), *args]
    if source == "file":
        (tmp_path / "in.txt").write_bytes(data)
        result = _cli([*command, "-i", str(tmp_path / "in.txt")])
    else:
        result = _cli(command, input=data)
    if lines is not None:
        translations = heedful.load(reverse_model_dir).translate(lines)
        assert result.exit_code == 0, result.output
        assert result.output == "".join(t.text + "\n" for t in translations)
    else:
        assert result.exit_code == 1 and all(word in result.output for word in words)
        assert ("<stdin>" if source == "stdin" else "in.txt") in result.output
