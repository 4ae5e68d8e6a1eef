"""What makes decoding fast must not change what it computes: the fused Q, K, V projections,
the preallocated self-attention cache (KVCache), greedy search dropping finished sentences, and
beam search stopping once its n_best answers are certain."""

import copy
import pickle
from dataclasses import replace

import pytest
import torch
from test_decoding import RowCounter  # counts the rows each step decodes

from heedful.config import DecoderConfig, ModelConfig, ViTEncoderConfig
from heedful.layers.attention import MultiHeadAttention
from heedful.layers.products import stacked_weights
from heedful.models.build import build_model
from heedful.models.transformer_state import KVCache, TransformerState
from heedful.search.beam import beam_search
from heedful.search.decoding import greedy_search

BOS, EOS = 1, 2


def separate(mha: MultiHeadAttention, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Q, K, V of x, each from its own nn.Linear: what the fused product must equal."""
    return tuple(mha.split_heads(w(x)) for w in (mha.w_q, mha.w_k, mha.w_v))


def mha64(seed=0) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(16, 4).double()


def test_fused_projections_equal_the_separate_ones_in_float64():
    mha, x = mha64(), torch.randn(3, 5, 16, dtype=torch.float64)
    with torch.no_grad():
        fused = mha.project_qkv(x)
        kv = mha.project_kv(x, x)
        assert stacked_weights(mha, mha.parts("q", "k", "v")) is not None  # the fused path did run
    for got, want in zip([*fused, *kv], [*separate(mha, x), *separate(mha, x)[1:]]):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


@pytest.mark.parametrize("change", ["in place", "load_state_dict", "new parameter", "dtype"])
def test_fused_weights_follow_every_change_of_the_weights(change):
    mha, x = mha64(), torch.randn(2, 4, 16, dtype=torch.float64)
    with torch.no_grad():
        mha.project_qkv(x)  # builds the fused copy
        if change == "in place":  # what an optimizer step does
            mha.w_k.weight.add_(1.0)
        elif change == "load_state_dict":
            mha.load_state_dict(mha64(seed=1).state_dict())
        elif change == "new parameter":
            mha.w_v.weight = torch.nn.Parameter(torch.randn(16, 16, dtype=torch.float64))
        else:
            mha.float()
            x = x.float()
        got, want = mha.project_qkv(x), separate(mha, x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_training_through_the_stack_gives_each_weight_its_own_gradient():
    mha, x = mha64(), torch.randn(2, 4, 16, dtype=torch.float64)
    weights = torch.randn(3, 2, 4, 4, 4, dtype=torch.float64)  # a different loss per output
    q, k, v = mha.project_qkv(x)
    sum((w * out).sum() for w, out in zip(weights, (q, k, v))).backward()
    stacked = [(layer.weight.grad, layer.bias) for layer in (mha.w_q, mha.w_k, mha.w_v)]
    mha.zero_grad()
    q, k, v = separate(mha, x)
    sum((w * out).sum() for w, out in zip(weights, (q, k, v))).backward()
    for (grad, _), layer in zip(stacked, (mha.w_q, mha.w_k, mha.w_v)):
        torch.testing.assert_close(grad, layer.weight.grad, atol=1e-12, rtol=0)


def test_hooks_take_the_separate_products():
    mha, x = mha64(), torch.randn(2, 4, 16, dtype=torch.float64)
    seen = []
    mha.w_k.register_forward_hook(lambda module, inputs, output: seen.append(output))
    with torch.no_grad():
        mha.project_qkv(x)
    assert len(seen) == 1  # the viewer records K this way: the hook must still run


def test_int8_layers_are_not_fused():
    from heedful.inference.translator import quantize_int8

    torch.manual_seed(0)
    model = build_model(ModelConfig(d_model=32, num_heads=4, d_ff=64, dropout=0.0), 20, 15)
    quantized = quantize_int8(model.eval())
    attention = quantized.decoder.layers[0].self_attn
    with torch.no_grad():
        assert stacked_weights(attention, attention.parts("q", "k", "v")) is None
        hyps = greedy_search(quantized, torch.randint(4, 20, (2, 6)), BOS, EOS)
    assert len(hyps) == 2


def transformer64():
    torch.manual_seed(0)
    config = ModelConfig(
        d_model=32, num_heads=4, d_ff=64, dropout=0.0, decoder=DecoderConfig(layers=2)
    )
    return build_model(config, 20, 15).double().eval()


def teacher_forced(model, src, prefix: list[int]) -> torch.Tensor:
    """log P(next | src, prefix) from one teacher-forced pass: (V,)."""
    logits = model(src, torch.tensor([prefix])).logits  # (1, T, V)
    return logits[0, -1].log_softmax(-1)


def steps(model, memory, state, tokens: list[int]):
    out = []
    for token in tokens:
        log_probs, state, _ = model.decode_step(memory, state, torch.tensor([token]))
        out.append(log_probs[0])
    return out, state


def test_a_cache_grown_past_its_capacity_gives_teacher_forcings_numbers():
    model, src = transformer64(), torch.randint(4, 20, (1, 7))
    tokens = [BOS, *torch.randint(3, 15, (39,)).tolist()]  # 40 steps: the buffers grow twice
    with torch.no_grad():
        memory = model.encode(src)
        found, state = steps(model, memory, model.init_state(memory), tokens)
        assert isinstance(state.self_kv[0], KVCache) and state.self_kv[0][0].shape[2] == 40
        assert_rows_and_heads_flatten_in_place(state.self_kv[0])
        for t in (0, 15, 16, 17, 39):
            want = teacher_forced(model, src, tokens[: t + 1])
            torch.testing.assert_close(found[t], want, atol=1e-10, rtol=0)


def test_two_steps_from_one_state_do_not_disturb_each_other():
    """A cache written in place must still hold what it was made with when a second step
    branches from the same state (the second copies rather than overwrite)."""
    model, src = transformer64(), torch.randint(4, 20, (1, 5))
    with torch.no_grad():
        memory = model.encode(src)
        _, state = steps(model, memory, model.init_state(memory), [BOS, 5, 6])
        before = [t.clone() for kv in state.self_kv for t in kv]
        (a,), a_state = steps(model, memory, state, [7])
        (b,), _ = steps(model, memory, state, [8])
        (a2,), _ = steps(model, memory, a_state, [9])
        after = [t for kv in state.self_kv for t in kv]
    for old, new in zip(before, after):
        assert torch.equal(old, new)
    torch.testing.assert_close(a, teacher_forced(model, src, [BOS, 5, 6, 7]), atol=1e-10, rtol=0)
    torch.testing.assert_close(b, teacher_forced(model, src, [BOS, 5, 6, 8]), atol=1e-10, rtol=0)
    want = teacher_forced(model, src, [BOS, 5, 6, 7, 9])
    torch.testing.assert_close(a2, want, atol=1e-10, rtol=0)


def test_a_state_reorders_copies_and_pickles():
    model, src = transformer64(), torch.randint(4, 20, (3, 5))
    with torch.no_grad():
        memory = model.encode(src)
        state = model.init_state(memory)
        for token in (BOS, 5, 6):
            _, state, _ = model.decode_step(memory, state, torch.full((3,), token))
        index = torch.tensor([2, 0, 0])
        picked = state.index_select(index)
        for (k, v), (pk, pv) in zip(state.self_kv, picked.self_kv):
            assert torch.equal(pk, k[index]) and torch.equal(pv, v[index])
        for clone in (copy.deepcopy(state), pickle.loads(pickle.dumps(state))):
            assert isinstance(clone, TransformerState) and isinstance(clone.self_kv[0], KVCache)
            a, _, _ = model.decode_step(memory, clone, torch.full((3,), 7))
            b, _, _ = model.decode_step(memory, state, torch.full((3,), 7))
            torch.testing.assert_close(a, b, atol=0, rtol=0)


def assert_rows_and_heads_flatten_in_place(cache: KVCache) -> None:
    """K and V (B, H_kv, t, D/H) flatten to (B·H_kv, t, D/H) as views, as the one-query
    attention reads them: a copy there would cost more than the attention at 64 rows."""
    for x in cache:
        assert x.flatten(0, 1).data_ptr() == x.data_ptr()  # a copy would be memory of its own


def test_a_reordered_cache_keeps_room_for_one_more_position_only():
    """Beam search reorders every step, so room past the next position would never be used:
    the doubled capacity there was half of beam 5's peak memory. Appending into that room
    still gives teacher forcing's numbers."""
    model, src = transformer64(), torch.randint(4, 20, (2, 5))
    tokens = [BOS, *torch.randint(3, 15, (19,)).tolist()]  # past a first capacity of 16
    with torch.no_grad():
        memory = model.encode(src)
        state, swap, sources = model.init_state(memory), torch.tensor([1, 0]), torch.arange(2)
        for t, token in enumerate(tokens):
            if t:  # the rows trade places, as beams do
                state, memory = state.index_select(swap), memory.index_select(swap)
                sources = sources[swap]
                for cache in state.self_kv if t > 1 else ():  # a cache from step 2 on
                    assert cache.length == t and cache.buffer.size(3) == t + 1
                    assert_rows_and_heads_flatten_in_place(cache)
            log_probs, state, _ = model.decode_step(memory, state, torch.full((2,), token))
    for row, source in enumerate(sources.tolist()):
        want = teacher_forced(model, src[source : source + 1], tokens)
        torch.testing.assert_close(log_probs[row], want, atol=1e-10, rtol=0)


def per_row(state: TransformerState) -> TransformerState:
    """The state with its sources' keys, values and mask copied for every decode row, as
    before rows shared them: what sharing must compute the same as."""
    rows = torch.arange(state.cross_kv[0][0].size(0) * state.beams) // state.beams
    cross = [(k[rows], v[rows]) for k, v in state.cross_kv]
    return replace(state, cross_kv=cross, src_mask=state.src_mask[rows], beams=1)


def assert_same_steps(model, memory, shared: TransformerState, tokens: torch.Tensor):
    """One step from `shared` and from its per-row copy: the same log-probs and weights."""
    a, a_state, a_w = model.decode_step(memory, shared, tokens, need_weights=True)
    b, _, b_w = model.decode_step(memory, per_row(shared), tokens, need_weights=True)
    for x, y in ((a, b), (a_w.cross, b_w.cross), (a_w.decoder, b_w.decoder)):
        torch.testing.assert_close(x, y, atol=1e-12, rtol=0)
    return a_state


def beam_rows(k: int, *sentences: int) -> torch.Tensor:
    """The decode rows of these sentences' k beams, in this order."""
    return torch.tensor([b * k + i for b in sentences for i in range(k)])


def test_the_beams_of_a_sentence_share_its_keys_and_values():
    model, src, k = transformer64(), torch.randint(4, 20, (3, 6)), 4
    src[1, 3:] = 0  # a padded source: its mask is shared too
    with torch.no_grad():
        memory = model.encode(src)
        state = model.init_state(memory).index_select(torch.arange(3).repeat_interleave(k))
        assert state.beams == k and state.cross_kv[0][0].size(0) == 3  # one copy per sentence
        memory = memory.index_select(torch.arange(3).repeat_interleave(k))
        for _ in range(3):
            state = assert_same_steps(model, memory, state, torch.randint(3, 15, (3 * k,)))
            mixed = torch.stack([torch.randperm(k) + b * k for b in range(3)]).view(-1)
            state = state.index_select(mixed, same_sources=True)  # beams move within a sentence
        # sentence 1 leaves, 2 and 0 swap, 0's beams reversed
        dropped = state.index_select(torch.cat([beam_rows(k, 2), beam_rows(k, 0).flip(0)]))
        assert dropped.beams == k and dropped.cross_kv[0][0].size(0) == 2
        memory = memory.index_select(beam_rows(k, 2, 0))
        assert_same_steps(model, memory, dropped, torch.full((2 * k,), 5))
        uneven = state.index_select(torch.tensor([0, 1, 1, 2, 9]))  # runs of 2, 2 and 1 rows
        assert uneven.beams == 1 and uneven.cross_kv[0][0].size(0) == 5
        want = per_row(state).index_select(torch.tensor([0, 1, 1, 2, 9]))
        for (ka, va), (kb, vb) in zip(uneven.cross_kv, want.cross_kv):
            assert torch.equal(ka, kb) and torch.equal(va, vb)


def varied_lengths_model():
    """A random model whose greedy outputs end at many different steps."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(d_model=32, num_heads=4, d_ff=64, dropout=0.0), 20, 15)
    with torch.no_grad():
        model.decoder.generator.weight *= 6.0
        model.decoder.generator.bias[EOS] += 2.0
    return model.eval()


def test_greedy_drops_finished_sentences_and_gives_each_sentence_its_own_answer():
    model, src = RowCounter(varied_lengths_model()), torch.randint(4, 20, (16, 8))
    batch = greedy_search(model, src, BOS, EOS, max_len_ratio=0.0, max_len_offset=12)
    assert model.rows[0] == 16 and model.rows[-1] < 16  # finished rows left the batch
    lengths = {len(h.tokens) for h in batch}
    assert len(lengths) > 3, lengths
    for i, hyp in enumerate(batch):
        [alone] = greedy_search(model.model, src[i : i + 1], BOS, EOS, 0.0, 12)
        assert (alone.tokens, alone.finished) == (hyp.tokens, hyp.finished)
        assert abs(alone.score - hyp.score) < 1e-4


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_beam_stops_once_its_n_best_are_certain_with_the_same_answers(alpha):
    model, src = varied_lengths_model(), torch.randint(4, 20, (8, 8))
    settings = {"beam_size": 4, "length_penalty": alpha, "max_len_ratio": 0.0,
                "max_len_offset": 12}  # fmt: skip
    rows = {}
    found = {}
    for n_best in (1, 2, 4):
        counter = RowCounter(model)
        found[n_best] = beam_search(counter, src, BOS, EOS, n_best=n_best, **settings)
        rows[n_best] = sum(counter.rows)
    for n_best in (1, 2):
        for few, full in zip(found[n_best], found[4]):
            assert [(h.tokens, h.finished) for h in few] == [
                (h.tokens, h.finished) for h in full[:n_best]
            ]
            for a, b in zip(few, full):
                assert abs(a.score - b.score) < 1e-5
    assert rows[1] <= rows[2] <= rows[4] and rows[1] < rows[4]


@pytest.mark.parametrize("arch", ["transformer", "vit"])
def test_a_search_after_a_fused_optimizer_step_sees_the_new_weights(arch):
    """Adam(fused=True), as training uses it, updates the weights in place without bumping
    their versions, so a stacked copy kept from an earlier search (validation) would be stale;
    each search must compute with the weights as they are when it starts."""
    from heedful.config import TrainConfig
    from heedful.training.state import make_optimizer

    torch.manual_seed(0)
    if arch == "vit":  # a ViT's encoder layers stack their Q, K, V too
        config = ModelConfig(
            d_model=32,
            num_heads=4,
            d_ff=64,
            dropout=0.0,
            encoder=ViTEncoderConfig(image_size=16, patch_size=8),
        )
        model, src = build_model(config, 4, 15), torch.randn(3, 3, 16, 16)
    else:
        model = build_model(ModelConfig(d_model=32, num_heads=4, d_ff=64, dropout=0.0), 20, 15)
        src = torch.randint(4, 20, (3, 6))
    optimizer = make_optimizer(model, TrainConfig(lr=0.05, warmup_steps=1))
    with torch.no_grad():
        greedy_search(model.eval(), src, BOS, EOS, 0.0, 6)  # caches stacked copies
    tgt = torch.randint(4, 15, (3, 5))
    model.train()(src, tgt).logits.logsumexp(-1).mean().backward()
    optimizer.step()
    fresh = copy.deepcopy(model).eval()  # no kept copies (products.py): the weights as they are
    with torch.no_grad():
        got = model.eval()(src, tgt).logits
        want = fresh(src, tgt).logits
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
