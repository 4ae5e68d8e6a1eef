"""Hostile inputs of one model, several directions (issue 15, item 6): `data.corpora` configs
and their files through `heedful train`, a model directory's `pairs` and its tokenizer's target
tokens through `heedful translate`, and --target / --source. Each is one named error, exit
status 1, naming the entry and key (data.corpora[1].train_tgt) or the file and field; never a
traceback, never a model trained or run on a misread corpus. HTTP's unknown pairs:
tests/server/test_routing.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner

from heedful.checkpoint.model_dir import save_model_dir
from heedful.cli import main
from heedful.config import DecoderConfig, GenerationConfig, ModelConfig, TextEncoderConfig
from heedful.data.languages import LanguageError
from heedful.data.tokenizers import CharTokenizer, SentencePieceTokenizer
from heedful.inference.translator import Translator
from heedful.models.build import build_model

WORDS = ["abc", "bca", "cab", "acb", "bac", "cba"]
VALID = ("valid_src", "valid_tgt")


def corpus_entry(d: Path, target: str, **changes) -> dict:
    files = {
        f"{split}_{side}": str(d / f"{split}.{target}.{side}")
        for split in ("train", "valid")
        for side in ("src", "tgt")
    }
    return {"source": "en", "target": target, **files, **changes}


def two_corpora(d: Path) -> list[dict]:
    return [corpus_entry(d, "de"), corpus_entry(d, "fr")]


@dataclass
class Case:
    id: str
    # the data section's changes, given the data directory (train cases), or None
    data: object = None
    files: dict[str, bytes] = field(default_factory=dict)  # data/NAME -> content
    sets: tuple[str, ...] = ()  # --set overrides of train
    # translate cases: (model directory) -> None, changing it; and translate's flags
    model: object = None
    flags: tuple[str, ...] = ()
    message: str = ""
    command: str = "train"  # or "prepare": heedful prepare -o DIR on the same config
    # text cases (issue 26): a line typed to the SentencePiece model with --target fr, which
    # must read one target token, <2fr>, through the API, the CLI and HTTP alike
    text: str | None = None


def corpora(change):
    """A data section whose corpora are two_corpora(d) changed by change(list, d)."""

    def data(d: Path) -> dict:
        entries = two_corpora(d)
        change(entries, d)
        return {"corpora": entries}

    return data


def drop(index: int, key: str):
    return corpora(lambda e, d: e[index].pop(key))


def put(index: int, key: str, value):
    return corpora(lambda e, d: e[index].__setitem__(key, value))


def meta(change):
    """Change the multilingual model directory's config.json by change(dict)."""

    def edit(model_dir: Path) -> None:
        path = model_dir / "config.json"
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    return edit


def symbols(value):
    def edit(model_dir: Path) -> None:
        path = model_dir / "tokenizer.src"
        data = json.loads(path.read_text())
        data["symbols"] = value
        path.write_text(json.dumps(data))

    return edit


def without_symbols(model_dir: Path) -> None:  # the vocabulary keeps its size: <2de> as text
    path = model_dir / "tokenizer.src"
    data = json.loads(path.read_text())
    data["vocab"], data["symbols"] = data["vocab"] + ["x", "y"], []
    path.write_text(json.dumps(data))


