"""The pointer-generator (See et al. 2017, model.copy): its mixture against a float64
reference, step-by-step decoding against teacher forcing, and the errors of a bad setup."""

import pytest
import torch

from heedful.config import (
    Config,
    ConfigError,
    DataConfig,
    DecoderConfig,
    ModelConfig,
    SourceConfig,
)
from heedful.models.build import build_model
from heedful.models.pointer import copy_distribution, pointer_mixture

V = 19  # one vocabulary for both sides

VARIANTS = {
    "bahdanau": ModelConfig(
        arch="rnn", d_model=16, hidden_size=32, dropout=0.0, decoder=DecoderConfig(copy=True)
    ),
    "luong-general-lstm-feeding": ModelConfig(
        arch="rnn",
        d_model=16,
        hidden_size=32,
        rnn_cell="lstm",
        dropout=0.0,
        decoder=DecoderConfig(attention="luong-general", input_feeding=True, copy=True),
    ),
    "luong-local-p": ModelConfig(
        arch="rnn",
        d_model=16,
        hidden_size=32,
        dropout=0.0,
        decoder=DecoderConfig(attention="luong-local-p", local_window=2, copy=True),
    ),
}


def batch(seed=1, b=3, s=7, t=5):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (b, s), generator=g)
    src[0, s - 2 :] = 0  # padding
    src[1, 1] = src[1, 4]  # a token at two source positions: its copy weights add up
    return src, torch.randint(4, V, (b, t), generator=g)


def make(name):
    torch.manual_seed(0)
    return build_model(VARIANTS[name], V, V).eval()


def test_mixture_equals_a_float64_reference():
    """eq. 9 written out with loops in float64: P(w) = p_gen P_vocab(w) + (1 − p_gen) Σ a(s)."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, V, generator=g, dtype=torch.float64)
    p_gen = torch.rand(2, 3, 1, generator=g, dtype=torch.float64)
    weights = torch.rand(2, 3, 5, generator=g, dtype=torch.float64).softmax(-1)
    src = torch.tensor([[4, 7, 4, 9, 0], [5, 5, 5, 6, 8]])
    expected = torch.zeros(2, 3, V, dtype=torch.float64)
    for b in range(2):
        for t in range(3):
            vocab = logits[b, t].exp() / logits[b, t].exp().sum()
            for w in range(V):
                copied = sum(weights[b, t, s] for s in range(5) if src[b, s] == w)
                expected[b, t, w] = p_gen[b, t, 0] * vocab[w] + (1 - p_gen[b, t, 0]) * copied
    got = pointer_mixture(logits, p_gen, weights, src)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got.exp(), expected, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(got.exp().sum(-1), torch.ones(2, 3, dtype=torch.float64))
    copy = copy_distribution(weights, src, V)
    assert copy[1, 0, 5] == weights[1, 0, :3].sum()  # three positions hold token 5


def test_the_extremes_of_p_gen():
    """p_gen = 1 is the plain softmax; p_gen = 0 only copies (other tokens get the floor)."""
    logits = torch.randn(1, 1, V, dtype=torch.float64)
    weights = torch.tensor([[[0.25, 0.75]]], dtype=torch.float64)
    src = torch.tensor([[6, 9]])
    ones = torch.ones(1, 1, 1, dtype=torch.float64)
    generate = pointer_mixture(logits, ones, weights, src)
    torch.testing.assert_close(generate, logits.log_softmax(-1))
    copy = pointer_mixture(logits, 0 * ones, weights, src).exp()[0, 0]
    assert copy[6] == pytest.approx(0.25) and copy[9] == pytest.approx(0.75)
    assert copy.sum() == pytest.approx(1.0) and torch.isfinite(copy.log()).all()


@pytest.mark.parametrize("name", VARIANTS)
def test_decode_step_equals_teacher_forcing(name):
    """decode_step, step by step, gives the mixture's distributions, the attention and p_gen of
    one teacher-forced pass, as tests/models/test_models.py checks for every model."""
    model = make(name)
    src, tgt = batch()
    with torch.no_grad():
        full = model(src, tgt, need_weights=True)
        memory = model.encode(src)
        state = model.init_state(memory)
        steps, weights = [], []
        for t in range(tgt.size(1)):
            log_probs, state, step = model.decode_step(memory, state, tgt[:, t])
            steps.append(log_probs)
            weights.append(step.cross)
    torch.testing.assert_close(
        torch.stack(steps, 1), full.logits.log_softmax(-1), atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(torch.stack(weights, 3), full.attention.cross, atol=1e-5, rtol=1e-4)
    p_gen = full.attention.p_gen  # (B, T)
    assert p_gen.shape == tgt.shape and ((p_gen > 0) & (p_gen < 1)).all()


def test_forward_is_the_mixture_of_its_own_parts():
    """The teacher-forced output is eq. 9 of the model's own P_vocab, p_gen and attention."""
    model = make("bahdanau")
    src, tgt = batch()
    with torch.no_grad():
        out = model(src, tgt, need_weights=True)
        model.decoder.copy_gate = None  # the same decoder without copy: P_vocab's logits
        vocab_logits = model(src, tgt).logits
    maps = out.attention
    expected = pointer_mixture(vocab_logits, maps.p_gen[..., None], maps.cross[:, 0, 0], src)
    torch.testing.assert_close(out.logits, expected)
    assert torch.isfinite(out.logits).all()
    torch.testing.assert_close(out.logits.exp().sum(-1), torch.ones(tgt.shape))


