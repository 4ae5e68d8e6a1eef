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
    assert config.model.arch == "rnn" and config.model.attention == "luong-dot"
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
        ("model:\n  d_model: 30\n  num_heads: 4\n", "divisible by model.num_heads"),
        ("train:\n  label_smoothing: 1.5\n", "train.label_smoothing"),
        ("train:\n  lr: .inf\n", "train.lr: must be a finite number"),
        ("model:\n  dropout: .nan\n", "model.dropout: must be a finite number"),
        ("train:\n  patience: 0\n", "train.patience: must be > 0"),
        ("train:\n  betas: [0.9, 1.0]\n", r"train.betas\[1\]: must be in \[0, 1\)"),
        ("- a\n- b\n", "top level must be a mapping"),
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
