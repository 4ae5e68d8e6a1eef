"""A search's step without the modules' calls (models/transformer_step.py: StepPlan) computes
what the modules compute, step after step, for every kind of Transformer decoder and every
way of multiplying, and gives way to the modules wherever they would compute or record
something else (autograd, training, autocast, hooks, int8 layers, attention weights)."""

from dataclasses import replace

import pytest
import torch
from test_products import packing  # noqa: F401  (a fixture: each library's packed products)

from heedful.inference.quantize import quantize_int8
from heedful.models import transformer_step
from heedful.models.encoder_decoder import EncoderDecoder
from heedful.models.transformer import transformer
from heedful.search.beam import beam_search
from heedful.search.decoding import greedy_search

BOS, EOS = 1, 2
KINDS = {  # the decoders compared: the settings of each
    "post-norm": {},
    "pre-norm": {"norm_first": True},
    "grouped-query": {"num_kv_heads": 2},
    "multi-query, pre-norm": {"num_kv_heads": 1, "norm_first": True},
    "tied, learned positions": {"tie_embeddings": True, "positional": "learned"},
}


def model(seed: int = 0, **settings) -> EncoderDecoder:
    torch.manual_seed(seed)
    sizes = dict(d_model=32, num_heads=4, d_ff=64, encoder_layers=2, decoder_layers=3)
    encoder, decoder = transformer(23, 23, **(sizes | settings))
    return EncoderDecoder(encoder, decoder).eval()


def sources(padded: bool, seed: int = 0) -> torch.Tensor:
    """(3, 7) source ids; with padding (id 0) after the first row's end where `padded`."""
    src = torch.randint(3, 23, (3, 7), generator=torch.Generator().manual_seed(seed))
    if padded:
        src[1, 4:], src[2, 2:] = 0, 0
    return src


