import random

import numpy as np
import torch

from heedful.data.batching import Batch, bucketed_batches, collate
from heedful.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, CharTokenizer


def test_bucketed_batches_keep_every_example_once_within_budget():
    rng = random.Random(0)
    src = [rng.randint(1, 60) for _ in range(1000)]
    tgt = [rng.randint(1, 60) for _ in range(1000)]
    batches = bucketed_batches(src, tgt, batch_tokens=400, rng=np.random.default_rng(1))
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(1000))
    for b in batches:
        assert max(max(src[i], tgt[i]) for i in b) * len(b) <= 400
    # Sorting by length keeps padding low: far less than random batches of the same sizes.
    padded = sum(max(tgt[i] for i in b) * len(b) for b in batches)
    assert padded < 1.15 * sum(tgt)


def test_an_example_longer_than_the_budget_gets_its_own_batch():
    assert sorted(map(sorted, bucketed_batches([5, 500, 6], [5, 500, 6], 100))) == [[0, 2], [1]]


def test_collate_adds_bos_eos_and_padding():
    src, tgt_in, tgt_out = collate([[5, 6, 7], [8]], [[9], [10, 11]])
    assert src.tolist() == [[5, 6, 7], [8, PAD_ID, PAD_ID]]
    assert tgt_in.tolist() == [[BOS_ID, 9, PAD_ID], [BOS_ID, 10, 11]]
    assert tgt_out.tolist() == [[9, EOS_ID, PAD_ID], [10, 11, EOS_ID]]
    assert src.dtype == torch.long


def test_char_tokenizer_round_trip_and_unknowns(tmp_path):
    tok = CharTokenizer.train(["29. März 2026", "le 1er août"])
    ids = tok.encode("29 août")
    assert tok.decode(ids) == "29 août"
    assert tok.decode(tok.encode("Z")) == ""  # unseen character -> <unk>, dropped on decode
    assert tok.decode(ids + [EOS_ID] + ids) == "29 août"  # stops at </s>
    tok.save(tmp_path / "t.json")
    assert tok.load(tmp_path / "t.json").vocab == tok.vocab


def test_collate_names_its_tensors():
    batch = collate([[4, 5, 6], [7]], [[8, 9], [10]])
    assert isinstance(batch, Batch)
    assert batch.tgt_in.tolist() == [[BOS_ID, 8, 9], [BOS_ID, 10, PAD_ID]]
    assert batch.tgt_out.tolist() == [[8, 9, EOS_ID], [10, EOS_ID, PAD_ID]]
    assert batch.src.shape == (2, 3) and batch.target_tokens() == 5
    assert batch.to("cpu").src is not None
