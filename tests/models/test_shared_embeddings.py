"""model.encoder.share_embeddings: one token table for source, target (and, tied, the output).

Checked: the tables are one Parameter and the seed draws the rest as before; the table's
gradient is the sum of what the two tables of an unshared model with equal values get
(float64); a model directory keeps the sharing; and what cannot share is refused by name.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from heedful.config import (
    Config,
    ConfigError,
    DataConfig,
    DecoderConfig,
    ModelConfig,
    SourceConfig,
    TextEncoderConfig,
    load_config,
)
from heedful.models.build import build_model

V = 21
SHARED = ModelConfig(
    d_model=16,
    num_heads=2,
    d_ff=32,
    dropout=0.0,
    norm="pre",
    positional="learned",  # each side keeps its own positions
    max_positions=32,
    encoder=TextEncoderConfig(layers=1, share_embeddings=True),
    decoder=DecoderConfig(layers=1, tie_embeddings=True),
)
UNSHARED = replace(SHARED, encoder=TextEncoderConfig(layers=1))


def make(config: ModelConfig, dtype=torch.float32):
    torch.manual_seed(0)
    return build_model(config, V, V).to(dtype)


def loss_of(model) -> torch.Tensor:
    g = torch.Generator().manual_seed(2)
    src, tgt = torch.randint(4, V, (3, 6), generator=g), torch.randint(4, V, (3, 5), generator=g)
    src[0, 4:] = 0  # padding
    tgt_in = torch.cat([torch.ones(3, 1, dtype=torch.long), tgt[:, :-1]], dim=1)
    logits = model(src, tgt_in).logits
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten())


def test_one_table_for_both_sides_and_the_output_each_with_its_own_positions():
    model = make(SHARED)
    table = model.decoder.embed.tokens.weight
    assert model.encoder.embed.tokens.weight is table
    assert model.decoder.generator.weight is table
    assert model.encoder.embed.positions is not model.decoder.embed.positions
    unshared = make(UNSHARED)
    count = sum(p.numel() for p in model.parameters())
    assert count == sum(p.numel() for p in unshared.parameters()) - V * 16
    # the seed draws every weight as before: the shared model is the unshared one whose
    # encoder reads the decoder's table
    theirs = dict(unshared.named_parameters())
    assert torch.equal(table, theirs["decoder.embed.tokens.weight"])
    for name, p in model.named_parameters():
        assert p is table or torch.equal(p, theirs[name]), name


def test_the_shared_tables_gradient_is_the_sum_of_both_sides():
    """In float64: the unshared model with the decoder's values in the encoder's table computes
    the same loss, and its two tables' gradients add up to the shared table's."""
    shared, unshared = make(SHARED, torch.float64), make(UNSHARED, torch.float64)
    with torch.no_grad():
        unshared.encoder.embed.tokens.weight.copy_(unshared.decoder.embed.tokens.weight)
    a, b = loss_of(shared), loss_of(unshared)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=0)
    a.backward()
    b.backward()
    both = unshared.encoder.embed.tokens.weight.grad + unshared.decoder.embed.tokens.weight.grad
    assert unshared.encoder.embed.tokens.weight.grad.abs().sum() > 0  # the source side counts
    torch.testing.assert_close(shared.decoder.embed.tokens.weight.grad, both, rtol=1e-10, atol=0)


def test_a_model_directory_keeps_the_sharing(tmp_path):
    from heedful.checkpoint.model_dir import load_model_dir, save_model_dir
    from heedful.data.tokenizers import CharTokenizer

    tokenizer = CharTokenizer.train(["abcdefghijklmnopq"])
    config = replace(SHARED, max_positions=64)
    torch.manual_seed(0)
    model = build_model(config, len(tokenizer), len(tokenizer)).eval()
    with torch.no_grad():
        model.encoder.embed.tokens.weight.mul_(1.5)  # after training, not as drawn
    loaded = load_model_dir(save_model_dir(tmp_path / "m", model, config, tokenizer, tokenizer))
    assert loaded.model_config.encoder.share_embeddings
    got = loaded.model
    assert got.encoder.embed.tokens.weight is got.decoder.embed.tokens.weight
    torch.testing.assert_close(got.encoder.embed.tokens.weight, model.decoder.embed.tokens.weight)
    src, tgt_in = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 8, 9]])
    with torch.no_grad():
        torch.testing.assert_close(got(src, tgt_in).logits, model(src, tgt_in).logits)


def test_what_cannot_share_is_refused_by_name(tmp_path):
    from heedful.checkpoint.model_dir import CheckpointError, load_model_dir, save_model_dir
    from heedful.data.tokenizers import CharTokenizer

    with pytest.raises(ConfigError, match="share_embeddings needs one vocabulary.*joint_vocab"):
        Config(data=DataConfig(joint_vocab=False), model=SHARED)
    source = SourceConfig(tokenizer="a/tokenizer.src")
    given = DataConfig(tgt_tokenizer="a/tokenizer.tgt", source=source)
    with pytest.raises(ConfigError, match="name one tokenizer file as both"):
        Config(data=given, model=SHARED)
    assert Config(data=DataConfig(joint_vocab=True), model=SHARED)  # one vocabulary: fine
    with pytest.raises(ValueError, match="vocabularies of 23 and 21"):
        build_model(SHARED, 23, 21)
    with pytest.raises(ConfigError, match="share_embeddings: only arch transformer uses it"):
        load_config(None, ["model.arch=rnn", "model.encoder.share_embeddings=true"])
    # a hand-edited model directory whose two tokenizers differ would read wrong rows
    same, other = CharTokenizer("abcdef"), CharTokenizer("uvwxyz")
    torch.manual_seed(0)
    model = build_model(SHARED, len(same), len(same))
    save_model_dir(tmp_path / "bad", model, SHARED, same, other)
    with pytest.raises(CheckpointError, match="share_embeddings needs one vocabulary, but"):
        load_model_dir(tmp_path / "bad")
