"""Hostile Hugging Face directories (issue 14's "Bad input", issue 26's strict reading) and exports
that cannot be done.

Each row of CASES makes a directory from one of the tiny models (or a heedful model) and names
the words the error must hold. heedful.load must raise CheckpointError with them, and the
command (`heedful translate`, or `heedful export --format huggingface`) must exit 1 with them
and no traceback: nothing is unpickled, downloaded or half-loaded.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import heedful
from heedful.cli import main
from heedful.data.batching import pad
from heedful.io import CheckpointError

from .corrupt import (
    copy_of,
    edit_json,
    edits,
    index_naming,
    linked_out,
    repeated_piece,
    setting,
    tensors,
)
from .test_export import heedful_model_dir


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

# issue 26: a Hugging Face directory read as strictly as our own (src/heedful/hf/fields.py,
# files.py, tokenizer_files.py; the weights in loading.py)
STRICT = [
    ("more-layers-than-the-weights", setting("marian", "config.json", encoder_layers=3),
     ["more layers", "model.encoder.layers.2."]),
    ("fewer-layers-than-the-weights", setting("marian", "config.json", decoder_layers=1),
     ["unexpected", "model.decoder.layers.1."]),
    ("weights-tensor-missing",
     tensors("bart", lambda t: t.pop("model.encoder.layers.0.fc1.weight")),
     ["model.encoder.layers.0.fc1.weight"]),
    ("weights-tensor-unexpected",
     tensors("bart", lambda t: t.update({"model.extra.weight": torch.zeros(2, 2)})),
     ["unexpected ['model.extra.weight']"]),
    ("weights-tensor-other-shape", setting("bart", "config.json", max_position_embeddings=1),
     ["model.encoder.embed_positions.weight is [130, 32]", "describes [3, 32]"]),
    ("vocab-size-larger-than-the-weights", setting("t5", "config.json", vocab_size=10**6),
     ["shared.weight is [48, 32] in the weights", "describes [1000000, 32]"]),
    ("weights-nan", tensors("t5", lambda t: t["shared.weight"].__setitem__((0, 0), torch.nan)),
     ["NaN or infinite"]),
    ("index-shard-in-parent", index_naming(lambda t: "../shard.safetensors"),
     ["weight_map", "'../shard.safetensors'", "no '..'"]),
    ("index-shard-absolute", index_naming(lambda t: str(t / "abs" / "shard.safetensors")),
     ["weight_map", "no absolute path"]),
    ("index-shard-linked-out", index_naming(lambda t: "shard.safetensors", linked=True),
     ["shard.safetensors: leads to", "outside"]),
    ("index-without-weight-map", index_naming(lambda t: "shard.safetensors", listed=[]),
     ["model.safetensors.index.json: no weight_map"]),
    ("weights-linked-out", linked_out("bart", "model.safetensors"), ["leads to", "outside"]),
    ("tokenizer-linked-out", linked_out("t5", "tokenizer.json"), ["leads to", "outside"]),
    ("config-linked-out", linked_out("marian", "generation_config.json"),
     ["generation_config.json: leads to", "outside"]),
    ("vocab-size-string", setting("bart", "config.json", vocab_size="300"),
     ["config.json: vocab_size must be a whole number", "'300'"]),
    ("vocab-size-bool", setting("t5", "config.json", vocab_size=True),
     ["config.json: vocab_size must be a whole number", "True"]),
    ("layers-float", setting("marian", "config.json", encoder_layers=2.0),
     ["config.json: encoder_layers must be a whole number", "2.0"]),
    ("init-std-infinite", setting("bart", "config.json", init_std=float("inf")),
     ["config.json: init_std is inf"]),
    ("num-beams-string", setting("bart", "generation_config.json", num_beams="5"),
     ["generation_config.json: num_beams must be a whole number", "'5'"]),
    ("num-beams-float", setting("bart", "generation_config.json", num_beams=2.5),
     ["generation_config.json: num_beams must be a whole number", "2.5"]),
    ("num-beams-huge", setting("bart", "generation_config.json", num_beams=10**6),
     ["num_beams must be from 1 to 256"]),
    ("generation-config-not-object", write("t5", "generation_config.json", b"[1, 2]"),
     ["generation_config.json: must be a JSON object"]),
    ("bad-words-outside-vocabulary",
     setting("marian", "generation_config.json", bad_words_ids=[[99999]]),
     ["bad_words_ids", "99999 is outside", "vocabulary of 50"]),
    ("bad-words-negative", setting("marian", "generation_config.json", bad_words_ids=[[-1]]),
     ["bad_words_ids", "-1 is outside"]),
    ("bad-words-not-nested", setting("marian", "generation_config.json", bad_words_ids=[49]),
     ["bad_words_ids must be a list of lists"]),
    ("forced-bos-outside-vocabulary",
     setting("bart", "generation_config.json", forced_bos_token_id=99999),
     ["forced_bos_token_id", "99999 is outside"]),
    ("forced-bos-negative", setting("bart", "generation_config.json", forced_bos_token_id=-1),
     ["forced_bos_token_id", "-1 is outside"]),
    ("forced-eos-outside-vocabulary", setting("bart", "config.json", forced_eos_token_id=99999),
     ["forced_eos_token_id", "99999 is outside"]),
    ("decoder-start-bool", setting("bart", "config.json", decoder_start_token_id=True),
     ["decoder_start_token_id must be a token id", "True"]),
    ("eos-list-of-strings", setting("bart", "generation_config.json", eos_token_id=["2"]),
     ["eos_token_id must be a token id", "['2']"]),
    ("eos-list-with-pad", setting("bart", "generation_config.json", eos_token_id=[2, 1]),
     ["pad and eos are the same token"]),
    ("eos-null-everywhere", edits("t5", config_json=lambda d: d.update(eos_token_id=None),
                                  generation_config_json=lambda d: d.pop("eos_token_id")),
     ["config.json: no eos_token_id"]),
    ("pad-null-no-pad-token", edits("marian", config_json=lambda d: d.update(pad_token_id=None),
                                    generation_config_json=lambda d: d.pop("pad_token_id"),
                                    tokenizer_config_json=lambda d: d.update(pad_token=None)),
     ["pad_token_id is null and the tokenizer has no pad token"]),
    ("tokenizer-and-config-disagree", setting("m2m_100", "config.json", pad_token_id=3),
     ["the tokenizer's pad token is id 1", "pad_token_id is 3"]),
    ("tokenizer-class-of-another-model",
     setting("marian", "tokenizer_config.json", tokenizer_class="BertTokenizer"),
     ["tokenizer_class 'BertTokenizer' is not a marian tokenizer"]),
    ("tokenizer-json-model-null", setting("bart", "tokenizer.json", model=None),
     ["tokenizer.json: the key 'model' must be an object"]),
    ("tokenizer-json-not-object", write("t5", "tokenizer.json", b"[]"),
     ["tokenizer.json: must be a JSON object"]),
    ("tokenizer-config-eos-a-number", setting("t5", "tokenizer_config.json", eos_token=1),
     ["tokenizer_config.json: eos_token must be a string", "got 1"]),
    ("added-tokens-negative-id", write("marian", "added_tokens.json", b'{"<extra>": -5}'),
     ["added_tokens.json: the id of '<extra>' must be a whole number", "-5"]),
    ("vocab-duplicate-id", setting("marian", "vocab.json", zzz=5), ["both have the id 5"]),
    ("vocab-repeated-piece", repeated_piece, ["vocab.json", "the key '</s>' appears twice"]),
    ("vocab-negative-id", setting("marian", "vocab.json", zzz=-3),
     ["vocab.json: the id of 'zzz' must be a whole number", "-3"]),
    ("vocab-float-id", setting("m2m_100", "vocab.json", zzz=5.0),
     ["vocab.json: the id of 'zzz' must be a whole number", "5.0"]),
    ("vocab-missing-eos", edit_json("marian", "vocab.json", lambda d: d.pop("</s>")),
     ["vocab.json: no '</s>', the eos_token"]),
    ("vocab-missing-unk", edit_json("m2m_100", "vocab.json", lambda d: d.pop("<unk>")),
     ["vocab.json: no '<unk>', the unk_token"]),
]  # fmt: skip


def heedful_model(**options):
    def make(tmp_path, hf_dirs):
        return heedful_model_dir(tmp_path / "model", **options)

    return make


def learned_positions(tmp_path, hf_dirs):
    from heedful.checkpoint.model_dir import save_model_dir
    from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig
    from heedful.data.tokenizers import CharTokenizer
    from heedful.models.build import build_model

    tokenizer = CharTokenizer.train(["abc"])
    config = ModelConfig(
        d_model=8,
        num_heads=2,
        d_ff=16,
        positional="learned",
        encoder=TextEncoderConfig(layers=1),
        decoder=DecoderConfig(layers=1),
    )
    model = build_model(config, len(tokenizer), len(tokenizer))
    return save_model_dir(tmp_path / "chars", model, config, tokenizer, tokenizer)


def bpe_model(tmp_path, hf_dirs):
    from heedful.checkpoint.model_dir import save_model_dir
    from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig
    from heedful.data.tokenizers import SentencePieceTokenizer
    from heedful.models.build import build_model

    from .builders import TEXTS

    tokenizer = SentencePieceTokenizer.train(TEXTS * 20, vocab_size=40, model_type="bpe")
    config = ModelConfig(
        d_model=8,
        num_heads=2,
        d_ff=16,
        encoder=TextEncoderConfig(layers=1),
        decoder=DecoderConfig(layers=1),
    )
    model = build_model(config, len(tokenizer), len(tokenizer))
    return save_model_dir(tmp_path / "bpe", model, config, tokenizer, tokenizer)


# pre-norm exports as Pegasus (one vocabulary); heedful_model_dir has two SentencePiece models
EXPORT = [
    ("export-pre-norm-two-vocabularies", heedful_model(norm="pre"),
     ["pre-norm", "Pegasus", "data.joint_vocab"]),
    ("export-learned-positions", learned_positions, ["learned", "sinusoids"]),
    ("export-sentencepiece-bpe", bpe_model, ["not a unigram one", "sp_model_type"]),
    ("export-a-hugging-face-dir", copy_of("marian"), ["a Hugging Face model ('marian')"]),
]  # fmt: skip
CASES = [pytest.param(*case[1:], "import", id=case[0]) for case in IMPORT + STRICT] + [
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


# The /translate side: a directory whose every request would fail is refused before serving.
SERVED = [
    "bad-words-outside-vocabulary",
    "forced-bos-outside-vocabulary",
    "more-layers-than-the-weights",
]


@pytest.mark.parametrize("make, words, surface", [c for c in CASES if c.id in SERVED], ids=SERVED)
def test_serve_refuses_what_would_fail_every_request(make, words, surface, hf_dirs, tmp_path):
    """`heedful serve` loads through the same checks, so it never reports ready: before,
    bad_words_ids [[99999]] or forced_bos_token_id 99999 loaded and made every /translate a
    500 (an IndexError in the search), and extra layers translated with random weights."""
    directory = make(tmp_path, hf_dirs)
    result = CliRunner().invoke(main, ["serve", str(directory), "--port", "0"], prog_name="heedful")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert all(word in result.output for word in words), result.output


def hub_snapshot(tmp_path, hf_dirs):
    """huggingface_hub's cache: snapshots/REV/NAME are symbolic links to ../../blobs/HASH."""
    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    for path in hf_dirs["marian"].iterdir():
        shutil.copy(path, repo / "blobs" / f"sha-{path.name}")
        (snapshot / path.name).symlink_to(Path("../../blobs") / f"sha-{path.name}")
    return snapshot