def steps(m: EncoderDecoder, src: torch.Tensor, plan: bool, beams: int = 1, count: int = 6):
    """The log-probabilities (R, count, V) of `count` steps over fixed tokens, R = B · beams
    rows (beam search's tiling), through the StepPlan or through the modules."""
    rows = torch.arange(src.size(0)).repeat_interleave(beams)
    tokens = torch.randint(3, 23, (len(rows), count), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        memory = m.encode(src)
        state = m.init_state(memory).index_select(rows)
        assert state.plan is not None  # nothing here keeps the plan away
        state = state if plan else replace(state, plan=None, src_mask=memory.mask)
        out = []
        for t in range(count):
            log_probs, state, weights = m.decode_step(memory, state, tokens[:, t], False)
            assert weights is None
            out.append(log_probs)
    return torch.stack(out, 1)


@pytest.mark.parametrize("beams", [1, 3])
@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_the_plans_steps_equal_the_modules_and_a_float64_reference(kind, padded, beams):
    m, src = model(**KINDS[kind]), sources(padded)
    planned, modules = steps(m, src, True, beams), steps(m, src, False, beams)
    m64 = m.double()  # the same weights in float64 (in place: m is m64 from here on)
    reference = steps(m64, src, False, beams)  # the modules in float64
    torch.testing.assert_close(planned, modules, rtol=0, atol=1e-5)
    torch.testing.assert_close(planned.double(), reference, rtol=0, atol=1e-4)
    torch.testing.assert_close(steps(m64, src, True, beams), reference, rtol=0, atol=1e-12)


def encoded(m: EncoderDecoder, src: torch.Tensor, plan: bool) -> torch.Tensor:
    """The encoder's states (B, S, D) of src, through its EncoderPlan or through the modules."""
    with torch.no_grad():
        if plan:
            assert transformer_step.EncoderPlan.of(m.encoder) is not None  # nothing keeps it away
            return m.encode(src).states
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(transformer_step.EncoderPlan, "of", classmethod(lambda cls, e: None))
            return m.encode(src).states


@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_the_encoders_plan_equals_the_modules_and_a_float64_reference(kind, padded):
    m, src = model(**KINDS[kind]), sources(padded)
    planned, modules = encoded(m, src, True), encoded(m, src, False)
    m64 = m.double()
    reference = encoded(m64, src, False)
    torch.testing.assert_close(planned, modules, rtol=0, atol=1e-5)
    torch.testing.assert_close(planned.double(), reference, rtol=0, atol=1e-4)
    torch.testing.assert_close(encoded(m64, src, True), reference, rtol=0, atol=1e-12)


def test_the_plan_takes_each_librarys_packed_products(packing):  # noqa: F811
    m, src = model(norm_first=True), sources(True)
    planned, modules = steps(m, src, True, beams=2), steps(m, src, False, beams=2)
    reference = steps(m.double(), src, False, beams=2)
    torch.testing.assert_close(planned, modules, rtol=0, atol=1e-5)
    torch.testing.assert_close(planned.double(), reference, rtol=0, atol=1e-4)


def without_plans(monkeypatch):
    monkeypatch.setattr(transformer_step.StepPlan, "of", classmethod(lambda cls, decoder: None))


@pytest.mark.parametrize("kind", KINDS)
def test_searches_find_what_they_find_through_the_modules(kind, monkeypatch):
    """The same operators in the same order on padded sources (whose masks both paths keep),
    so the same choices, not merely close log-probabilities."""
    m, src = model(**KINDS[kind]), sources(True, seed=2)
    found = greedy_search(m, src, BOS, EOS), beam_search(m, src, BOS, EOS, beam_size=3, n_best=2)
    without_plans(monkeypatch)
    want = greedy_search(m, src, BOS, EOS), beam_search(m, src, BOS, EOS, beam_size=3, n_best=2)
    got = [found[0], *found[1]]
    for hyps, expected in zip([[h] for h in got[0]] + got[1:], [[h] for h in want[0]] + want[1]):
        assert [h.tokens for h in hyps] == [h.tokens for h in expected]
        for h, e in zip(hyps, expected):
            assert h.score == pytest.approx(e.score, abs=1e-4)


def test_greedy_search_of_a_float64_model_scores_its_own_tokens():
    """Greedy's totals take a float64 model's log-probabilities (into its float32 scores) as
    they take a float32 model's: each score is the sum teacher forcing gives its tokens."""
    m, src = model(), sources(True)
    m64 = m.double()
    with torch.no_grad():
        for row, hyp in enumerate(greedy_search(m64, src, BOS, EOS)):
            tokens = torch.tensor([[BOS, *hyp.produced(EOS)]])
            logits = m64(src[row : row + 1], tokens[:, :-1]).logits  # (1, T, V)
            want = logits.log_softmax(-1).gather(2, tokens[:, 1:].unsqueeze(2)).sum()
            assert hyp.score == pytest.approx(float(want), abs=1e-5)


def test_a_search_state_keeps_its_plan_through_reordering_and_the_mask_only_with_padding():
    m = model()
    with torch.no_grad():
        for padded in (True, False):
            state = m.init_state(m.encode(sources(padded)))
            assert (state.src_mask is None) is not padded  # no padding: plain cross-attention
            dropped = state.index_select(torch.tensor([2, 2, 0]))  # rows dropped and repeated
            reordered = state.index_select(torch.tensor([1, 0, 2]), same_sources=True)
            assert dropped.plan is state.plan and reordered.plan is state.plan


HOOKS = {  # a hook that counts its calls, registered on one layer or on every module
    "a hook on a layer": lambda m, calls: m.decoder.layers[1].feed_forward.register_forward_hook(
        lambda *_: calls.append(1)
    ),
    "a global hook": lambda m, calls: torch.nn.modules.module.register_module_forward_hook(
        lambda *_: calls.append(1)
    ),
}


@pytest.mark.parametrize("name", HOOKS)
def test_hooks_on_the_encoder_keep_its_modules_and_see_the_encode(name):
    m, src, calls = model(), sources(True), []
    handle = (
        m.encoder.layers[1].feed_forward.register_forward_hook(lambda *_: calls.append(1))
        if name == "a hook on a layer"
        else HOOKS[name](m, calls)
    )
    try:
        with torch.no_grad():
            assert transformer_step.EncoderPlan.of(m.encoder) is None
            m.encode(src)
        assert calls  # the hook ran during the encode
    finally:
        handle.remove()


def test_an_encode_asked_for_attention_goes_through_the_modules():
    m, src = model(), sources(True)
    with torch.no_grad():
        planned, recorded = m.encode(src), m.encode(src, need_weights=True)
    assert planned.self_attention is None and recorded.self_attention.shape == (3, 2, 4, 7, 7)
    torch.testing.assert_close(planned.states, recorded.states, rtol=0, atol=1e-5)
    torch.testing.assert_close(planned.mask, recorded.mask, rtol=0, atol=0)


@pytest.mark.parametrize("name", HOOKS)
def test_hooks_keep_the_modules_and_see_every_step(name):
    m, src, calls = model(), sources(True), []
    handle = HOOKS[name](m, calls)
    try:
        with torch.no_grad():
            memory = m.encode(src)
            state = m.init_state(memory)
            assert state.plan is None
            calls.clear()
            m.decode_step(memory, state, torch.full((3,), BOS), need_weights=False)
        assert calls  # the hook ran during the step
    finally:
        handle.remove()


@pytest.mark.parametrize("case", ["autograd", "training", "autocast", "int8 layers"])
def test_what_the_modules_would_compute_otherwise_gets_no_plan(case):
    m, src = model(), sources(True)
    if case == "int8 layers":
        m = quantize_int8(m)
    if case == "training":
        m.train()
    grad = torch.enable_grad() if case == "autograd" else torch.no_grad()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=case == "autocast")
    with grad, autocast:
        state = m.init_state(m.encode(src))
        encoder_plan = transformer_step.EncoderPlan.of(m.encoder)
    assert state.plan is None and encoder_plan is None


def test_a_step_asked_for_attention_goes_through_the_modules():
    m, src = model(), sources(True)
    with torch.no_grad():
        memory = m.encode(src)
        state = m.init_state(memory)
        last = torch.full((3,), BOS)
        planned, _, none = m.decode_step(memory, state, last, need_weights=False)
        recorded, _, weights = m.decode_step(memory, state, last, need_weights=True)
    assert none is None and weights is not None
    assert weights.cross.shape[:3] == (3, 3, 4)  # (B, L, H, S): every layer and head
    torch.testing.assert_close(planned, recorded, rtol=0, atol=1e-5)
