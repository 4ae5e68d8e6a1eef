"""attention.py against float64 references written here, gradcheck, and the mask invariants.

Every reference below is the paper's formula in float64 (plain loops or einsum over the module's
own parameters), never a call back into heedful. Shapes: B batch, T query length, S key length,
D d_model, H heads.
"""

from __future__ import annotations

import itertools
import math
import zlib

import pytest
import torch
from torch import nn
from torch.func import functional_call

from heedful.layers import attention
from heedful.layers.attention import (
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)
from heedful.layers.rnn_attention import AdditiveAttention, LuongAttention

B, D, H = 3, 32, 4
MASK_KINDS = ("none", "padding", "causal", "padding&causal", "empty_row")
LUONG_CASES = [  # (kind, query_size, key_size, hidden_size)
    ("dot", 6, 6, None),
    ("general", 5, 7, None),
    ("concat", 5, 7, 9),
    ("concat", 5, 7, None),
]


@pytest.fixture(autouse=True)
def seed(request):
    """Fresh random inputs per test (and per parametrization), reproducible run to run."""
    torch.manual_seed(zlib.crc32(request.node.name.encode()))


# ---------------------------------------------------------------------------------------------
# References and helpers: float64, loops over the formula, nothing from heedful.
# ---------------------------------------------------------------------------------------------


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max|a - b| / max|b|, in float64."""
    actual, expected = actual.double(), expected.double()
    return ((actual - expected).abs().max() / expected.abs().max()).item()


def ref_masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Row by row: softmax over the allowed keys only; a row with none allowed is all zeros."""
    scores = scores.double()
    allowed_all = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask
    allowed_all = torch.broadcast_to(allowed_all, scores.shape)
    weights = torch.zeros_like(scores)
    for idx in itertools.product(*map(range, scores.shape[:-1])):
        row, allowed = scores[idx], allowed_all[idx]
        if not allowed.any():
            continue
        exp = torch.exp(row[allowed] - row[allowed].max())
        weights[idx][allowed] = exp / exp.sum()
    return weights


def ref_sdpa(q, k, v, mask):
    """softmax(QKᵀ / √d_k) · V in float64 (Vaswani et al. 2017, eq. 1)."""
    q, k, v = q.double(), k.double(), v.double()
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.size(-1))
    weights = ref_masked_softmax(scores, mask)
    return torch.einsum("...qk,...kv->...qv", weights, v), weights


def ref_mha(mha: MultiHeadAttention, query, keys, values, mask):
    """Per-head attention in float64 from the module's own W_Q, W_K, W_V, W_O (§3.2.2)."""

    def project(linear, x):
        return x.double() @ linear.weight.double().T + (
            0 if linear.bias is None else linear.bias.double()
        )

    q, k, v = project(mha.w_q, query), project(mha.w_k, keys), project(mha.w_v, values)
    b, t, d = q.shape
    s, d_head = k.size(1), d // mha.num_heads
    full_mask = None if mask is None else torch.broadcast_to(mask, (b, t, s))
    heads, head_weights = [], []
    for h in range(mha.num_heads):
        cols = slice(h * d_head, (h + 1) * d_head)
        out, weights = ref_sdpa(q[..., cols], k[..., cols], v[..., cols], full_mask)
        heads.append(out)
        head_weights.append(weights)
    concat = torch.cat(heads, dim=-1)  # (B, T, D)
    return project(mha.w_o, concat), torch.stack(head_weights, dim=1)  # (B, T, D), (B, H, T, S)


def ref_additive(attn: AdditiveAttention, query, keys, values, mask):
    """Bahdanau et al. 2014, eq. 6: e_ij = vᵀ tanh(W_q q_i + W_k k_j), one pair at a time."""
    w_q, w_k = attn.w_q.weight.double(), attn.w_k.weight.double()
    v = attn.v.weight.double()[0]
    query, keys = query.double(), keys.double()
    b, t, s = query.size(0), query.size(1), keys.size(1)
    scores = torch.zeros(b, t, s, dtype=torch.float64)
    for n, i, j in itertools.product(range(b), range(t), range(s)):
        scores[n, i, j] = v @ torch.tanh(w_q @ query[n, i] + w_k @ keys[n, j])
    weights = ref_masked_softmax(scores, mask)
    return weights @ values.double(), weights


