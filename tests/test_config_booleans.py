"""YAML 1.1 reads the bare words no, yes, on and off as booleans, so `src_lang: no` (Norwegian)
arrives as False: the error names the key and says to quote the code, wherever a language code
is read from YAML (data.src_lang, data.tgt_lang, data.corpora[i].source/target, --set)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from heedful.cli import main
from heedful.config import ConfigError, load_config

HINT = 'got false (YAML reads no/yes/on/off as booleans: quote it, "no")'

CASES = {
    "src_lang": ("data:\n  src_lang: no\n", "data.src_lang"),
    "tgt_lang-off": ("data:\n  tgt_lang: off\n", "data.tgt_lang"),
    "corpora-source": (
        "data:\n  corpora:\n    - {source: no, target: en, train_tsv: a.tsv, valid_tsv: b.tsv}\n",
        "data.corpora[0].source",
    ),
}


@pytest.mark.parametrize("text, key", CASES.values(), ids=CASES)
def test_a_boolean_language_code_says_to_quote_it(text, key, tmp_path):
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path / "c.yaml")
    assert f"{key}: expected str, {HINT}" in str(raised.value)


def test_yes_and_on_say_so_too():
    with pytest.raises(ConfigError, match=r'data.src_lang: .*got true .*quote it, "yes"'):
        load_config(None, ["data.src_lang=yes"])


def test_train_says_it_in_one_line(tmp_path):
    (tmp_path / "c.yaml").write_text("data:\n  src_lang: no\n")
    result = CliRunner().invoke(main, ["train", str(tmp_path / "c.yaml")])
    assert result.exit_code == 1 and HINT in result.output and "Traceback" not in result.output
    (tmp_path / "c.yaml").write_text('data:\n  src_lang: "no"\n')  # quoted, as it says
    assert load_config(tmp_path / "c.yaml").data.src_lang == "no"