CASES = [
    # data.corpora in the config: wrong types, missing fields, codes that are not plain
    Case("row0-empty-list", data={"corpora": []}, message="data.corpora: an empty list"),
    Case("row0-not-a-list", data={"corpora": "en-de"}, message="data.corpora: expected a list"),
    Case("row0-entry-not-a-mapping", data={"corpora": [5]},
         message="data.corpora[0]: expected a mapping, got int"),
    Case("row0-entry-null", data={"corpora": [None]},
         message="data.corpora[0]: expected a mapping"),
    Case("missing-source", data=drop(0, "source"), message="data.corpora[0].source: required"),
    Case("missing-target", data=drop(1, "target"), message="data.corpora[1].target: required"),
    Case("missing-train-tgt", data=drop(1, "train_tgt"),
         message="data.corpora[1].train_src and data.corpora[1].train_tgt (or"),
    Case("missing-valid-files", data=corpora(lambda e, d: [e[1].pop(k) for k in VALID]),
         message="data.corpora[1].valid_src and data.corpora[1].valid_tgt (or"),
    Case("duplicate-pair", data=put(1, "target", "de"),
         message="data.corpora[1]: the pair en→de is already data.corpora[0]"),
    Case("code-capitals", data=put(0, "source", "EN"),
         message="data.corpora[0].source: 'EN' is not a plain language code"),
    Case("code-with-brackets", data=put(1, "target", "f>r"),
         message="data.corpora[1].target: 'f>r' is not a plain language code"),
    Case("code-with-space", data=put(1, "target", "fr ca"), message="is not a plain language code"),
    Case("row0-code-huge", data=put(1, "target", "f" * 100_000),
         message="data.corpora[1].target: 'ffffff"),
    Case("row0-code-a-number", data=put(1, "target", 7),
         message="data.corpora[1].target: expected str, got int 7"),
    Case("row0-code-a-list", data=put(0, "source", ["en"]),
         message="data.corpora[0].source: expected str"),
    Case("unknown-key", data=put(0, "train_source", "x"),
         message="unknown config key data.corpora[0].train_source"),
    Case("top-level-files-too", data=lambda d: {"corpora": two_corpora(d), "train_src": "x"},
         message="data.train_src: not read with data.corpora"),
    Case("prepared", data=lambda d: {"corpora": two_corpora(d), "prepared": str(d / "p")},
         message="data.prepared: heedful prepare does not read data.corpora yet"),
    Case("prepare-command", data=lambda d: {"corpora": two_corpora(d)}, command="prepare",
         message="heedful prepare does not read data.corpora (several language pairs) yet"),
    Case("tsv-and-files", data=put(0, "train_tsv", "x.tsv"),
         message="data.corpora[0].train_tsv and data.corpora[0].train_src/_tgt are exclusive"),
    Case("row0-override-truncated", data=lambda d: {"corpora": two_corpora(d)},
         sets=("data.corpora=[{source: en",), message="is not valid YAML"),
    # the corpora's files
    Case("file-missing", data=put(1, "train_tgt", "/nonexistent/train.fr.tgt"),
         message="data.corpora[1].train_tgt: file not found"),
    Case("row0-wrong-encoding", files={"valid.fr.src": "é\n".encode("latin-1") * 6},
         message="data.corpora[1].valid_src: "),
    Case("row0-truncated-side", files={"train.fr.tgt": b"abc\n"},
         message="data.corpora[1].train_src and data.corpora[1].train_tgt must have one line"),
    Case("row0-empty-valid", files={"valid.de.src": b"", "valid.de.tgt": b""},
         message="data.corpora[0].valid_src and data.corpora[0].valid_tgt"),
    Case("source-starts-with-a-token", files={"train.fr.src": b"abc\nbca\n<2de> cab\n" * 2},
         message="pair 3: the source starts with <2de>, a target token; heedful adds <2fr>"),
    Case("target-starts-with-a-token", files={"valid.de.tgt": b"cba\n<2de> acb\n" * 3},
         message="data.corpora[0].valid_tgt ("),
    Case("target-starts-with-a-token-message", files={"train.fr.tgt": b"cba\n<2fr>acb\n" * 3},
         message="pair 2: the target starts with <2fr>, a target token; heedful adds <2fr> to"),
    Case("given-tokenizer-without-tokens",
         data=lambda d: {"corpora": two_corpora(d), "src_tokenizer": str(d / "plain.tok"),
                         "tgt_tokenizer": str(d / "plain.tok")},
         message="has no symbol <2de>; a multilingual model reads each target token as one"),
    # a model directory's pairs (config.json) and its source tokenizer's target tokens
    Case("pairs-not-a-list", model=meta(lambda m: m.__setitem__("pairs", "en-de")),
         message="field pairs must be a list of [source, target]"),
    Case("row0-pairs-empty", model=meta(lambda m: m.__setitem__("pairs", [])),
         message="field pairs must be a list"),
    Case("pair-of-three", model=meta(lambda m: m.__setitem__("pairs", [["en", "de", "fr"]])),
         message="field pairs[0] must be [source, target]"),
    Case("pair-code-not-plain", model=meta(lambda m: m.__setitem__("pairs", [["en", "<2de>"]])),
         message="field pairs[0] (target): '<2de>' is not a plain language code"),
    Case("row0-pair-code-a-number", model=meta(lambda m: m.__setitem__("pairs", [["en", 1.5]])),
         message="field pairs[0] (target): 1.5 is not a plain language code"),
    Case("pairs-twice", model=meta(lambda m: m.__setitem__("pairs", [["en", "de"], ["en", "de"]])),
         message="field pairs[1]: en→de is listed twice"),
    Case("tokenizer-lacks-a-token", model=without_symbols, flags=("--target", "de"),
         message="tokenizer.src: has no symbol <2de>"),
    Case("symbols-not-tokens", model=symbols(["<2de>", "de"]), message="symbols entry 1 is 'de'"),
    Case("row0-symbols-wrong-type", model=symbols("<2de>"),
         message="symbols must be a list of distinct target tokens"),
    # --target / --source
    Case("target-not-trained", flags=("--target", "es"),
         message="does not translate into es; it translates en→de, en→fr"),
    Case("no-target", flags=(), message="writes several languages (en→de, en→fr): name the target"),
    Case("source-not-trained", flags=("--source", "de", "--target", "fr"),
         message="does not translate de→fr; it translates en→de, en→fr"),
    # a target token typed in the text is text, never the model's control token (issue 26)
    Case("typed-token-first", text="<2de> abc cab"),
    Case("typed-token-inside", text="abc <2de> cab"),
    Case("typed-token-after-spaces", text="   <2de> abc"),
    Case("typed-token-glued", text="<2de><2de>abc"),
    Case("typed-own-token", text="<2fr> abc"),
]  # fmt: skip