def ref_luong(attn: LuongAttention, query, keys, values, mask):
    """Luong et al. 2015, §3.1: dot h_tᵀ h̄_s, general h_tᵀ W_a h̄_s, concat v_aᵀ tanh(W_a [h_t; h̄_s])

    concat is computed on the real concatenation [h_t; h̄_s], not on W_a split in two.
    """
    query, keys = query.double(), keys.double()
    if attn.kind == "dot":
        scores = torch.einsum("bid,bjd->bij", query, keys)
    elif attn.kind == "general":
        scores = torch.einsum("bid,de,bje->bij", query, attn.w_a.weight.double(), keys)
    else:
        t, s = query.size(1), keys.size(1)
        pairs = torch.cat(  # [h_t; h̄_s] for every (t, s): (B, T, S, d_q + d_k)
            [query.unsqueeze(2).expand(-1, -1, s, -1), keys.unsqueeze(1).expand(-1, t, -1, -1)],
            dim=-1,
        )
        hidden = torch.tanh(pairs @ attn.w_a.weight.double().T)
        scores = (hidden @ attn.v_a.weight.double().T).squeeze(-1)
    weights = ref_masked_softmax(scores, mask)
    return weights @ values.double(), weights


def lengths_mask(lengths: list[int], s: int) -> torch.Tensor:
    """(B, 1, S) padding mask: True on the first lengths[b] keys."""
    return (torch.arange(s) < torch.tensor(lengths).unsqueeze(1)).unsqueeze(1)


def tril_mask(t: int) -> torch.Tensor:
    """(T, T) causal mask written out: row i may see keys j <= i."""
    return torch.tensor([[j <= i for j in range(t)] for i in range(t)])


def make_mask(kind: str, b: int, t: int, s: int) -> torch.Tensor | None:
    """One of MASK_KINDS; 'empty_row' is a random (B, T, S) mask whose row [0, 1] is all False."""
    if kind == "none":
        return None
    padding = lengths_mask([s] + [max(1, s - 2 - n) for n in range(b - 1)], s)
    if kind == "padding":
        return padding
    if kind == "causal":
        assert t == s
        return tril_mask(t)
    if kind == "padding&causal":
        return padding & tril_mask(t)
    mask = torch.rand(b, t, s) < 0.6
    mask[0, 1] = False
    mask[-1, 0] = True
    return mask


def lengths_for(kind: str) -> tuple[int, int]:
    """(T, S): self-attention lengths for causal masks, cross-attention lengths otherwise."""
    return (6, 6) if "causal" in kind else (5, 7)


# ---------------------------------------------------------------------------------------------
# One harness for every variant: they all take forward(query, keys, values, mask).
# ---------------------------------------------------------------------------------------------

VARIANTS = ["sdpa", "mha_weights", "mha_fused", "additive"] + [f"luong_{c[0]}" for c in LUONG_CASES]


def make_variant(name: str):
    """-> (call(query, keys, values, mask) -> (context, weights or None), module, sizes).

    sizes are (query, key, value) feature sizes; module is None for the pure function.
    """
    if name == "sdpa":
        return scaled_dot_product_attention, None, (8, 8, 5)
    if name.startswith("mha"):
        mha = MultiHeadAttention(16, 2).eval()

        def call(q, k, v, mask):
            return mha(q, k, v, mask, need_weights=name == "mha_weights")

        return call, mha, (16, 16, 16)
    if name == "additive":
        attn = AdditiveAttention(6, 7, 9)
        return attn, attn, (6, 7, 4)
    kind, q_size, k_size, hidden = next(c for c in LUONG_CASES if name == f"luong_{c[0]}")
    attn = LuongAttention(kind, q_size, k_size, hidden)
    return attn, attn, (q_size, k_size, 4)


def variant_inputs(sizes, b=B, t=5, s=7, dtype=torch.float32, scale=1.0):
    q_size, k_size, v_size = sizes
    return (
        scale * torch.randn(b, t, q_size, dtype=dtype),
        scale * torch.randn(b, s, k_size, dtype=dtype),
        torch.randn(b, s, v_size, dtype=dtype),
    )