def test_the_hub_caches_links_are_inside_the_model(hf_dirs, translators, tmp_path):
    """The links that lead out of a directory are refused, except the Hugging Face cache's
    own (a snapshot's files link to the blobs of the same model)."""
    texts = ["a small dog runs", "the man plays"]
    found = heedful.load(hub_snapshot(tmp_path, hf_dirs)).translate(texts)
    assert [t.text for t in found] == [t.text for t in translators["marian"].translate(texts)]


# Configs as real models have them, which heedful now reads as transformers does (before: a
# traceback); each translates as the model it was edited from, or as generate() does.
ACCEPTED = [
    ("pad-null-uses-the-tokenizers", "bart",
     edits("bart", config_json=lambda d: d.update(pad_token_id=None),
           generation_config_json=lambda d: d.pop("pad_token_id"))),
    ("eos-list-in-config", "bart", setting("bart", "config.json", eos_token_id=[2])),
]  # fmt: skip


@pytest.mark.parametrize("arch, make", [pytest.param(*c[1:], id=c[0]) for c in ACCEPTED])
def test_a_real_models_config_translates(arch, make, hf_dirs, translators, tmp_path):
    from .builders import TEXTS

    found = heedful.load(make(tmp_path, hf_dirs)).translate(TEXTS, num_beams=2)
    expected = translators[arch].translate(TEXTS, num_beams=2)
    assert [t.text for t in found] == [t.text for t in expected]