@pytest.fixture(scope="module")
def multilingual(tmp_path_factory) -> Path:
    """A tiny untrained multilingual model directory (en→de, en→fr)."""
    source = CharTokenizer.train(["abc <>"], symbols=["<2de>", "<2fr>"])
    target = CharTokenizer.train(["abc"])
    config = ModelConfig(
        d_model=8,
        num_heads=2,
        d_ff=16,
        encoder=TextEncoderConfig(layers=1),
        decoder=DecoderConfig(layers=1),
    )
    torch.manual_seed(0)
    model = build_model(config, len(source), len(target))
    path = tmp_path_factory.mktemp("hostile-languages") / "model"
    pairs = (("en", "de"), ("en", "fr"))
    return save_model_dir(path, model, config, source, target, GenerationConfig(), pairs[0], pairs)


@pytest.fixture(scope="module")
def sp_multilingual(tmp_path_factory) -> Path:
    """The same model with a SentencePiece source tokenizer, whose target tokens are
    user-defined symbols; its training text has the characters of a typed <2de>."""
    texts = [" ".join(WORDS[i:] + WORDS[:i]) + " <2 de fr> " for i in range(len(WORDS))]
    source = SentencePieceTokenizer.train(texts, 24, symbols=["<2de>", "<2fr>"])
    target = CharTokenizer.train(["abc"])
    config = ModelConfig(
        d_model=8,
        num_heads=2,
        d_ff=16,
        encoder=TextEncoderConfig(layers=1),
        decoder=DecoderConfig(layers=1),
    )
    torch.manual_seed(0)
    model = build_model(config, len(source), len(target))
    path = tmp_path_factory.mktemp("hostile-languages-sp") / "model"
    pairs = (("en", "de"), ("en", "fr"))
    return save_model_dir(path, model, config, source, target, GenerationConfig(), pairs[0], pairs)


def check_reads_one_token(case: Case, model_dir: Path) -> None:
    """The API reads <2fr> and then the typed text; the CLI and HTTP answer the same;
    without a target the API names none, whatever the text starts with."""
    translator = Translator.load(model_dir)
    with pytest.raises(LanguageError, match="writes several languages"):
        translator.translate([case.text], num_beams=1)
    tokenizer = translator.src_tokenizer
    ids = tokenizer.encode(translator.sources([case.text], target="fr")[0])
    read = [tokenizer.id_to_token(i) for i in ids if tokenizer.id_to_token(i) in tokenizer.symbols]
    assert read == ["<2fr>"] and ids[0] == tokenizer.processor.piece_to_id("<2fr>"), ids
    [expected] = translator.translate([case.text], num_beams=1, target="fr")
    args = ["translate", str(model_dir), "--target", "fr", "--beam", "1"]
    result = CliRunner().invoke(main, args, input=case.text + "\n")
    assert result.exit_code == 0 and result.output == expected.text + "\n", result.output
    from server.helpers import client

    with client(model_dir) as http:
        body = {"q": case.text, "source": "en", "target": "fr", "num_beams": 1}
        answer = http.post("/translate", json=body | {"return_attention": True}).json()
    tokens = answer["attention"]["source_tokens"]
    assert [t for t in tokens if t in tokenizer.symbols] == ["<2fr>"], tokens
    assert answer["translatedText"] == expected.text


