"""Model directories: round trip, atomic writes, averaging, and refusing pickles unexecuted."""

import pickle
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from heedful.checkpoint.model_dir import (
    CheckpointError,
    GenerationConfig,
    average_checkpoints,
    load_model_dir,
    save_model_dir,
)
from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig
from heedful.data.tokenizers import CharTokenizer
from heedful.models.build import build_model, build_skeleton

CONFIGS = [
    ModelConfig(
        d_model=16,
        num_heads=2,
        d_ff=32,
        encoder=TextEncoderConfig(layers=1),
        decoder=DecoderConfig(layers=1, tie_embeddings=True),
    ),
    ModelConfig(
        arch="rnn",
        rnn_cell="lstm",
        d_model=8,
        hidden_size=16,
        decoder=DecoderConfig(attention="luong-concat"),
    ),
]


def _save(path, config, seed=0):
    tok = CharTokenizer.train(["abcdef ghij"])
    torch.manual_seed(seed)
    model = build_model(config, len(tok), len(tok))
    save_model_dir(path, model, config, tok, tok, GenerationConfig(num_beams=3), ("en", "de"))
    return model


@pytest.mark.parametrize("config", CONFIGS)
def test_round_trip_gives_identical_weights_and_settings(tmp_path, config):
    model = _save(tmp_path / "m", config)
    loaded = load_model_dir(tmp_path / "m")
    assert loaded.model_config == config and loaded.generation.num_beams == 3
    assert (loaded.src_lang, loaded.tgt_lang) == ("en", "de")
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.model.state_dict().items()):
        assert torch.equal(a, b), name
    if config.decoder.tie_embeddings:
        assert loaded.model.decoder.generator.weight is loaded.model.decoder.embed.tokens.weight


@pytest.mark.parametrize("config", CONFIGS)
def test_the_skeleton_has_the_models_every_shape_on_the_meta_device(config):
    model, skeleton = build_model(config, 30, 30), build_skeleton(config, 30, 30)
    built = {n: t.shape for n, t in [*model.named_parameters(), *model.named_buffers()]}
    meta = {n: t.shape for n, t in [*skeleton.named_parameters(), *skeleton.named_buffers()]}
    assert meta == built
    assert all(t.is_meta for t in [*skeleton.parameters(), *skeleton.buffers()])


