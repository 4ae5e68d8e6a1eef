"""Hostile decoding settings (issue 15's Bad input), through the Python API and `heedful
translate`: each a named error that says what to change, never a traceback or a silent output.
The same over HTTP: tests/server/test_decoding_fields.py (`BAD`)."""

from __future__ import annotations

import json
import shutil
from copy import copy
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from heedful.cli import main
from heedful.config import ConfigError
from heedful.data.tokenizers import CharTokenizer, SentencePieceTokenizer
from heedful.inference.translator import Translator, VocabularyMismatch, ensemble, load_ensemble
from heedful.models.ensemble import Ensemble
from heedful.search.prefix import PrefixError
from heedful.visualize.trace import build_trace

MODELS = Path(__file__).resolve().parent / "golden" / "models"
RNN, TRANSFORMER = str(MODELS / "rnn"), str(MODELS / "transformer")


@dataclass
class Case:
    id: str
    run: object  # (tmp_path) -> None, raising; or a list of CLI arguments (+ "input")
    error: type | None  # the API's error class, or None for the CLI (exit status 1 or 2)
    message: str | None  # a fragment of the message; None: the case must work


def api(**settings):
    def run(tmp_path):
        Translator.load(MODELS / "rnn").translate(["ab"], **settings)

    return run


def other_vocabulary(tmp_path, change) -> str:
    """The RNN's directory with its target vocabulary changed by `change(list)`."""
    other = tmp_path / "other"
    shutil.copytree(MODELS / "rnn", other)
    vocab = json.loads((other / "tokenizer.tgt").read_text())
    vocab["vocab"] = change(vocab["vocab"])
    (other / "tokenizer.tgt").write_text(json.dumps(vocab))
    return str(other)


def ensemble_of(change):
    return lambda tmp_path: load_ensemble([RNN, other_vocabulary(tmp_path, change)])


def other_size(tmp_path):
    """The RNN's Translator with a target tokenizer of one more token."""
    rnn = Translator.load(MODELS / "rnn")
    other = copy(rnn)
    other.tgt_tokenizer = CharTokenizer("abcdefghz")
    ensemble([rnn, other])


def other_target(tokenizer, prefix: str):
    """The RNN's Translator writing with `tokenizer` (of the same size, 12), told `prefix`."""

    def run(tmp_path):
        rnn = copy(Translator.load(MODELS / "rnn"))
        rnn.tgt_tokenizer = tokenizer
        rnn.translate(["ab"], prefixes=[prefix])

    return run


JOINT = CharTokenizer("abcdefg", symbols=["<2de>"])  # a joint vocabulary's target side


def normalising(prefix: str):
    """other_target with a SentencePiece target tokenizer (NFKC, spaces normalised); the
    prefix is refused before the search, so the vocabulary need not be the model's."""
    words = ["abc", "bca", "cab", "acb", "bac", "cba", "aab", "bba", "ccb", "fi"]
    texts = [" ".join(words[i:] + words[:i]) for i in range(len(words))]
    return lambda tmp_path: other_target(SentencePieceTokenizer.train(texts, 16), prefix)(tmp_path)