def check_seeing_reads_one_token(case: Case, model_dir: Path, tmp_path: Path) -> None:
    """The views read it the same: build_trace and explain (and `heedful attention` and
    `heedful explain`, with --target) read <2fr>, then the typed text as text; without a
    target they name none (the typed <2de> set the target before)."""
    from heedful.visualize.explain import explain
    from heedful.visualize.trace import build_trace

    translator = Translator.load(model_dir)
    symbols = translator.src_tokenizer.symbols
    with pytest.raises(LanguageError, match="writes several languages"):
        build_trace(translator, case.text)
    with pytest.raises(LanguageError, match="writes several languages"):
        explain(translator, case.text)
    trace = build_trace(translator, case.text, target="fr")
    assert [t for t in trace.source_tokens if t in symbols] == ["<2fr>"], trace.source_tokens
    assert "<2fr>" in explain(translator, case.text, target="fr").text()
    json_path = tmp_path / "trace.json"
    args = ["attention", str(model_dir), case.text, "--json", str(json_path), "--target", "fr"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert json.loads(json_path.read_text())["source_tokens"] == trace.source_tokens
    result = CliRunner().invoke(main, ["explain", str(model_dir), case.text])
    assert result.exit_code == 1 and "name the target" in result.output, result.output


def write_data(d: Path, case: Case) -> dict:
    d.mkdir()
    for target in ("de", "fr"):
        for split in ("train", "valid"):
            (d / f"{split}.{target}.src").write_text("".join(w + "\n" for w in WORDS))
            (d / f"{split}.{target}.tgt").write_text("".join(w[::-1] + "\n" for w in WORDS))
    CharTokenizer.train(["abc"]).save(d / "plain.tok")
    for name, content in case.files.items():
        (d / name).write_bytes(content)
    return case.data(d) if callable(case.data) else case.data or {"corpora": two_corpora(d)}


def train(tmp_path: Path, case: Case):
    data = {"tokenizer": "char", "max_length": 20, **write_data(tmp_path / "data", case)}
    model = {"d_model": 8, "num_heads": 2, "encoder_layers": 1, "decoder_layers": 1, "d_ff": 16}
    config = {"data": data, "model": model, "train": {"max_steps": 1, "batch_tokens": 50}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    args = ["train", str(path), "--run-dir", str(tmp_path / "run"), "--no-progress"]
    if case.command == "prepare":
        args = ["prepare", str(path), "-o", str(tmp_path / "prepared"), "--no-progress"]
    return CliRunner().invoke(main, [*args, *(x for s in case.sets for x in ("--set", s))])


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_languages(case, tmp_path, multilingual, request):
    if case.text is not None:
        check_reads_one_token(case, request.getfixturevalue("sp_multilingual"))
        check_seeing_reads_one_token(case, request.getfixturevalue("sp_multilingual"), tmp_path)
        return
    if case.model is None and (case.data is not None or case.files):
        result = train(tmp_path, case)
        assert not (tmp_path / "run" / "latest").exists()  # nothing trained, or prepared
        assert not (tmp_path / "prepared").exists()
    else:
        model_dir = tmp_path / "model"
        model_dir.mkdir()
        for path in multilingual.iterdir():
            (model_dir / path.name).write_bytes(path.read_bytes())
        if case.model is not None:
            case.model(model_dir)
        flags = case.flags or (() if case.message.startswith("writes") else ("--target", "de"))
        result = CliRunner().invoke(main, ["translate", str(model_dir), *flags], input="abc\n")
    assert result.exit_code == 1, result.output
    assert case.message in result.output, result.output
    assert "Traceback" not in result.output
    assert len(result.output) < 1000  # a quoted value is cut short, never echoed whole


def test_the_table_can_fail(tmp_path, multilingual):
    """A good config trains, and the multilingual directory translates: the cases fail for
    what they change."""
    good = Case("good", data=lambda d: {"corpora": two_corpora(d)})
    result = train(tmp_path, good)
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(
        main, ["translate", str(multilingual), "--target", "fr"], input="ab\n"
    )
    assert result.exit_code == 0, result.output