@pytest.mark.parametrize("config", CONFIGS)
def test_loading_a_model_directory_does_not_import_torch_dynamo(tmp_path, config):
    """Shapes checked on the meta device must not run torch's Python decompositions, whose
    first call imports torch._dynamo: 71 MiB and a second more for every command."""
    _save(tmp_path / "m", config)
    code = (
        "import sys; from heedful.checkpoint.model_dir import load_model_dir; "
        f"load_model_dir({str(tmp_path / 'm')!r}); print('torch._dynamo' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


class Boom:
    def __reduce__(self):
        return (exec, ("open('PWNED', 'w').write('x')",))


def test_a_planted_pickle_is_refused_without_running(tmp_path, monkeypatch):
    _save(tmp_path / "m", CONFIGS[0])
    (tmp_path / "m" / "model.safetensors").write_bytes(pickle.dumps({"w": Boom()}))
    torch.save({"w": torch.zeros(1)}, tmp_path / "torch.pt")  # a torch pickle fares no better
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError, match="not a valid safetensors file"):
        load_model_dir(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").write_bytes((tmp_path / "torch.pt").read_bytes())
    with pytest.raises(CheckpointError, match="refusing to load"):
        load_model_dir(tmp_path / "m")
    assert not (tmp_path / "PWNED").exists()


def test_missing_and_foreign_directories_are_named(tmp_path):
    with pytest.raises(CheckpointError, match="model directory not found: .*nowhere"):
        load_model_dir(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="missing config.json"):
        load_model_dir(tmp_path / "empty")
    (tmp_path / "empty" / "config.json").write_text('{"format": "something-else"}')
    with pytest.raises(CheckpointError, match="not a heedful model config"):
        load_model_dir(tmp_path / "empty")


def test_overwriting_a_model_directory_is_atomic(tmp_path, monkeypatch):
    _save(tmp_path / "m", CONFIGS[0], seed=0)
    before = load_model_dir(tmp_path / "m").model.state_dict()

    def full(self, path):  # the disk fills up after the weights, before the tokenizers
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(CharTokenizer, "save", full)
    with pytest.raises(OSError, match="No space"):
        _save(tmp_path / "m", CONFIGS[0], seed=1)
    after = load_model_dir(tmp_path / "m").model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_average_is_the_mean_of_the_weights(tmp_path):
    a, b = _save(tmp_path / "a", CONFIGS[1], 0), _save(tmp_path / "b", CONFIGS[1], 1)
    average_checkpoints([tmp_path / "a", tmp_path / "b"], tmp_path / "avg")
    avg = load_model_dir(tmp_path / "avg").model.state_dict()
    for name, value in a.state_dict().items():
        torch.testing.assert_close(avg[name], (value + b.state_dict()[name]) / 2)
    _save(tmp_path / "c", CONFIGS[0])
    with pytest.raises(CheckpointError, match="model config differs"):
        average_checkpoints([tmp_path / "a", tmp_path / "c"], tmp_path / "bad")


def _rename(path, rename) -> dict:
    """Rewrite a weights file with every tensor's name passed through `rename`."""
    from safetensors.torch import load_file, save_file

    tensors = {rename(name): t for name, t in load_file(str(path)).items()}
    save_file(tensors, str(path))
    return tensors


def _earlier(name: str) -> str:
    """The name a tensor of a text Transformer had before issue 27 (checkpoint/names.py)."""
    from heedful.checkpoint.names import TEXT_TRANSFORMER

    for old, new in TEXT_TRANSFORMER.items():
        if name.startswith(new):
            return old + name.removeprefix(new)
    return name


@pytest.mark.parametrize("tie", [True, False])
def test_weights_under_the_earlier_names_load_as_they_were(tmp_path, tie):
    tied = replace(CONFIGS[0].decoder, tie_embeddings=tie)
    config = replace(CONFIGS[0], decoder=tied, norm="pre")
    model = _save(tmp_path / "m", config)
    written = _rename(tmp_path / "m" / "model.safetensors", _earlier)
    assert {"src_embed.tokens.weight", "encoder_norm.weight", "generator.bias"} <= set(written)
    assert ("tgt_embed.tokens.weight" in written) + ("generator.weight" in written) == 2 - tie
    loaded = load_model_dir(tmp_path / "m").model.state_dict()
    assert loaded.keys() == model.state_dict().keys()
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded[name], tensor), name


def test_a_tensor_under_its_earlier_and_its_current_name_is_refused(tmp_path):
    _save(tmp_path / "m", CONFIGS[0])
    path = tmp_path / "m" / "model.safetensors"
    _rename(path, _earlier)
    both = _rename(path, lambda name: name)
    both["encoder.embed.tokens.weight"] = both["src_embed.tokens.weight"].clone()
    from safetensors.torch import save_file

    save_file(both, str(path))
    with pytest.raises(CheckpointError) as error:
        load_model_dir(tmp_path / "m")
    message = str(error.value)
    assert str(path) in message and "encoder.embed.tokens.weight twice" in message
    assert "src_embed.tokens.weight" in message


@pytest.mark.parametrize("rename", [_earlier, lambda name: name], ids=["earlier", "current"])
def test_a_tensor_of_no_known_name_is_refused_naming_it(tmp_path, rename):
    _save(tmp_path / "m", CONFIGS[0])
    path = tmp_path / "m" / "model.safetensors"
    _rename(
        path, lambda name: "decoder_block.0.w" if name.endswith("generator.bias") else rename(name)
    )
    with pytest.raises(
        CheckpointError,
        match=r"missing \['decoder.generator.bias'\], unexpected \['decoder_block.0.w'\]",
    ):
        load_model_dir(tmp_path / "m")
