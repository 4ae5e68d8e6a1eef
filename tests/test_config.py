"""Configs: YAML in, typed dataclasses out; every mistake names its key."""

import pytest

from heedful.config import Config, ConfigError, load_config, save_config


def test_defaults_load_and_round_trip(tmp_path):
    config = load_config()
    assert config == Config()
    path = tmp_path / "c.yaml"
    save_config(config, path)
    assert load_config(path) == config


def test_yaml_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  arch: rnn\n  attention: luong-dot\ntrain:\n  lr: 0.003\n")
    config = load_config(
        path, ["train.max_steps=200", "train.betas=[0.9, 0.99]", "model.dropout=0"]
    )
    assert config.model.arch == "rnn" and config.model.decoder.attention == "luong-dot"
    assert config.train.lr == 0.003 and config.train.max_steps == 200
    assert config.train.betas == (0.9, 0.99) and config.model.dropout == 0.0


@pytest.mark.parametrize(
    "text, message",
    [
        ("model:\n  d_modle: 64\n", "unknown config key model.d_modle"),
        ("trian:\n  lr: 1\n", "unknown config key trian"),
        ("train:\n  max_steps: many\n", "train.max_steps: expected int"),
        ("train:\n  lr: '0.1'\n", "train.lr: expected float"),
        ("model:\n  bidirectional: 1\n", "model.bidirectional: expected true or false"),
        ("train:\n  betas: [0.9]\n", "train.betas: expected a list of 2"),
        ("model:\n  arch: lstm\n", "model.arch: 'lstm' is not one of"),
        ("train:\n  schedule: cosine\n", "train.schedule: 'cosine' is not one of"),
        ("train:\n  schedule: 3\n", "train.schedule: expected str"),
        # train.output_products: the output layer's products in float32 or bfloat16
        ("train:\n  output_products: float16\n", "train.output_products: 'float16' is not one"),
        ("train:\n  output_products: ''\n", "train.output_products: '' is not one of"),
        ("train:\n  output_products: true\n", "train.output_products: expected str"),
        ("train:\n  output_products: 16\n", "train.output_products: expected str"),
        ("train:\n  output_products: [auto]\n", "train.output_products: expected str"),
        ("train:\n  output_products: AUTO\n", "train.output_products: 'AUTO' is not one of"),
        ("model:\n  d_model: 30\n  num_heads: 4\n", "divisible by model.num_heads"),
        ("train:\n  label_smoothing: 1.5\n", "train.label_smoothing"),
        ("train:\n  lr: .inf\n", "train.lr: must be a finite number"),
        ("model:\n  dropout: .nan\n", "model.dropout: must be a finite number"),
        ("train:\n  patience: 0\n", "train.patience: must be > 0"),
        # train.pieces (training/streams.py): a count of pieces, at least 1
        ("train:\n  pieces: 0\n", "train.pieces: must be > 0"),
        ("train:\n  pieces: -2\n", "train.pieces: must be > 0"),
        ("train:\n  pieces: two\n", "train.pieces: expected int"),
        ("train:\n  pieces: 1.5\n", "train.pieces: expected int"),
        ("train:\n  pieces: .nan\n", "train.pieces: expected int"),
        ("train:\n  pieces: [2]\n", "train.pieces: expected int"),
        ("train:\n  betas: [0.9, 1.0]\n", r"train.betas\[1\]: must be in \[0, 1\)"),
        ("- a\n- b\n", "top level must be a mapping"),
        # the sections (issue 27, item 6): their keys are named by their nested paths
        ("model:\n  decoder:\n    layers: 0\n", "model.decoder.layers: must be > 0"),
        ("model:\n  decoder:\n    atention: none\n", "unknown config key model.decoder.atention"),
        (
            "model:\n  encoder:\n    bidirectional: 1\n",
            "model.encoder.bidirectional: expected true",
        ),
        ("model:\n  encoder:\n    kind: lstm\n", "model.encoder.kind: 'lstm' is not one of text"),
        ("model:\n  encoder: [text]\n", "model.encoder: expected str, got list"),
        ("model:\n  decoder: bahdanau\n", "model.decoder: expected a mapping, got str"),
        ("data:\n  source:\n    tokenizer: 3\n", "data.source.tokenizer: expected str"),
        ("data:\n  source:\n    tokeniser: a\n", "unknown config key data.source.tokeniser"),
        ("data:\n  source: a.src\n", "data.source: expected a mapping, got str"),
        # a key given both ways at once, in one file
        (
            "model:\n  attention: none\n  decoder:\n    attention: bahdanau\n",
            "model.attention and model.decoder.attention: one key given twice",
        ),
        (
            "data:\n  src_tokenizer: a\n  source:\n    tokenizer: b\n",
            "data.src_tokenizer and data.source.tokenizer: one key given twice",
        ),
    ],
)
def test_bad_configs_name_the_key(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as error:
        load_config(path)
    assert str(path) in str(error.value)


def test_bad_overrides_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="unknown config key train.max_stepz"):
        load_config(None, ["train.max_stepz=3"])
    with pytest.raises(ConfigError, match="section.key=value"):
        load_config(None, ["train.max_steps"])
    with pytest.raises(ConfigError, match="train.max_steps: the value '\\[1' is not valid YAML"):
        load_config(None, ["train.max_steps=[1"])
    assert load_config(None, ["train.lr=1e-4"]).train.lr == 1e-4  # YAML 1.1 says: a string
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    "text, key",
    [
        ("model:\n  arch: rnn\n  tie_embeddings: true\n", "model.tie_embeddings"),
        ("model:\n  arch: rnn\n  num_heads: 8\n", "model.num_heads"),
        ("model:\n  hidden_size: 64\n", "model.hidden_size"),
        ("model:\n  attention: luong-dot\n", "model.attention"),
        (
            "model:\n  arch: rnn\n  decoder:\n    tie_embeddings: true\n",
            "model.decoder.tie_embeddings",
        ),
        ("model:\n  decoder:\n    input_feeding: true\n", "model.decoder.input_feeding"),
        ("model:\n  arch: rnn\n  encoder:\n    layers: 6\n", "model.encoder.layers"),
        (
            "model:\n  arch: rnn\n  encoder:\n    share_embeddings: true\n",
            "model.encoder.share_embeddings",
        ),
        ("model:\n  encoder:\n    bidirectional: false\n", "model.encoder.bidirectional"),
    ],
)
def test_a_key_the_family_does_not_read_is_an_error(tmp_path, text, key):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"{key}: only arch"):
        load_config(path)


