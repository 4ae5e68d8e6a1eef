"""models/base.py's step_log_probs: a step's log-probabilities, over its logits where nothing
differentiates them, against log_softmax in float64."""

import torch

from heedful.models.base import step_log_probs


def logits_of_a_step(rows=6, vocab=50, **kwargs):
    torch.manual_seed(0)
    return (torch.randn(rows, 1, vocab) * 8).to(**kwargs)


def test_without_autograd_the_log_probs_are_written_over_the_logits():
    logits = logits_of_a_step()
    want = logits.double()[:, 0].log_softmax(-1)
    with torch.no_grad():
        got = step_log_probs(logits)
    assert got.shape == (6, 50) and got.data_ptr() == logits.data_ptr()  # no new (B, V)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.exp().sum(-1).double(), torch.ones(6, dtype=torch.float64))


def test_with_autograd_the_logits_stay_and_get_their_gradient():
    logits = logits_of_a_step().requires_grad_()
    before = logits.detach().clone()
    got = step_log_probs(logits)
    assert got.data_ptr() != logits.data_ptr()
    got[:, 3].sum().backward()
    assert torch.equal(logits.detach(), before)
    # d log p_3 / d logit_j = [j = 3] - p_j
    p = before.double()[:, 0].softmax(-1)
    want = -p
    want[:, 3] += 1
    torch.testing.assert_close(logits.grad[:, 0].double(), want, atol=1e-6, rtol=0)


def test_under_autocast_it_is_autocasts_log_softmax():
    """Autocast may compute log_softmax in another dtype (float32 on CUDA), which cannot be
    written over the logits: there the result is a new tensor, autocast's own."""
    logits = logits_of_a_step(dtype=torch.bfloat16)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        want = logits[:, 0].log_softmax(-1)
        got = step_log_probs(logits)
    assert got.dtype == want.dtype and got.data_ptr() != logits.data_ptr()
    assert torch.equal(got, want)