# ---------------------------------------------------------------------------------------------
# 1. scaled_dot_product_attention and MultiHeadAttention against the float64 reference
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask_kind", MASK_KINDS)
def test_sdpa_matches_float64_reference(mask_kind):
    t, s = lengths_for(mask_kind)
    q, k, v = torch.randn(B, t, 16), torch.randn(B, s, 16), torch.randn(B, s, 12)
    mask = make_mask(mask_kind, B, t, s)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    ref_out, ref_weights = ref_sdpa(q, k, v, mask)
    assert out.shape == (B, t, 12) and weights.shape == (B, t, s)
    assert out.dtype == weights.dtype == torch.float32
    assert rel_err(weights, ref_weights) < 1e-5
    assert rel_err(out, ref_out) < 1e-5


@pytest.mark.parametrize(
    "mask_shape", [(6, 7), (2, 1, 6, 7), (1, 3, 1, 7), (2, 3, 6, 7), (7,)], ids=str
)
def test_sdpa_four_dimensional_inputs_and_broadcast_masks(mask_shape):
    q, k, v = torch.randn(2, 3, 6, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
    mask = torch.rand(mask_shape) < 0.7
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    ref_out, ref_weights = ref_sdpa(q, k, v, mask)
    assert weights.shape == (2, 3, 6, 7)
    assert rel_err(weights, ref_weights) < 1e-5
    assert rel_err(out, ref_out) < 1e-5


@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "padding&causal"])
def test_sdpa_matches_torch_functional(mask_kind):
    t, s = lengths_for(mask_kind)
    q, k, v = torch.randn(B, 2, t, 8), torch.randn(B, 2, s, 8), torch.randn(B, 2, s, 8)
    mask = make_mask(mask_kind, B, t, s)
    mask4 = None if mask is None else (mask.unsqueeze(1) if mask.dim() == 3 else mask)
    out, _ = scaled_dot_product_attention(q, k, v, mask4)
    expected = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask4)
    assert rel_err(out, expected) < 1e-5


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
@pytest.mark.parametrize("mask_kind", MASK_KINDS)
def test_mha_matches_float64_reference(mask_kind, need_weights):
    t, s = lengths_for(mask_kind)
    mha = MultiHeadAttention(D, H).eval()
    query, keys, values = torch.randn(B, t, D), torch.randn(B, s, D), torch.randn(B, s, D)
    mask = make_mask(mask_kind, B, t, s)
    out, weights = mha(query, keys, values, mask, need_weights=need_weights)
    ref_out, ref_weights = ref_mha(mha, query, keys, values, mask)
    assert out.shape == (B, t, D)
    assert rel_err(out, ref_out) < 1e-5
    if need_weights:
        assert weights.shape == (B, H, t, s)
        assert rel_err(weights, ref_weights) < 1e-5
    else:
        assert weights is None


def test_mha_self_attention_matches_reference_with_dropout_in_eval_mode():
    mha = MultiHeadAttention(D, H, dropout=0.5).eval()
    x = torch.randn(B, 6, D)
    mask = make_mask("padding&causal", B, 6, 6)
    ref_out, ref_weights = ref_mha(mha, x, x, x, mask)
    for need_weights in (False, True):
        out, weights = mha(x, x, x, mask, need_weights=need_weights)
        assert rel_err(out, ref_out) < 1e-5
    assert rel_err(weights, ref_weights) < 1e-5  # the last pass, need_weights=True


# ---------------------------------------------------------------------------------------------
# 2. Bahdanau and Luong against the float64 reference
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask_kind", ["none", "padding", "empty_row"])
def test_additive_matches_float64_reference(mask_kind):
    attn = AdditiveAttention(query_size=6, key_size=10, hidden_size=8)
    query, keys, values = torch.randn(B, 5, 6), torch.randn(B, 7, 10), torch.randn(B, 7, 10)
    mask = make_mask(mask_kind, B, 5, 7)
    context, weights = attn(query, keys, values, mask)
    ref_context, ref_weights = ref_additive(attn, query, keys, values, mask)
    assert context.shape == (B, 5, 10) and weights.shape == (B, 5, 7)
    assert rel_err(weights, ref_weights) < 1e-5
    assert rel_err(context, ref_context) < 1e-5


