"""Static pictures: files in each format, labels that never overlap, and clear refusals."""

import itertools

import numpy as np
import pytest
import torch

from heedful.checkpoint.model_dir import GenerationConfig
from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig
from heedful.data.tokenizers import BOS_ID, PAD_ID, UNK_ID, CharTokenizer
from heedful.inference.translator import Translator
from heedful.models.build import build_model
from heedful.visualize.heatmap import _trace_figure, plot_alignment, plot_trace
from heedful.visualize.trace import Trace, TraceHypothesis, build_trace

TOKENIZER = CharTokenizer("abcdefghij -")
MODELS = {
    "transformer": ModelConfig(
        d_model=16,
        num_heads=2,
        d_ff=32,
        dropout=0.0,
        encoder=TextEncoderConfig(layers=2),
        decoder=DecoderConfig(layers=3),
    ),
    "rnn-bahdanau": ModelConfig(arch="rnn", d_model=8, hidden_size=16, dropout=0.0),
    "rnn-none": ModelConfig(
        arch="rnn", d_model=8, hidden_size=16, dropout=0.0, decoder=DecoderConfig(attention="none")
    ),
}


def model_trace(name: str, sentence: str = "abc defg") -> Trace:
    torch.manual_seed(0)
    model = build_model(MODELS[name], len(TOKENIZER), len(TOKENIZER))
    generator = model.decoder.generator
    with torch.no_grad():  # letters for outputs, not special tokens
        generator.bias[[PAD_ID, BOS_ID, UNK_ID]] -= 10.0
    generation = GenerationConfig(num_beams=1, max_len_ratio=0, max_len_offset=6)
    return build_trace(Translator(model, TOKENIZER, TOKENIZER, generation), sentence)


def synthetic_trace(s: int, t: int, layers: int = 2, heads: int = 2, word="▁word") -> Trace:
    """A Transformer-shaped trace of random distributions over s source and t output tokens."""
    rng = np.random.default_rng(0)

    def dist(*shape):
        x = rng.random(shape)
        return (x / x.sum(-1, keepdims=True)).tolist()

    src = [f"{word}{i}" for i in range(s)]
    out = [f"{word}{i}" for i in range(t - 1)] + ["</s>"]
    hyp = TraceHypothesis(
        " ".join(out), out, -1.0, True, dist(t, layers, heads, s), dist(layers, heads, t, t),
        [[{"token": "x", "prob": 1.0}]] * t, None,
    )  # fmt: skip
    model = {"arch": "transformer", "attention": "multi-head", "encoder_layers": layers,
             "decoder_layers": layers, "heads": heads}  # fmt: skip
    search = {"num_beams": 1, "length_penalty": 1.0}
    return Trace(model, " ".join(src), src, search, dist(layers, heads, s, s), [hyp])


@pytest.mark.parametrize("suffix, magic", [(".png", b"PNG"), (".svg", b"<svg"), (".pdf", b"%PDF")])
def test_each_format_is_written(tmp_path, suffix, magic):
    path = plot_trace(model_trace("transformer"), tmp_path / "out" / f"cross{suffix}")
    data = path.read_bytes()
    assert magic in data[:400]


def test_every_kind_layer_head_and_grid(tmp_path, png_size):
    trace = model_trace("transformer")
    calls = [
        {},
        {"layer": 1, "head": 2},
        {"layer": 2},  # mean of the heads
        {"grid": True},
        {"grid": True, "layer": 3},
        {"kind": "encoder", "layer": 2, "head": 1},
        {"kind": "encoder", "grid": True},
        {"kind": "decoder"},
        {"kind": "decoder", "grid": True},
    ]
    for i, kwargs in enumerate(calls):
        png_size(plot_trace(trace, tmp_path / f"{i}.png", **kwargs))
    png_size(plot_trace(model_trace("rnn-bahdanau"), tmp_path / "rnn.png"))
    png_size(plot_trace(model_trace("rnn-bahdanau"), tmp_path / "rnn-grid.png", grid=True))


def test_grid_is_bigger_than_one_head(tmp_path, png_size):
    trace = synthetic_trace(8, 6, layers=3, heads=4)
    one = png_size(plot_trace(trace, tmp_path / "one.png", layer=1, head=1))
    grid = png_size(plot_trace(trace, tmp_path / "grid.png", grid=True))
    assert grid[0] > one[0] and grid[1] > one[1]


def test_image_grows_with_the_number_of_tokens(tmp_path, png_size):
    sizes = [
        png_size(plot_trace(synthetic_trace(n, n), tmp_path / f"{n}.png")) for n in (5, 30, 90)
    ]
    for (w1, h1), (w2, h2) in itertools.pairwise(sizes):
        assert w2 > w1 and h2 > h1