CASES = [
    Case("api-temperature-0", api(sample=True, temperature=0.0),
         ConfigError, "generation.temperature must be above 0"),
    Case("api-temperature-negative", api(sample=True, temperature=-1.0),
         ConfigError, "generation.temperature"),
    Case("api-temperature-nan", api(sample=True, temperature=float("nan")),
         ConfigError, "generation.temperature"),
    Case("api-temperature-int-no-float-holds", api(sample=True, temperature=10**400),
         ConfigError, "generation.temperature must be above 0.0 and at most 100.0"),
    Case("api-top-p-0", api(sample=True, top_p=0.0),
         ConfigError, "generation.top_p must be above 0"),
    Case("api-top-p-above-1", api(sample=True, top_p=1.01), ConfigError, "generation.top_p"),
    Case("api-top-k-0", api(sample=True, top_k=0),
         ConfigError, "generation.top_k must be from 1"),
    Case("api-top-k-negative", api(sample=True, top_k=-5), ConfigError, "generation.top_k"),
    Case("api-num-samples-0", api(sample=True, num_samples=0),
         ConfigError, "generation.num_samples"),
    Case("api-prefix-too-long-greedy", api(num_beams=1, prefixes=["abcdefgh"]),
         ValueError, "text 1: the prefix has 8 tokens, more than the output limit of 7"),
    Case("api-prefix-too-long-beam", api(num_beams=3, prefixes=["abcdefgh"]),
         ValueError, "more than the output limit of 7"),
    Case("api-prefix-too-long-sample", api(sample=True, prefixes=["abcdefgh"]),
         ValueError, "more than the output limit of 7"),
    Case("api-prefix-count", api(prefixes=["a", "b"]), ValueError, "2 prefixes for 1 texts"),
    Case("api-ensemble-vocab-size", other_size,
         VocabularyMismatch, "different tgt vocabulary from model 1 (12 tokens against 13)"),
    Case("api-ensemble-vocab-ids", ensemble_of(lambda v: v[::-1]),
         VocabularyMismatch, "id 4 is 'a' against 'h'"),
    Case("api-ensemble-empty", lambda tmp_path: Ensemble([]), ValueError, "at least one model"),
    Case("api-ensemble-rnn-and-transformer",
         lambda tmp_path: load_ensemble([RNN, TRANSFORMER]).translate(["abc"]), None, None),
    Case("cli-temperature-0", ["translate", RNN, "--sample", "--temperature", "0"],
         None, "'--temperature': 0.0 is not in the range 0.0<x<=100.0"),
    Case("cli-temperature-negative", ["translate", RNN, "--sample", "--temperature", "-2"],
         None, "--temperature"),
    Case("cli-top-p-0", ["translate", RNN, "--sample", "--top-p", "0"],
         None, "'--top-p': 0.0 is not in the range 0.0<x<=1.0"),
    Case("cli-top-p-above-1", ["translate", RNN, "--sample", "--top-p", "1.5"], None, "--top-p"),
    Case("cli-top-k-0", ["translate", RNN, "--sample", "--top-k", "0"],
         None, "'--top-k': 0 is not in the range 1<=x<=2147483648"),
    # a flag's bounds are its setting's (config/search.py), refused in the flag's name, where
    # they were "field generation.temperature must be ..." once the model had loaded
    Case("cli-temperature-over-limit", ["translate", RNN, "--sample", "--temperature", "200"],
         None, "'--temperature': 200.0 is not in the range 0.0<x<=100.0"),
    Case("cli-beam-over-limit", ["translate", RNN, "--beam", "300"],
         None, "'--beam': 300 is not in the range 1<=x<=256"),
    Case("cli-setting-without-sample", ["translate", RNN, "--top-k", "3"],
         None, "--top-k shapes the distribution --sample draws from; add --sample"),
    Case("cli-prefix-too-long", ["translate", RNN, "--prefix", "tsv", "input", "ab\tabcdefgh\n"],
         None, "text 1: the prefix has 8 tokens, more than the output limit of 7"),
    Case("cli-prefix-tsv-without-tab", ["translate", RNN, "--prefix", "tsv", "input", "abc\n"],
         None, "--prefix tsv: input line 1 has 0 tabs"),
    Case("cli-prefix-file-short",
         ["translate", RNN, "--prefix", "PREFIXES", "input", "abc\nabc\n"],
         None, "has 1 lines for 2 input lines"),
    Case("cli-ensemble-other-vocabulary", ["translate", RNN, "OTHER", "input", "abc\n"],
         None, "model 2 of the ensemble has a different tgt vocabulary"),
    Case("cli-ensemble-ctranslate2", ["translate", RNN, TRANSFORMER, "--engine", "ctranslate2"],
         None, "an ensemble runs on the torch engine"),
    Case("cli-sample-on-ctranslate2", ["translate", RNN, "--sample", "--engine", "ctranslate2"],
         None, "--sample and --prefix need the torch engine"),
    Case("cli-ensemble-rnn-and-transformer",
         ["translate", RNN, TRANSFORMER, "input", "abcdef\n"], None, None),
    # issue 26: a prefix the output could not start with as typed (its vocabulary: a-h)
    Case("api-prefix-emoji", api(prefixes=["a\U0001f600"]),
         PrefixError, "text 1: the prefix holds '😀' (U+1F600 GRINNING FACE), which the target"),
    Case("api-prefix-nul", api(prefixes=["a\0b"]), PrefixError, "the prefix holds U+0000"),
    Case("api-prefix-rtl-override", api(num_beams=3, prefixes=["\u202eab"]),
         PrefixError, "the prefix holds U+202E RIGHT-TO-LEFT OVERRIDE"),
    Case("api-prefix-combining-mark", api(sample=True, prefixes=["e\u0301"]),
         PrefixError, "the prefix holds U+0301 COMBINING ACUTE ACCENT"),
    Case("api-prefix-special-token", api(prefixes=["<unk>"]),
         PrefixError, "the prefix holds '<' (U+003C LESS-THAN SIGN), 'u' (U+0075"),
    Case("api-prefix-only-unknown", api(prefixes=["zz"]),
         PrefixError, "the prefix holds 'z' (U+007A LATIN SMALL LETTER Z)"),
    Case("api-prefix-trace", lambda tmp_path: build_trace(
             Translator.load(MODELS / "rnn"), "ab", prefix="x"),
         PrefixError, "the prefix holds 'x'"),
    Case("api-prefix-target-token", other_target(JOINT, "<2de>ab"),
         PrefixError, "text 1: the prefix starts with <2de>, a target token"),
    Case("api-prefix-normalised", normalising("\ufb01"),
         PrefixError, "the prefix is written 'fi' by the target tokenizer (it normalises"),
    Case("api-prefix-trailing-space", normalising("fi "),
         PrefixError, "the prefix is written 'fi' by the target tokenizer"),
    Case("cli-prefix-emoji", ["translate", RNN, "--prefix", "tsv", "input", "ab\tab\n"
                              "ab\t\U0001f600\n"],
         None, "text 2: the prefix holds '😀' (U+1F600 GRINNING FACE)"),
    Case("cli-prefix-rtl-override",
         ["translate", RNN, "--prefix", "tsv", "input", "ab\t\u202ea\n"],
         None, "text 1: the prefix holds U+202E RIGHT-TO-LEFT OVERRIDE"),
    # issue 27: diverse beam search's settings (search/diverse.py)
    Case("api-num-beam-groups-not-dividing", api(num_beams=4, num_beam_groups=3),
         ConfigError, "generation.num_beam_groups must divide generation.num_beams (each group"),
    Case("api-num-beam-groups-0", api(num_beam_groups=0),
         ConfigError, "generation.num_beam_groups must be from 1 to 256, got 0"),
    Case("api-diversity-penalty-negative", api(num_beams=2, num_beam_groups=2,
                                               diversity_penalty=-1.0),
         ConfigError, "generation.diversity_penalty must be from 0.0 to 100.0, got -1.0"),
    Case("api-diversity-penalty-nan", api(diversity_penalty=float("nan")),
         ConfigError, "generation.diversity_penalty must be from 0.0 to 100.0, got nan"),
    Case("api-num-beam-groups-of-one-beam", api(num_beams=4, n_best=4, num_beam_groups=4),
         None, None),
    Case("cli-num-beam-groups-not-dividing",
         ["translate", RNN, "--beam", "4", "--num-beam-groups", "3", "input", "ab\n"],
         None, "generation.num_beam_groups must divide generation.num_beams"),
    Case("cli-num-beam-groups-0", ["translate", RNN, "--num-beam-groups", "0"],
         None, "'--num-beam-groups': 0 is not in the range 1<=x<=256"),
    Case("cli-diversity-penalty-negative", ["translate", RNN, "--diversity-penalty", "-1"],
         None, "'--diversity-penalty': -1.0 is not in the range 0.0<=x<=100.0"),
    Case("cli-num-beam-groups-on-ctranslate2",
         ["translate", RNN, "--beam", "4", "--num-beam-groups", "2", "--engine", "ctranslate2"],
         None, "--sample and --num-beam-groups and --prefix need the torch engine"),
]  # fmt: skip