@pytest.mark.parametrize("mask_kind", ["none", "padding", "empty_row"])
@pytest.mark.parametrize("case", LUONG_CASES, ids=lambda c: f"{c[0]}-h{c[3]}")
def test_luong_matches_float64_reference(case, mask_kind):
    kind, q_size, k_size, hidden = case
    attn = LuongAttention(kind, q_size, k_size, hidden)
    query, keys, values = torch.randn(B, 5, q_size), torch.randn(B, 7, k_size), torch.randn(B, 7, 3)
    mask = make_mask(mask_kind, B, 5, 7)
    context, weights = attn(query, keys, values, mask)
    ref_context, ref_weights = ref_luong(attn, query, keys, values, mask)
    assert context.shape == (B, 5, 3) and weights.shape == (B, 5, 7)
    assert rel_err(weights, ref_weights) < 1e-5
    assert rel_err(context, ref_context) < 1e-5


def test_luong_concat_default_hidden_size_is_query_size():
    attn = LuongAttention("concat", 5, 7)
    assert attn.w_a.weight.shape == (5, 5 + 7)
    assert attn.v_a.weight.shape == (1, 5)


@pytest.mark.parametrize("name", ["additive", "luong_general", "luong_concat"])
def test_rnn_decoder_step_shape(name):
    """An RNN decoder asks with one query per step: (B, 1, d_q) -> context (B, 1, d_v)."""
    attn, _, sizes = make_variant(name)
    query, keys, values = variant_inputs(sizes, t=1)
    mask = make_mask("padding", B, 1, 7)
    context, weights = attn(query, keys, values, mask)
    ref = ref_additive if name == "additive" else ref_luong
    ref_context, ref_weights = ref(attn, query, keys, values, mask)
    assert context.shape == (B, 1, sizes[2]) and weights.shape == (B, 1, 7)
    assert rel_err(context, ref_context) < 1e-5
    assert rel_err(weights, ref_weights) < 1e-5


# ---------------------------------------------------------------------------------------------
# 3. gradcheck in float64
# ---------------------------------------------------------------------------------------------


def double_inputs(*shapes):
    return tuple(torch.randn(*shape, dtype=torch.float64, requires_grad=True) for shape in shapes)


def mask_with_empty_row(b: int, t: int, s: int) -> torch.Tensor:
    mask = make_mask("empty_row", b, t, s)
    assert not mask[0, 1].any()
    return mask


@pytest.mark.parametrize("mask_kind", ["none", "padding", "empty_row"])
def test_sdpa_gradcheck(mask_kind):
    q, k, v = double_inputs((2, 3, 4), (2, 5, 4), (2, 5, 3))
    mask = (
        mask_with_empty_row(2, 3, 5) if mask_kind == "empty_row" else make_mask(mask_kind, 2, 3, 5)
    )
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, mask), (q, k, v)
    )


def gradcheck_module(module: nn.Module, mask, inputs, **kwargs):
    """gradcheck over the inputs and every parameter, through functional_call."""
    module = module.double()
    names = [name for name, _ in module.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in module.named_parameters())

    def fn(query, keys, values, *ps):
        args = (query, keys, values, mask)
        context, weights = functional_call(module, dict(zip(names, ps, strict=True)), args, kwargs)
        return context if weights is None else (context, weights)

    return torch.autograd.gradcheck(fn, (*inputs, *params))


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
@pytest.mark.parametrize("mask_kind", ["causal", "empty_row"])
def test_mha_gradcheck(mask_kind, need_weights):
    mha = MultiHeadAttention(8, 2).eval()
    mask = mask_with_empty_row(2, 3, 3) if mask_kind == "empty_row" else tril_mask(3)
    inputs = double_inputs((2, 3, 8), (2, 3, 8), (2, 3, 8))
    assert gradcheck_module(mha, mask, inputs, need_weights=need_weights)


def test_additive_gradcheck():
    inputs = double_inputs((2, 3, 4), (2, 5, 6), (2, 5, 3))
    assert gradcheck_module(AdditiveAttention(4, 6, 5), mask_with_empty_row(2, 3, 5), inputs)


@pytest.mark.parametrize("case", LUONG_CASES, ids=lambda c: f"{c[0]}-h{c[3]}")
def test_luong_gradcheck(case):
    kind, q_size, k_size, hidden = case
    inputs = double_inputs((2, 3, q_size), (2, 5, k_size), (2, 5, 3))
    attn = LuongAttention(kind, q_size, k_size, hidden)
    assert gradcheck_module(attn, mask_with_empty_row(2, 3, 5), inputs)


# ---------------------------------------------------------------------------------------------
# 4. Mask invariants, for every variant
# ---------------------------------------------------------------------------------------------