def _overlaps(boxes) -> list:
    return [(a, b) for a, b in itertools.pairwise(boxes) if a.overlaps(b)]


@pytest.mark.parametrize("n, grid", [(12, False), (120, False), (40, True), (90, True)])
def test_tick_labels_never_overlap(n, grid):
    """Long sentences of long tokens: neighbouring labels (source labels turned 90°) are apart,
    also in a wide grid, where only every other label fits (90 tokens, 8 heads)."""
    trace = synthetic_trace(n, n, layers=2, heads=8, word="▁international")
    fig = _trace_figure(trace, grid=grid, layer=1 if grid else None)
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes[:-1]:  # the last axes is the colour bar
        for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
            shown = [t for t in labels if t.get_text() and t.get_visible()]
            assert not _overlaps([t.get_window_extent(renderer) for t in shown])
    source_labels = fig.axes[-2].get_xticklabels()  # bottom-right panel: source labels
    assert source_labels and all(t.get_rotation() == 90 for t in source_labels)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_single_characters_stay_upright():
    fig = _trace_figure(model_trace("transformer"))
    assert {t.get_rotation() for t in fig.axes[0].get_xticklabels()} == {0.0}
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_refusals_name_what_is_wrong(tmp_path):
    transformer, rnn, rnn_none = (model_trace(n) for n in MODELS)
    cases = [
        (transformer, {"layer": 7}, "layer 7 out of range: the model has 3 decoder layers"),
        (transformer, {"layer": 0}, r"layer 0 out of range: .* \(numbered from 1\)"),
        (transformer, {"kind": "encoder", "layer": 3}, "the model has 2 encoder layers"),
        (transformer, {"head": 3}, "head 3 out of range: the model has 2 heads"),
        (transformer, {"kind": "self"}, "unknown attention kind 'self'"),
        (transformer, {"grid": True, "head": 1}, "grid=True draws every head"),
        (transformer, {"hypothesis": 1}, "hypothesis 1 out of range: the trace has 1"),
        (rnn, {"layer": 2}, "layer 2 out of range: the model has 1 decoder layer$"),
        (rnn, {"kind": "encoder"}, "RNN model has no encoder self-attention"),
        (rnn, {"kind": "decoder"}, "RNN model has no decoder self-attention"),
        (rnn_none, {}, "no attention .*'none'.*no cross attention"),
    ]
    for trace, kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            plot_trace(trace, tmp_path / "x.png", **kwargs)
    for name in ("x.jpg", "x", "x.PNG.txt"):
        with pytest.raises(ValueError, match="image format .* is not supported"):
            plot_trace(transformer, tmp_path / name)
    assert not list(tmp_path.iterdir())  # nothing written on a refusal


def test_plot_alignment_still_draws_one_matrix(tmp_path, png_size):
    path = plot_alignment(np.full((2, 3), 1 / 3), list("abc"), ["x", "</s>"], tmp_path / "a.png")
    png_size(path)
    with pytest.raises(ValueError, match="do not match"):
        plot_alignment(np.ones((2, 2)), list("abc"), ["x", "</s>"], tmp_path / "b.png")


def test_an_rnn_grid_says_it_has_one_attention():
    """An RNN's one distribution per step is not "layer 1 / head 1" of a grid."""
    import matplotlib.pyplot as plt

    fig = _trace_figure(model_trace("rnn-bahdanau"), grid=True)
    panel = fig.axes[0]
    assert "one attention" in panel.get_title()
    texts = [panel.get_title(), panel.get_ylabel(), fig._suptitle.get_text()]
    assert not any("head 1" in t or "layer 1" in t for t in texts)
    plt.close(fig)


def test_decoder_self_attention_keys_are_what_each_position_reads():
    """Position t reads y_{t-1} (<s> first) and predicts y_t: keys are labelled by what they
    read, as `heedful explain` labels them; queries by both (issue 28)."""
    trace = model_trace("transformer")
    tokens = trace.hypotheses[0].tokens
    fig = _trace_figure(trace, kind="decoder", layer=1, head=1)
    ax = fig.axes[0]
    keys = [t.get_text() for t in ax.get_xticklabels()]
    queries = [t.get_text() for t in ax.get_yticklabels()]
    assert keys == ["<s>", *tokens[:-1]]
    assert queries == [f"{r}→{t}" for r, t in zip(["<s>", *tokens[:-1]], tokens)]
    import matplotlib.pyplot as plt

    plt.close(fig)