def test_saved_config_lists_only_the_family_keys_and_loads_back(tmp_path):
    from heedful.config import save_config

    config = load_config(None, ["model.arch=rnn", "model.hidden_size=64", "generation.num_beams=3"])
    save_config(config, tmp_path / "c.yaml")
    text = (tmp_path / "c.yaml").read_text()
    assert "hidden_size: 64" in text and "num_heads" not in text
    assert load_config(tmp_path / "c.yaml") == config
    # a file that lists the other family's keys at their defaults (as older runs wrote) loads
    assert load_config(None, ["model.arch=rnn", "model.num_heads=4"]).model.arch == "rnn"


@pytest.mark.parametrize(
    "override, field",
    [("generation.num_beams=0", "num_beams"), ("generation.n_best=6", "n_best"),
     ("generation.length_penalty=11", "length_penalty"), ("generation.max_len_offset=-1",
     "max_len_offset")],
)  # fmt: skip
def test_generation_section_is_range_checked(override, field):
    with pytest.raises(ConfigError, match=f"generation.{field} must be from"):
        load_config(None, [override])


def test_max_output_length_matches_the_batched_limit():
    import torch

    from heedful.config import GenerationConfig
    from heedful.search.decoding import max_output_lengths

    for ratio, offset in [(1.5, 10), (0.3, 0), (1.1, 3), (0.0, 7), (2.7, 1)]:
        g = GenerationConfig(max_len_ratio=ratio, max_len_offset=offset)
        src = torch.ones(40, 41, dtype=torch.long).tril()  # lengths 1..40, the rest is padding
        batched = max_output_lengths((src != 0).sum(1), ratio, offset).tolist()
        assert batched == [g.max_output_length(n) for n in range(1, 41)]


# ---------------------------------------------------------------------------------------------
# The sections and today's flat keys (issue 27, item 6; config/flat.py)
# ---------------------------------------------------------------------------------------------

FLAT = """\
data:
  src_tokenizer: t.src
  tgt_tokenizer: t.src  # the pointer-generator's one vocabulary
model:
  arch: rnn
  hidden_size: 64
  encoder_layers: 2
  bidirectional: false
  attention: luong-local-p
  local_window: 4
  input_feeding: true
  copy: true
"""
NESTED = """\
data:
  tgt_tokenizer: t.src  # the pointer-generator's one vocabulary
  source:
    tokenizer: t.src
model:
  arch: rnn
  hidden_size: 64
  encoder:
    kind: text
    bidirectional: false
  decoder:
    attention: luong-local-p
    local_window: 4
    input_feeding: true
    copy: true
"""