def flat_weights_and_mask(weights, mask, b, t, s):
    """weights (B, T, S) or (B, H, T, S) -> (B·H, T, S), with the mask broadcast to match."""
    weights = weights if weights.dim() == 3 else weights.flatten(0, 1)
    full = torch.broadcast_to(mask, (b, t, s)).repeat_interleave(weights.size(0) // b, dim=0)
    return weights, full


WEIGHTED_VARIANTS = [name for name in VARIANTS if name != "mha_fused"]


@pytest.mark.parametrize("scale", [1.0, 30.0], ids=["plain", "saturated"])
@pytest.mark.parametrize("name", WEIGHTED_VARIANTS)
def test_masked_weights_are_zero_and_rows_sum_to_one(name, scale):
    attn, _, sizes = make_variant(name)
    query, keys, values = variant_inputs(sizes, scale=scale)
    mask = make_mask("empty_row", B, 5, 7)
    context, weights = attn(query, keys, values, mask)
    weights, full = flat_weights_and_mask(weights, mask, B, 5, 7)
    assert torch.isfinite(context).all() and torch.isfinite(weights).all()
    assert (weights[~full] == 0).all()
    assert (weights >= 0).all()
    has_key = full.any(dim=-1)
    sums = weights.sum(dim=-1)
    torch.testing.assert_close(sums[has_key], torch.ones_like(sums[has_key]), rtol=0, atol=1e-6)
    assert (sums[~has_key] == 0).all()


@pytest.mark.parametrize("name", VARIANTS)
def test_fully_masked_row_gives_zero_weights_zero_context_and_finite_grads(name):
    attn, module, sizes = make_variant(name)
    query, keys, values = (x.requires_grad_(True) for x in variant_inputs(sizes))
    mask = make_mask("empty_row", B, 5, 7)
    context, weights = attn(query, keys, values, mask)
    if name.startswith("mha"):
        # the attended heads are zero, so the output is W_O · 0 + b_O
        expected = module.w_o.bias.expand_as(context[0, 1])
        assert torch.equal(context[0, 1], expected)
    else:
        assert (context[0, 1] == 0).all()
    if weights is not None:
        assert (weights[0, ..., 1, :] == 0).all()
    loss = context.square().sum() + (0 if weights is None else weights.square().sum())
    loss.backward()
    for x in (query, keys, values):
        assert torch.isfinite(x.grad).all()
    # the empty row's output does not depend on its query at all
    assert (query.grad[0, 1] == 0).all()
    assert query.grad.abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["sdpa", "mha_weights", "mha_fused", "additive", "luong_general"])
def test_half_precision_masks_do_not_overflow(name, dtype):
    """Rule 4: masked scores must not be a magic -1e9, which is -inf in float16."""
    attn, module, sizes = make_variant(name)
    if module is not None:
        module.to(dtype)
    query, keys, values = variant_inputs(sizes, dtype=dtype, scale=4.0)
    mask = make_mask("empty_row", B, 5, 7)
    context, weights = attn(query, keys, values, mask)
    assert context.dtype == dtype and torch.isfinite(context).all()
    if weights is not None:
        weights, full = flat_weights_and_mask(weights, mask, B, 5, 7)
        assert torch.isfinite(weights).all()
        assert (weights[~full] == 0).all()


@pytest.mark.parametrize("mask_kind", ["none", "padding", "empty_row"])
def test_fused_attention_runs_in_float32_on_a_cpu_under_bfloat16_autocast(mask_kind):
    """Its bfloat16 backward on a CPU is an order of magnitude slower than float32's: the
    kernel sees float32 copies of the bfloat16 heads, and gradients come back in bfloat16."""
    torch.manual_seed(0)
    module = MultiHeadAttention(16, 4)
    x = torch.randn(B, 7, 16)
    mask = None if mask_kind == "none" else make_mask(mask_kind, B, 7, 7).unsqueeze(1)  # heads
    with torch.autocast("cpu", torch.bfloat16):
        q, k, v = module.project_qkv(x)
        assert q.dtype == torch.bfloat16
        heads = [t.detach().requires_grad_() for t in (q, k, v)]
        out = attention._fused_attention(*heads, mask, 0.0)
    assert out.dtype == torch.bfloat16
    reference = attention._fused_attention(*(t.detach().double() for t in heads), mask, 0.0)
    torch.testing.assert_close(out.double(), reference, rtol=1e-2, atol=1e-2)  # bf16 output
    floats = [t.detach().float().requires_grad_() for t in heads]
    attention._fused_attention(*floats, mask, 0.0).sum().backward()
    out.float().sum().backward()
    for half, full in zip(heads, floats):
        assert half.grad.dtype == torch.bfloat16
        torch.testing.assert_close(half.grad, full.grad.bfloat16(), rtol=0, atol=0)


