"""search/topk.py: the k best of each row through block maxima must be what torch.topk finds,
value for value, on every kind of row a search can produce; the best of each row through
numpy's argmax what torch's max finds, index for index."""

import pytest
import torch

from heedful.search.topk import BLOCK, FEW_ROWS, row_max, row_topk


def assert_same_as_topk(x: torch.Tensor, k: int) -> None:
    values, indices = row_topk(x, k)
    want = x.topk(k, dim=1).values
    torch.testing.assert_close(values, want, atol=0, rtol=0, equal_nan=True)
    torch.testing.assert_close(x.gather(1, indices), values, atol=0, rtol=0, equal_nan=True)
    assert all(len(set(row)) == k for row in indices.tolist())  # k distinct entries a row


@pytest.mark.parametrize("width", [40 * BLOCK, 40 * BLOCK + 17, 8000, 3 * BLOCK])
@pytest.mark.parametrize("k", [1, 2, 10])
def test_random_rows_give_torchs_values_and_their_places(width, k):
    generator = torch.Generator().manual_seed(width + k)
    x = torch.randn(37, width, generator=generator, dtype=torch.float64)
    assert_same_as_topk(x, k)
    assert_same_as_topk(x.float().log_softmax(-1), k)


def test_the_best_entries_in_one_block_or_in_the_tail_are_found():
    x = torch.randn(4, 40 * BLOCK + 5)
    x[0, 7 * BLOCK : 7 * BLOCK + 10] = 50.0 + torch.arange(10.0)  # all ten in one block
    x[1, -5:] = 100.0  # the tail that fills no block
    x[2, ::BLOCK] = 10.0  # one each in ten blocks' first places
    x[3, BLOCK - 1 :: BLOCK] = 10.0  # and last places
    assert_same_as_topk(x.repeat(FEW_ROWS // 4, 1), 10)  # enough rows for the blocks


def test_ties_masks_and_nan_give_the_same_values():
    generator = torch.Generator().manual_seed(0)
    ties = torch.randint(0, 3, (16, 50 * BLOCK), generator=generator).float()  # many equal
    masked = torch.randn(16, 50 * BLOCK, generator=generator)
    masked[:, ::2] = float("-inf")  # a forced prefix leaves one token, the rest -inf
    masked[3] = float("-inf")
    masked[3, 1234] = 0.0
    with_nan = torch.randn(16, 50 * BLOCK, generator=generator)
    with_nan[5, 300] = float("nan")
    for x in (ties, masked, with_nan, -torch.ones(16, 50 * BLOCK)):
        assert_same_as_topk(x, 10)


@pytest.mark.parametrize("rows", [1, FEW_ROWS - 1, FEW_ROWS, 40])
def test_only_enough_rows_go_through_the_blocks(rows, monkeypatch):
    """Fewer than FEW_ROWS rows take torch's topk alone (the blocks' own operators would cost
    more than they save); either way the same values."""
    amax, blocked = torch.Tensor.amax, []
    monkeypatch.setattr(torch.Tensor, "amax", lambda *a, **k: blocked.append(1) or amax(*a, **k))
    assert_same_as_topk(torch.randn(rows, 8000).log_softmax(-1), 10)
    assert bool(blocked) == (rows >= FEW_ROWS)


def test_narrow_rows_and_integers_take_torchs_own_topk():
    assert_same_as_topk(torch.randn(3, 15), 10)
    x = torch.randint(0, 100, (3, 100 * BLOCK))
    torch.testing.assert_close(row_topk(x, 5)[0], x.topk(5, dim=1).values)


def test_beam_search_over_a_wide_vocabulary_finds_what_torchs_topk_finds(monkeypatch):
    """3,000 target tokens at beam 5: each beam's 10 best go through the blocks."""
    from heedful.config import DecoderConfig, ModelConfig
    from heedful.models.build import build_model
    from heedful.search import beam

    torch.manual_seed(0)
    config = ModelConfig(d_model=16, num_heads=2, d_ff=32, dropout=0.0, decoder=DecoderConfig())
    model = build_model(config, 50, 3000).eval()  # its beams run to the length limit
    src = torch.randint(4, 50, (6, 7))
    with torch.no_grad():
        found = beam.beam_search(model, src, 1, 2, beam_size=5, n_best=3)
        monkeypatch.setattr(beam, "row_topk", lambda x, k: x.topk(k, dim=1))
        want = beam.beam_search(model, src, 1, 2, beam_size=5, n_best=3)
    assert [[h.tokens for h in hs] for hs in found] == [[h.tokens for h in hs] for hs in want]
    for hs, ws in zip(found, want):
        torch.testing.assert_close([h.score for h in hs], [w.score for w in ws])
    assert any(len(h.tokens) > 2 for hs in found for h in hs)  # the searches went some way


def _rows_of_every_kind() -> dict[str, torch.Tensor]:
    """Rows a search's log-probabilities can be, and some they should never be."""
    generator = torch.Generator().manual_seed(1)
    ties = torch.randint(0, 3, (16, 500), generator=generator).float()  # the first of equals
    masked = torch.randn(6, 8000, generator=generator).log_softmax(-1)
    masked[:, ::2] = float("-inf")
    masked[2] = float("-inf")  # a row with nothing allowed
    masked[3] = float("-inf")
    masked[3, 7999] = 0.0  # a forced token in the last place
    with_nan = torch.randn(5, 300, generator=generator)
    with_nan[1, 17] = float("nan")
    with_nan[2, 3:9] = float("nan")  # several: the first one
    with_nan[3, :] = float("nan")
    wide = torch.randn(64, 8000, generator=generator, dtype=torch.float64)
    return {
        "log-probabilities": torch.randn(37, 8000, generator=generator).log_softmax(-1),
        "ties": ties,
        "all equal": torch.full((4, 100), -2.5),
        "masked": masked,
        "nan": with_nan,
        "float64": wide,
        "a column of a wider tensor": wide[:, ::3],  # not contiguous
        "one column": torch.randn(7, 1, generator=generator),
        "no rows": torch.empty(0, 8000),
        "infinities": torch.tensor([[float("inf"), 1.0, float("inf")], [1.0, -1.0, 0.0]]),
    }


@pytest.mark.parametrize("kind", list(_rows_of_every_kind()))
def test_row_max_is_torchs_max_index_for_index(kind):
    x = _rows_of_every_kind()[kind]
    values, indices = row_max(x)
    want = x.max(dim=1)
    assert indices.dtype == torch.long and indices.shape == want.indices.shape
    assert torch.equal(indices, want.indices)
    torch.testing.assert_close(values, want.values, atol=0, rtol=0, equal_nan=True)


def test_row_max_leaves_what_numpy_cannot_read_to_torch():
    half = torch.randn(9, 300).to(torch.bfloat16)
    with_grad = torch.randn(9, 300, requires_grad=True)
    for x in (half, with_grad):
        values, indices = row_max(x)
        assert torch.equal(indices, x.max(dim=1).indices) and values.dtype == x.dtype
    assert row_max(with_grad)[0].requires_grad  # torch's, which autograd follows
