"""One model, two directions (issue 15, item 6): trained on a generated task where only the
target token tells the directions apart (copy a word, or write it backwards), then asked
through Python, `heedful translate` and HTTP for each; the token must choose the direction."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from heedful.cli import main
from heedful.config import load_config
from heedful.data.languages import LanguageError
from heedful.inference.translator import Translator
from heedful.training.experiment import train_from_config

# Directions of the generated task, as (language code, the output it asks for)
DIRECTIONS = {"cpy": lambda word: word, "rev": lambda word: word[::-1]}
STEPS = 200  # about 10 s on one busy core; the margin below holds from about 150


def words(n: int, seed: int) -> list[str]:
    """Random words of 3-6 letters; no palindromes, whose two directions agree."""
    rng = random.Random(seed)
    found: list[str] = []
    while len(found) < n:
        word = "".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 6)))
        if word != word[::-1]:
            found.append(word)
    return found


def write_corpora(directory: Path) -> str:
    """The files of both corpora (the same sources, each direction's targets); the YAML list
    of data.corpora naming them."""
    entries = []
    for code, direct in DIRECTIONS.items():
        for split, n, seed in (("train", 400, 1), ("valid", 16, 2)):
            sources = words(n, seed)
            for side, lines in (("src", sources), ("tgt", [direct(w) for w in sources])):
                path = directory / f"{split}.{code}.{side}"
                path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        files = ", ".join(
            f"{split}_{side}: {directory}/{split}.{code}.{side}"
            for split in ("train", "valid")
            for side in ("src", "tgt")
        )
        entries.append(f"    - {{source: src, target: {code}, {files}}}")
    return "\n".join(entries)


CONFIG = """\
data:
  corpora:
{corpora}
  tokenizer: char
  max_length: 20
model:
  d_model: 32
  num_heads: 2
  encoder_layers: 1
  decoder_layers: 1
  d_ff: 64
  dropout: 0.0
train:
  seed: 1
  batch_tokens: 400
  max_steps: {steps}
  eval_every: {steps}
  log_every: 50
  lr: 0.005
  warmup_steps: 20
  threads: 1
generation:
  num_beams: 1
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("multilingual")
    (root / "data").mkdir()
    config_path = root / "config.yaml"
    config_path.write_text(CONFIG.format(corpora=write_corpora(root / "data"), steps=STEPS))
    train_from_config(load_config(config_path), root / "run", progress=False, echo=lambda m: None)
    return root / "run"


@pytest.fixture(scope="module")
def model_dir(run_dir) -> Path:
    return run_dir / "latest"


def distance(a: str, b: str) -> int:
    """Levenshtein distance."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


HELD_OUT = words(30, 7)


def assert_direction(code: str, outputs: list[str]) -> None:
    """Most outputs are nearer the asked direction's answer than the other direction's: the
    token chose it. Two thirds is a margin; an unconditioned model sits near one half."""
    other = next(c for c in DIRECTIONS if c != code)
    nearer = [
        distance(out, DIRECTIONS[code](w)) < distance(out, DIRECTIONS[other](w))
        for out, w in zip(outputs, HELD_OUT)
    ]
    assert sum(nearer) >= 2 * len(HELD_OUT) / 3, (code, list(zip(HELD_OUT, outputs)))


def test_the_model_directory_records_its_pairs(model_dir):
    meta = json.loads((model_dir / "config.json").read_text())
    assert meta["pairs"] == [["src", "cpy"], ["src", "rev"]]
    assert (meta["src_lang"], meta["tgt_lang"]) == ("src", "cpy")  # older readers: one pair
    translator = Translator.load(model_dir)
    assert translator.pairs == (("src", "cpy"), ("src", "rev")) and translator.target_tokens
    tokens = translator.src_tokenizer.tokens("<2rev> abc")
    assert tokens == ["<2rev>", "a", "b", "c"]  # one symbol, then the text
    assert len(translator.src_tokenizer.encode("<2rev> abc")) == 4


def test_validation_scores_each_target(run_dir):
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    validation = [r for r in records if r.get("event") == "validation"][-1]
    assert {"bleu", "bleu_cpy", "bleu_rev"} <= set(validation)


@pytest.mark.parametrize("code", DIRECTIONS)
def test_python_target_chooses_the_direction(model_dir, code):
    translator = Translator.load(model_dir)
    outputs = [t.text for t in translator.translate(HELD_OUT, num_beams=1, target=code)]
    assert_direction(code, outputs)
    with pytest.raises(AssertionError):  # the check can fail: not the other direction's
        assert_direction(next(c for c in DIRECTIONS if c != code), outputs)
    # the token is a source token like any other: in the attention's labels and matrix
    [traced] = translator.translate(HELD_OUT[:1], num_beams=1, target=code, need_weights=True)
    assert traced.source_tokens[0] == f"<2{code}>"
    assert traced.attention.shape[-1] == len(HELD_OUT[0]) + 1


def test_python_refuses_a_target_it_was_not_trained_on(model_dir):
    translator = Translator.load(model_dir)
    with pytest.raises(LanguageError, match="does not translate into fr; it translates src→cpy"):
        translator.translate(["abc"], target="fr")
    with pytest.raises(LanguageError, match="does not translate en→rev"):
        translator.translate(["abc"], target="rev", source="en")
    with pytest.raises(LanguageError, match="writes several languages .*: name the target"):
        translator.translate(["abc"])


@pytest.mark.parametrize("code", DIRECTIONS)
def test_cli_target_chooses_the_direction(model_dir, code):
    args = ["translate", str(model_dir), "--target", code, "--source", "src", "--beam", "1"]
    result = CliRunner().invoke(main, args, input="".join(w + "\n" for w in HELD_OUT))
    assert result.exit_code == 0, result.output
    assert_direction(code, result.output.splitlines())


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--target", "fr"], "does not translate into fr; it translates src→cpy, src→rev"),
        ([], "writes several languages (src→cpy, src→rev): name the target"),
        (["--target", "rev", "--source", "de"], "does not translate de→rev"),
    ],
)
def test_cli_names_the_pairs_it_has(model_dir, flags, message):
    result = CliRunner().invoke(main, ["translate", str(model_dir), *flags], input="abc\n")
    assert result.exit_code == 1 and message in result.output, result.output
    assert "Traceback" not in result.output


def test_http_routes_by_target(model_dir):
    from server.helpers import LIMITS, client, error, ok

    with client(model_dir, LIMITS) as http:
        listed = ok(http.get("/languages"))
        assert [(x["code"], x["targets"]) for x in listed] == [
            ("src", ["cpy", "rev"]),
            ("cpy", []),
            ("rev", []),
        ]
        for code in DIRECTIONS:
            body = {"q": HELD_OUT, "source": "src", "target": code}
            answer = ok(http.post("/translate", json={**body, "q": HELD_OUT[:4]}))
            outputs = answer["translatedText"]
            for start in range(4, len(HELD_OUT), 4):  # LIMITS: at most 4 texts a request
                more = ok(http.post("/translate", json={**body, "q": HELD_OUT[start : start + 4]}))
                outputs += more["translatedText"]
            assert_direction(code, outputs)
        traced = ok(
            http.post(
                "/translate",
                json={"q": "abc", "source": "auto", "target": "rev", "return_attention": True},
            )
        )
        assert traced["attention"]["source_tokens"][0] == "<2rev>"
        error(
            http.post("/translate", json={"q": "abc", "source": "src", "target": "fr"}),
            400,
            "fr is not supported",  # LibreTranslate's words: no pair writes fr
        )


def test_corpora_of_every_form_are_read_and_round_trip(tmp_path):
    """data.corpora entries of aligned files, TSV and JSON Lines: each read by its own reader,
    each source after its pair's token; the config saves and loads back equal."""
    from heedful.config import save_config
    from heedful.data.languages import read_corpora

    (tmp_path / "a.src").write_text("one\ntwo\n")
    (tmp_path / "a.tgt").write_text("eins\nzwei\n")
    (tmp_path / "b.tsv").write_text("one\tun\n\tvide\n")  # a blank source stays blank
    (tmp_path / "c.jsonl").write_text('{"document": "one", "summary": "uno"}\n')
    corpora = (
        f"[{{source: en, target: de, train_src: {tmp_path}/a.src, train_tgt: {tmp_path}/a.tgt,"
        f" valid_src: {tmp_path}/a.src, valid_tgt: {tmp_path}/a.tgt}},"
        f" {{source: en, target: fr, train_tsv: {tmp_path}/b.tsv, valid_tsv: {tmp_path}/b.tsv}},"
        f" {{source: en, target: es, train_jsonl: {tmp_path}/c.jsonl,"
        f" valid_jsonl: {tmp_path}/c.jsonl}}]"
    )
    config = load_config(None, [f"data.corpora={corpora}", "data.valid_max_sentences=1"])
    assert config.data.pairs() == (("en", "de"), ("en", "fr"), ("en", "es"))
    assert read_corpora(config.data, "train") == [
        ("<2de> one", "eins"), ("<2de> two", "zwei"), ("<2fr> one", "un"), ("", "vide"),
        ("<2es> one", "uno"),
    ]  # fmt: skip
    valid = read_corpora(config.data, "valid")  # valid_max_sentences: the first of each
    assert valid == [("<2de> one", "eins"), ("<2fr> one", "un"), ("<2es> one", "uno")]
    save_config(config, tmp_path / "saved.yaml")
    assert load_config(tmp_path / "saved.yaml") == config
    save_config(load_config(), tmp_path / "one.yaml")  # one pair: written as before
    assert "corpora" not in (tmp_path / "one.yaml").read_text()


def test_target_tokens_are_one_symbol_of_either_tokenizer(tmp_path):
    from heedful.data.tokenizers import CharTokenizer, load_tokenizer, train_tokenizers

    texts = [f"{w} {v}" for w, v in zip(words(300, 3), words(300, 4))]
    sources = [f"<2{code}> {t}" for t in texts for code in ("de", "fr")]
    for kind, size in (("sentencepiece", 60), ("char", None)):
        src, tgt = train_tokenizers(sources, texts, kind, size or 8000, symbols=["<2de>", "<2fr>"])
        assert src.tokens("<2fr> abc")[0] == "<2fr>" and "<2fr>" not in tgt.tokens("<2fr> abc")
        assert src.tokens("<2fr> abc")[1:] == src.tokens("abc")  # the text's pieces unchanged
        assert len(src.encode("<2fr> abc")) == len(src.encode("abc")) + 1
        src.save(tmp_path / kind)
        assert load_tokenizer(tmp_path / kind).encode("<2de> ab") == src.encode("<2de> ab")
    old = CharTokenizer.train(["abc"])  # a file written before target tokens: as it was
    old.save(tmp_path / "old")
    assert (tmp_path / "old").read_text() == '{"kind": "char", "vocab": ["a", "b", "c"]}'
    assert load_tokenizer(tmp_path / "old").encode("<2de> ab")[0] == 3  # <unk>: text here


REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "corpora" / "multi30k"


@pytest.mark.integration
def test_multi30k_config_reads_both_corpora_and_trains(tmp_path, monkeypatch):
    """configs/multi30k/multilingual.yaml: both corpora read, each source after its pair's
    token, and a few training steps on batches that hold both directions. Not quality: the
    model is shrunk and the run is three steps."""
    from heedful.checkpoint.model_dir import load_model_dir
    from heedful.data.batching import InMemoryPairs
    from heedful.data.corpus import filter_pairs
    from heedful.data.stream import BatchStream
    from heedful.training.experiment import read_split

    if not MULTI30K.is_dir():
        pytest.skip(f"{MULTI30K} not present")
    monkeypatch.chdir(REPO)  # the config's paths are relative to the repository root
    small = ["model.d_model=32", "model.num_heads=2", "model.encoder_layers=1",
             "model.decoder_layers=1", "model.d_ff=64", "data.vocab_size=2000",
             "data.tokenizer_sample=20000", "data.valid_max_sentences=4", "train.max_steps=3",
             "train.eval_every=3", "train.batch_tokens=1500", "train.threads=1"]  # fmt: skip
    config = load_config(REPO / "configs" / "multi30k" / "multilingual.yaml", small)
    assert config.data.pairs() == (("en", "de"), ("en", "fr"))
    train_pairs = read_split(config, "train")
    assert len(train_pairs) == 2 * 29_000
    assert train_pairs[0][0].startswith("<2de> ") and train_pairs[-1][0].startswith("<2fr> ")
    assert train_pairs[0][0][6:] == train_pairs[29_000][0][6:]  # one English side, two targets
    result = train_from_config(config, tmp_path / "run", progress=False, echo=lambda m: None)
    assert result.steps == 3
    loaded = load_model_dir(tmp_path / "run" / "latest")
    assert loaded.pairs == (("en", "de"), ("en", "fr")) and loaded.target_tokens
    tokenizer = loaded.src_tokenizer
    tokens = {tokenizer.processor.piece_to_id(t) for t in ("<2de>", "<2fr>")}
    # the batches those steps trained on (the same stream, seed and ids as the run's)
    src_ids, tgt_ids, _ = filter_pairs(train_pairs, tokenizer, tokenizer, config.data.max_length)
    stream = BatchStream(
        InMemoryPairs(src_ids, tgt_ids), config.train.batch_tokens, config.train.seed
    )
    for _ in range(3):
        firsts = set(stream.next().batch.src[:, 0].tolist())
        assert firsts == tokens, firsts  # every source starts with a token; both are there
    records = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    validation = [json.loads(r) for r in records if '"validation"' in r][-1]
    assert {"bleu_de", "bleu_fr"} <= set(validation)