def test_sdpa_returns_weights_before_dropout():
    q, k, v = torch.randn(B, 5, 8), torch.randn(B, 7, 8), torch.randn(B, 7, 4)
    mask = make_mask("padding", B, 5, 7)
    out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=0.5)
    ref_out, ref_weights = ref_sdpa(q, k, v, mask)
    assert rel_err(weights, ref_weights) < 1e-5
    assert rel_err(out, ref_out) > 1e-3  # dropout did act on the output


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_mha_dropout_acts_only_in_training(need_weights):
    mha = MultiHeadAttention(D, H, dropout=0.5)
    x = torch.randn(B, 6, D)
    first, _ = mha(x, x, x, None, need_weights=need_weights)
    second, _ = mha(x, x, x, None, need_weights=need_weights)
    assert not torch.allclose(first, second)
    mha.eval()
    first, _ = mha(x, x, x, None, need_weights=need_weights)
    second, _ = mha(x, x, x, None, need_weights=need_weights)
    assert torch.equal(first, second)


# ---------------------------------------------------------------------------------------------
# 5. MHA's two paths agree, and agree with torch.nn.MultiheadAttention
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask_kind", MASK_KINDS)
def test_mha_fused_and_explicit_paths_agree(mask_kind):
    t, s = lengths_for(mask_kind)
    mha = MultiHeadAttention(D, H).eval()
    query, keys, values = torch.randn(B, t, D), torch.randn(B, s, D), torch.randn(B, s, D)
    mask = make_mask(mask_kind, B, t, s)
    explicit, _ = mha(query, keys, values, mask, need_weights=True)
    fused, _ = mha(query, keys, values, mask, need_weights=False)
    assert rel_err(fused, explicit) < 1e-5


def torch_mha_like(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """torch's module with our W_Q, W_K, W_V stacked into in_proj and W_O as out_proj."""
    theirs = nn.MultiheadAttention(mha.d_model, mha.num_heads, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([mha.w_q.weight, mha.w_k.weight, mha.w_v.weight]))
        theirs.in_proj_bias.copy_(
            torch.cat([mha.w_q.bias, torch.zeros_like(mha.w_q.bias), mha.w_v.bias])
        )
        theirs.out_proj.weight.copy_(mha.w_o.weight)
        theirs.out_proj.bias.copy_(mha.w_o.bias)
    return theirs


@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "padding&causal"])
def test_mha_matches_torch_multihead_attention(mask_kind):
    t, s = lengths_for(mask_kind)
    mha = MultiHeadAttention(D, H).eval()
    theirs = torch_mha_like(mha)
    query, keys, values = torch.randn(B, t, D), torch.randn(B, s, D), torch.randn(B, s, D)
    mask = make_mask(mask_kind, B, t, s)
    # torch's bool attn_mask is True where attention is *not* allowed, one per (batch, head)
    their_mask = None
    if mask is not None:
        their_mask = ~torch.broadcast_to(mask, (B, t, s)).repeat_interleave(H, dim=0)
    with torch.no_grad():
        expected, expected_weights = theirs(
            query, keys, values, attn_mask=their_mask, average_attn_weights=False
        )
        for need_weights in (False, True):
            out, weights = mha(query, keys, values, mask, need_weights=need_weights)
            assert rel_err(out, expected) < 1e-5
    assert rel_err(weights, expected_weights) < 1e-5  # the last pass, need_weights=True


# ---------------------------------------------------------------------------------------------
# 6. Causality: the future cannot change the past
# ---------------------------------------------------------------------------------------------


def causal_self_attention(name: str):
    """-> f(x, mask) -> outputs, for self-attention with a (T, T) causal mask."""
    if name == "sdpa":
        return lambda x, mask: scaled_dot_product_attention(x, x, x, mask)[0]
    mha = MultiHeadAttention(D, H).eval()
    need_weights = name == "mha_weights"
    return lambda x, mask: mha(x, x, x, mask, need_weights=need_weights)[0]