def run_cli(args: list[str], tmp_path):
    """Run `heedful` with ARGS; "input" X is stdin, PREFIXES a one-line file, OTHER a model of
    another vocabulary."""
    args, stdin = list(args), ""
    if "input" in args:
        at = args.index("input")
        stdin, args = args[at + 1], args[:at] + args[at + 2 :]
    if "PREFIXES" in args:
        (tmp_path / "prefixes.txt").write_text("fe\n")
        args[args.index("PREFIXES")] = str(tmp_path / "prefixes.txt")
    if "OTHER" in args:
        args[args.index("OTHER")] = other_vocabulary(tmp_path, lambda v: v[::-1])
    return CliRunner().invoke(main, args, input=stdin, prog_name="heedful")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_decoding_settings(case, tmp_path):
    if isinstance(case.run, list):
        result = run_cli(case.run, tmp_path)
        if case.message is None:
            assert result.exit_code == 0, result.output
            assert result.output.strip()
            return
        assert result.exit_code in (1, 2), (result.exit_code, result.output)
        assert isinstance(result.exception, SystemExit), result.exception  # no traceback
        assert case.message in result.output, result.output
        return
    if case.error is None:
        case.run(tmp_path)
        return
    with pytest.raises(case.error) as caught:
        case.run(tmp_path)
    assert case.message in str(caught.value)
