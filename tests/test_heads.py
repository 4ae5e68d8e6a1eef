"""Heads you can switch off (issue 28, item 4; heads.py): a masked head's output is zero before
W_O (checked against a float64 multi-head attention written here from the weights), nothing is
left changed after the block, the translation and its score move, and `heedful heads` ranks the
heads and draws them; its inputs get a hostile table."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from heedful.cli import main
from heedful.inference.heads import (
    Head,
    HeadError,
    check_heads,
    importance,
    masked,
    parse_heads,
    reference_loss,
)
from heedful.inference.translator import Translator

GOLDEN = Path(__file__).parent / "golden" / "models"
SOURCES = ["abcd", "hgfe", "abca", "cab", "bad", "fedcba"]


@pytest.fixture(scope="module")
def translator():
    return Translator.load(GOLDEN / "transformer")


def reference_mha(attention, x: np.ndarray, memory: np.ndarray, off: set[int]) -> np.ndarray:
    """MultiHead = Concat(ξ_i head_i) W_O in float64 from the module's weights, ξ_i = 0 for
    the heads in `off`; head_i = softmax(Q_i K_iᵀ / √d_k) V_i."""

    def linear(part, inputs):
        weight = part.weight.detach().double().numpy()
        bias = 0 if part.bias is None else part.bias.detach().double().numpy()
        return inputs @ weight.T + bias

    parts, heads = attention.parts(), []
    q, k, v = linear(parts["q"], x), linear(parts["k"], memory), linear(parts["v"], memory)
    for h in range(attention.num_heads):
        cols = attention.head_columns(h)
        scores = q[:, cols["q"]] @ k[:, cols["k"]].T / np.sqrt(attention.d_head)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        heads.append(0 * weights @ v[:, cols["v"]] if h in off else weights @ v[:, cols["v"]])
    return linear(parts["o"], np.concatenate(heads, axis=-1))


@pytest.mark.parametrize("off", [{0}, {1}, {0, 1}])
def test_a_masked_heads_output_is_zero_before_w_o(translator, off):
    model = translator.model
    attention = model.decoder.layers[1].cross_attn
    rng = np.random.default_rng(0)
    x, memory = rng.normal(size=(5, attention.d_model)), rng.normal(size=(7, attention.d_model))
    spec = [Head("cross", 1, h) for h in off] if off != {0, 1} else [Head("cross", 1)]
    with masked(model, spec):
        got = attention(*(torch.tensor(a, dtype=torch.float32)[None] for a in (x, memory, memory)))
    expected = reference_mha(attention, x, memory, off)
    np.testing.assert_allclose(got[0][0].detach().double().numpy(), expected, atol=1e-5)
    if off == {0, 1}:  # a whole layer: only W_O's bias is left
        bias = attention.parts("o")["o"].bias.detach().double().numpy()
        np.testing.assert_allclose(expected, np.broadcast_to(bias, expected.shape), atol=1e-12)


def test_the_translation_and_its_score_change_and_nothing_is_left_changed(translator):
    before = translator.translate(SOURCES, num_beams=1)
    with masked(translator.model, [Head("cross", 1), Head("cross", 0)]):
        during = translator.translate(SOURCES, num_beams=1)
    after = translator.translate(SOURCES, num_beams=1)
    assert [t.score for t in after] == [t.score for t in before]  # the hooks are gone
    assert [t.text for t in after] == [t.text for t in before]
    moved = [abs(a.score - b.score) for a, b in zip(during, before)]
    assert max(moved) > 1e-3  # without cross-attention the decoder no longer reads the source
    assert not any(m._forward_pre_hooks for m in translator.model.modules())


def test_importance_masks_each_head_alone(translator):
    refs = [s[::-1] for s in SOURCES]
    result = importance(translator, SOURCES, refs)
    assert result.loss == pytest.approx(reference_loss(translator, SOURCES, refs), rel=1e-12)
    for kind, grid in result.masked_loss.items():
        assert grid.shape == (2, 2)
        for (layer, head), value in np.ndenumerate(grid):
            with masked(translator.model, [Head(kind, layer, head)]):
                assert value == pytest.approx(reference_loss(translator, SOURCES, refs), rel=1e-12)
    ranked = result.ranked()
    assert len(ranked) == 12 and len({str(h) for h, *_ in ranked}) == 12
    keys = [(-bleu, -loss) for _, bleu, loss in ranked]
    assert keys == sorted(keys)


def test_the_command_prints_the_ranking_and_draws_the_grid(translator, tmp_path):
    (tmp_path / "s.txt").write_text("\n".join(SOURCES) + "\n")
    (tmp_path / "r.txt").write_text("\n".join(s[::-1] for s in SOURCES) + "\n")
    picture = tmp_path / "heads.png"
    command = ["heads", str(GOLDEN / "transformer"), "--src", str(tmp_path / "s.txt")]
    refs = ["--ref", str(tmp_path / "r.txt"), "--png", str(picture)]
    result = CliRunner().invoke(main, [*command, *refs])
    assert result.exit_code == 0, result.output
    assert "6 sentences from" in result.output and "unmasked: BLEU" in result.output
    for title in ("encoder self-attention", "decoder self-attention", "cross-attention"):
        assert f"{title}: BLEU lost when the head is masked" in result.output
    data = picture.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk's size
    assert width > height > 100


HOSTILE_SPECS = [  # (spec, the error's words)
    ("", "give the heads as kind:layer[:head]"),
    ("   ", "give the heads as kind:layer[:head]"),
    ("cross", "a head is kind:layer[:head]"),
    ("attention:1:1", "kind one of encoder, decoder, cross"),
    ("cross:1:1:1", "a head is kind:layer[:head]"),
    ("cross:0:1", "counted from 1, got '0'"),
    ("cross:1:-1", "counted from 1, got '-1'"),
    ("cross:x", "counted from 1, got 'x'"),
    ("cross:١", "counted from 1"),  # an Arabic-Indic digit: isdigit() but not ours
    ("cross:1:" + "9" * 400, "counted from 1"),
    ("cross:1," * 5000, "characters, over"),
    ("cross:1,,cross:2", "a head is kind:layer[:head]"),
]


@pytest.mark.parametrize("spec, words", HOSTILE_SPECS)
def test_hostile_head_lists_are_named(spec, words):
    with pytest.raises(HeadError, match=None) as error:
        parse_heads(spec)
    assert words in str(error.value) and len(str(error.value)) < 200


HOSTILE_HEADS = [  # heads the golden model (2 layers of 2 heads) does not have
    (Head("cross", 2, 0), "cross:3:1: the cross attention has layers 1 to 2"),
    (Head("encoder", 0, 2), "encoder:1:3: layer 1 has heads 1 to 2"),
    (Head("decoder", -1, 0), "the decoder attention has layers 1 to 2"),
    (Head("other", 0, 0), "the kind must be one of"),
]


@pytest.mark.parametrize("head, words", HOSTILE_HEADS)
def test_heads_the_model_lacks_are_named_before_anything_is_masked(translator, head, words):
    with pytest.raises(HeadError, match=None) as error:
        with masked(translator.model, [Head("cross", 0, 0), head]):
            pass  # pragma: no cover
    assert words in str(error.value)
    assert not any(m._forward_pre_hooks for m in translator.model.modules())
    assert check_heads(translator.model, [Head("cross", 1, 1)]) == [Head("cross", 1, 1)]


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


HOSTILE_FILES = [  # (src bytes, ref bytes, the one line's words)
    (b"", b"", "holds no sentences"),
    (b"abc\nbad\n", b"cba\n", "--src"),  # line counts differ: read_parallel names both
    (b"abc\n", b"\xff\xfe\n", "--ref"),  # not UTF-8
    (b"a" * 2_000 + b"\n", b"a\n", "--max-line-bytes"),  # over the 1,000 bytes given
]


@pytest.mark.parametrize("src, ref, words", HOSTILE_FILES)
def test_hostile_files_are_one_line(tmp_path, src, ref, words):
    command = ["heads", str(GOLDEN / "transformer"), "--src", write(tmp_path / "s", src)]
    refs = ["--ref", write(tmp_path / "r", ref), "--max-line-bytes", "1000"]
    result = CliRunner().invoke(main, [*command, *refs])
    assert result.exit_code in (1, 2) and words in result.output, result.output
    assert "Traceback" not in result.output


def test_an_rnn_is_refused_by_name(tmp_path):
    command = ["heads", str(GOLDEN / "rnn"), "--src", write(tmp_path / "s", b"abc\n")]
    result = CliRunner().invoke(main, [*command, "--ref", write(tmp_path / "r", b"cba\n")])
    assert result.exit_code == 1 and "heads are masked in heedful's own Transformers, not in" in (
        result.output
    ), result.output