def test_flat_and_nested_configs_read_the_same(tmp_path):
    (tmp_path / "flat.yaml").write_text(FLAT)
    (tmp_path / "nested.yaml").write_text(NESTED)
    flat, nested = load_config(tmp_path / "flat.yaml"), load_config(tmp_path / "nested.yaml")
    assert flat == nested
    assert nested.model.encoder.bidirectional is False and nested.model.decoder.local_window == 4
    assert nested.data.source.tokenizer == "t.src"


def test_an_override_beats_the_file_whichever_way_either_spells_the_key(tmp_path):
    (tmp_path / "flat.yaml").write_text(FLAT)
    (tmp_path / "nested.yaml").write_text(NESTED)
    for name in ("flat.yaml", "nested.yaml"):
        for key in ("model.attention", "model.decoder.attention"):
            config = load_config(tmp_path / name, [f"{key}=bahdanau", "model.local_window=10"])
            assert config.model.decoder.attention == "bahdanau", (name, key)
        target = "data.tgt_tokenizer=u.src"
        source = load_config(tmp_path / name, ["data.source.tokenizer=u.src", target]).data.source
        assert source.tokenizer == "u.src"
        flat = load_config(tmp_path / name, ["data.src_tokenizer=u.src", target]).data.source
        assert flat == source
    with pytest.raises(ConfigError, match="model.copy and model.decoder.copy: one key given"):
        load_config(tmp_path / "nested.yaml", ["model.copy=false", "model.decoder.copy=false"])


def test_the_two_flat_layer_keys_of_the_encoder_each_belong_to_their_kinds():
    """model.encoder.layers was encoder_layers (text, vit) and cnn_layers (cnn); the one a kind
    does not read is dropped at its default (files written before the sections list both), as
    it always was, and an error otherwise."""
    image = ["model.encoder=cnn", "model.image_size=32", "model.cnn_blocks=2"]
    both = [*image, "model.encoder_layers=2", "model.cnn_layers=1"]
    assert load_config(None, both).model.encoder.layers == 1
    text = load_config(None, ["model.encoder_layers=3", "model.cnn_layers=0"]).model.encoder
    assert text.layers == 3 and text.kind == "text"
    with pytest.raises(ConfigError, match="model.encoder_layers: only model.encoder text / vit"):
        load_config(None, [*image, "model.encoder_layers=3"])
    with pytest.raises(ConfigError, match="model.cnn_layers: only model.encoder cnn uses it"):
        load_config(None, ["model.cnn_layers=1"])


def test_errors_name_keys_as_the_config_spells_them(tmp_path):
    """A config written flat hears flat names, one written with sections nested ones, and a
    key given flat beside sections is named as given."""
    with pytest.raises(ConfigError) as flat:
        load_config(None, ["model.arch=rnn", "model.attention=luong-magic"])
    assert str(flat.value).startswith("model.attention: 'luong-magic' is not one of")
    with pytest.raises(ConfigError) as nested:
        load_config(None, ["model.arch=rnn", "model.decoder.attention=luong-magic"])
    assert str(nested.value).startswith("model.decoder.attention: 'luong-magic' is not one of")
    with pytest.raises(ConfigError) as mixed:  # a section given, and one key flat
        load_config(None, ["model.encoder.kind=text", "model.attention=luong-magic"])
    assert str(mixed.value).startswith("model.attention: 'luong-magic' is not one of")
    with pytest.raises(ConfigError) as pair:  # the key not given is named in the file's way
        load_config(None, ["data.tgt_tokenizer=t.tgt"])
    assert str(pair.value) == "data.src_tokenizer and data.tgt_tokenizer: give both or neither"
    (tmp_path / "c.yaml").write_text(NESTED.replace("    tokenizer: t.src\n", "    images: x\n"))
    with pytest.raises(ConfigError, match=r"data.source.tokenizer and data.tgt_tokenizer"):
        load_config(tmp_path / "c.yaml")


def test_a_saved_config_is_nested_and_an_earlier_flat_one_still_loads(tmp_path):
    import yaml

    (tmp_path / "flat.yaml").write_text(FLAT)
    config = load_config(tmp_path / "flat.yaml")
    save_config(config, tmp_path / "saved.yaml")
    saved = yaml.safe_load((tmp_path / "saved.yaml").read_text())
    assert saved["model"]["encoder"] == {"kind": "text", "bidirectional": False}
    assert saved["model"]["decoder"] == {
        "attention": "luong-local-p",
        "local_window": 4,
        "input_feeding": True,
        "copy": True,
    }
    assert saved["data"]["source"] == {"tokenizer": "t.src", "images": None, "feature_cache": None}
    assert not {"attention", "copy", "bidirectional"} & set(saved["model"])
    assert "src_tokenizer" not in saved["data"]
    assert load_config(tmp_path / "saved.yaml") == config