def test_a_copy_task_trains_through_the_gate():
    """Gradients reach p_gen's weights through the mixture (no NaN from log 0), and a copy
    task's loss falls to a fifth in 60 steps."""
    torch.manual_seed(0)
    model = build_model(VARIANTS["bahdanau"], V, V).train()
    g = torch.Generator().manual_seed(3)
    src = torch.randint(4, V, (16, 5), generator=g)
    tgt_in = torch.cat([torch.ones(16, 1, dtype=torch.long), src[:, :-1]], dim=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(60):
        loss = torch.nn.functional.cross_entropy(model(src, tgt_in).logits.flatten(0, 1),
                                                 src.flatten())  # fmt: skip
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 5, (losses[0], losses[-1])
    assert all(p.grad is not None for p in model.decoder.copy_gate.parameters())


def test_a_setup_that_cannot_copy_is_named():
    with pytest.raises(ConfigError, match="model.decoder.copy: the pointer-generator copies"):
        ModelConfig(arch="rnn", decoder=DecoderConfig(attention="none", copy=True))
    with pytest.raises(ConfigError, match="model.decoder.copy needs one vocabulary.*joint_voc"):
        Config(
            data=DataConfig(joint_vocab=False),
            model=ModelConfig(arch="rnn", decoder=DecoderConfig(copy=True)),
        )
    source = SourceConfig(tokenizer="a/tokenizer.src")
    given = DataConfig(tgt_tokenizer="a/tokenizer.tgt", source=source)
    with pytest.raises(ConfigError, match="name one tokenizer file as both"):
        Config(data=given, model=ModelConfig(arch="rnn", decoder=DecoderConfig(copy=True)))
    with pytest.raises(ValueError, match="vocabularies of 23 and 19"):
        build_model(VARIANTS["bahdanau"], 23, 19)
    assert ModelConfig(arch="rnn").used()["decoder"]["copy"] is False  # what it reads, listed


def test_a_model_directory_whose_sides_differ_is_refused(tmp_path):
    """Hand-edited: two tokenizers of one size but other tokens would copy wrong words."""
    from heedful.checkpoint.model_dir import CheckpointError, load_model_dir, save_model_dir
    from heedful.data.tokenizers import CharTokenizer

    config = ModelConfig(arch="rnn", d_model=8, hidden_size=8, decoder=DecoderConfig(copy=True))
    same, other = CharTokenizer("abcdef"), CharTokenizer("uvwxyz")
    model = build_model(config, len(same), len(same))
    assert load_model_dir(save_model_dir(tmp_path / "ok", model, config, same, same)).model
    save_model_dir(tmp_path / "bad", model, config, same, other)
    with pytest.raises(CheckpointError, match="model.decoder.copy needs one vocabulary, but"):
        load_model_dir(tmp_path / "bad")
