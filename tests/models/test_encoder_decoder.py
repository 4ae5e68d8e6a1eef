"""EncoderDecoder (models/encoder_decoder.py): any encoder under any decoder, through the one
Memory. A Transformer's encoder of tokens under an RNN attention decoder, a pairing no config
makes, shows that the parts meet only there: the decoder starts from the mean of the real
positions' states (it has no final state from this encoder), searches as it is taught, and a
sentence reads the same alone as padded in a batch."""

import pytest
import torch

from heedful.models.encoder_decoder import EncoderDecoder
from heedful.models.rnn import AttentionDecoder, make_attention
from heedful.models.transformer import transformer

SRC_V, TGT_V, D = 19, 13, 16


@pytest.fixture(params=["gru", "lstm"])
def model(request):
    torch.manual_seed(0)
    encoder, _ = transformer(SRC_V, TGT_V, 2, 1, d_model=D, num_heads=2, d_ff=32, dropout=0.0)
    decoder = AttentionDecoder(
        TGT_V, 8, D, request.param, 2, make_attention("bahdanau", D), False, 0.0, 0
    )
    return EncoderDecoder(encoder, decoder).double().eval()


def sources():
    src = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]])  # the second padded
    return src, torch.tensor([[1, 4, 7, 9], [1, 5, 5, 6]])


def test_the_decoder_starts_from_the_mean_of_the_real_positions(model):
    src, _ = sources()
    with torch.no_grad():
        memory = model.encode(src)
        hidden = model.init_state(memory).hidden
    states = memory.states  # (B, S, D), float64
    for row, length in enumerate((5, 3)):
        mean = states[row, :length].mean(0)  # the padding's states left out
        want = torch.tanh(model.decoder.bridge(mean))
        for h in hidden:  # every layer, and an LSTM's cell too
            for layer in range(2):
                torch.testing.assert_close(h[layer, row], want, atol=1e-12, rtol=0)


def test_search_steps_give_the_teacher_forced_log_probabilities(model):
    src, tgt_in = sources()
    with torch.no_grad():
        taught = model(src, tgt_in).logits.log_softmax(-1)  # (B, T, V)
        memory = model.encode(src)
        state, steps = model.init_state(memory), []
        for t in range(tgt_in.size(1)):
            log_probs, state, _ = model.decode_step(memory, state, tgt_in[:, t])
            steps.append(log_probs)
    torch.testing.assert_close(torch.stack(steps, 1), taught, atol=1e-12, rtol=0)


def test_a_padded_sentence_reads_as_it_does_alone(model):
    src, tgt_in = sources()
    with torch.no_grad():
        batched = model(src, tgt_in).logits[1]
        alone = model(src[1:, :3], tgt_in[1:]).logits[0]
    torch.testing.assert_close(batched, alone, atol=1e-12, rtol=0)
    assert model.source_lengths(src).tolist() == [5, 3]