@pytest.mark.parametrize("beams", [1, 4])
def test_several_end_tokens_end_where_generate_ends(beams, hf_dirs, translators, tmp_path):
    """generation_config.json's eos_token_id [0, X] (generate() stops on either): heedful ends
    its translations where generate() does, with X one of the tokens the model writes."""
    from .test_search import LIMIT, TEXTS, generate

    written = [i for row in generate(translators["marian"], TEXTS, 1) for i in row[1:]]
    end = max(set(written) - {0}, key=written.count)  # a token the model often writes
    directory = setting("marian", "generation_config.json", eos_token_id=[0, end])(
        tmp_path, hf_dirs
    )
    translator = heedful.load(directory)
    theirs = []
    for row in generate(translator, TEXTS, beams):
        cut = next((n for n, i in enumerate(row) if i in (0, end)), None)
        theirs.append((row[:cut], cut is not None))
    src = pad([translator.src_tokenizer.encode(t) for t in TEXTS])
    found = translator.search(
        src, beams, 1, max_len_ratio=0.0, max_len_offset=LIMIT, length_penalty=0.0
    )
    columns = translator.model.ids.columns
    mine = [([int(columns[i]) for i in h.tokens], h.finished) for [h] in found]
    assert mine == theirs
    assert any(ended and len(tokens) < LIMIT for tokens, ended in theirs)


# T5's and mBART's unigram vocabularies hold "</s>", "<s>" and "<pad>" as ordinary pieces of
# their models as well, so there the typed text is those pieces whatever the flag (their
# language codes are added by the search, not read from the text); the others spell them out.
SPELLED_OUT = ("marian", "bart", "m2m_100")


@pytest.mark.parametrize("arch", SPELLED_OUT)
def test_typed_special_tokens_are_text(arch, translators):
    """A typed "</s>", "<pad>" or language code is text (issue 26, item 7): the source holds each
    special id only where the tokenizer adds it itself, as for text without them."""
    source = translators[arch].src_tokenizer
    hf = source.tokenizer
    typed = [token for token in hf.all_special_tokens if token and token != hf.unk_token]
    typed += list(getattr(hf, "lang_code_to_id", {}))[:2]
    assert len(typed) >= 2, typed
    plain = source.encode("a b")
    for token in typed:
        ours = source.ids.ours.get(hf.convert_tokens_to_ids(token))
        ids = source.encode(f"a {token} b")
        assert ids.count(ours) == plain.count(ours), (token, ids, plain)