@pytest.mark.parametrize("position", [5, 3, 0])
@pytest.mark.parametrize("name", ["sdpa", "mha_weights", "mha_fused"])
def test_future_tokens_cannot_change_earlier_outputs(name, position):
    attend = causal_self_attention(name)
    x = torch.randn(B, 6, D)
    perturbed = x.clone()
    perturbed[:, position] += 3.0 * torch.randn(B, D)
    mask = make_mask("padding&causal", B, 6, 6)
    before, after = attend(x, mask), attend(perturbed, mask)
    assert torch.equal(before[:, :position], after[:, :position])
    assert not torch.allclose(before[:, position:], after[:, position:])  # it did reach position
    # without the causal mask the change leaks backwards: the check above can fail
    if position > 0:
        padding = make_mask("padding", B, 6, 6)
        assert not torch.allclose(
            attend(x, padding)[0, :position], attend(perturbed, padding)[0, :position]
        )


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_mha_step_by_step_matches_full_causal_pass(need_weights):
    """Decoding one position at a time over the prefix equals the causal pass over all of it."""
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(B, 6, D)
    full, _ = mha(x, x, x, tril_mask(6), need_weights=need_weights)
    k, v = mha.project_kv(x, x)  # (B, H, T, D/H): what a decoder caches
    for t in range(6):
        step, _ = mha.attend_projected(
            x[:, t : t + 1], k[:, :, : t + 1], v[:, :, : t + 1], None, need_weights
        )
        assert rel_err(step[:, 0], full[:, t]) < 1e-5


# ---------------------------------------------------------------------------------------------
# Mask helpers
# ---------------------------------------------------------------------------------------------


def test_padding_mask_marks_real_tokens():
    tokens = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0]])
    mask = padding_mask(tokens, pad_id=0)
    assert mask.shape == (2, 1, 4) and mask.dtype == torch.bool
    assert mask[:, 0].tolist() == [[True, True, True, False], [True, False, False, False]]


@pytest.mark.parametrize("t", [1, 2, 7])
def test_causal_mask_is_lower_triangular(t):
    mask = causal_mask(t)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, tril_mask(t))


# ---------------------------------------------------------------------------------------------
# 8. Bad input fails early with a message that says what is wrong
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VARIANTS)
def test_mask_of_wrong_shape_is_a_value_error_naming_both_shapes(name):
    attn, _, sizes = make_variant(name)
    query, keys, values = variant_inputs(sizes)
    bad = torch.ones(B, 1, 6, dtype=torch.bool)  # 6 keys, there are 7
    with pytest.raises(ValueError, match=r"\(3, 1, 6\).*7\)"):
        attn(query, keys, values, bad)


@pytest.mark.parametrize("name", ["sdpa", "mha_weights", "mha_fused"])
def test_mask_that_broadcasts_past_the_scores_is_a_value_error(name):
    attn, _, sizes = make_variant(name)
    query, keys, values = variant_inputs(sizes)
    bad = torch.ones(2, B, 5, 7, dtype=torch.bool)  # would add a leading axis
    with pytest.raises(ValueError, match=r"\(2, 3, 5, 7\)"):
        attn(query, keys, values, bad)


@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.int64, torch.uint8])
@pytest.mark.parametrize("name", VARIANTS)
def test_non_bool_mask_is_a_type_error(name, mask_dtype):
    attn, _, sizes = make_variant(name)
    query, keys, values = variant_inputs(sizes)
    with pytest.raises(TypeError, match="bool"):
        attn(query, keys, values, torch.ones(B, 1, 7, dtype=mask_dtype))


@pytest.mark.parametrize("d_model, num_heads", [(10, 3), (8, 0), (8, -2), (6, 4)])
def test_mha_d_model_not_divisible_by_num_heads(d_model, num_heads):
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(d_model, num_heads)


def test_luong_dot_needs_equal_sizes():
    with pytest.raises(ValueError, match=r"query_size == key_size.*5.*7"):
        LuongAttention("dot", 5, 7)


@pytest.mark.parametrize("kind", ["bilinear", "Dot", ""])
def test_luong_unknown_kind(kind):
    with pytest.raises(ValueError, match="unknown Luong attention kind"):
        LuongAttention(kind, 4, 4)
