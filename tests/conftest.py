import os
import random
from pathlib import Path

# The tests use tiny tensors: one thread avoids OpenMP start-up and barrier costs that dominate
# at this size (and collapse when another process shares the two cores). Set in the
# environment, before torch loads, so that the commands the tests run (--threads unset) and
# the subprocesses they start keep to it too (heedful.cpu.set_threads respects it).
os.environ["OMP_NUM_THREADS"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

LETTERS = "abcdefgh"


def reverse_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """The reverse task: 2-8 letters from LETTERS, and the same letters backwards."""
    rng = random.Random(seed)
    words = ["".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 8))) for _ in range(n)]
    return [(w, w[::-1]) for w in words]


def train_reverse(config, tokenizer, steps: int):
    """A model of `config` trained with Adam (lr 5e-3, seed 0) on batches of 64 reverse pairs,
    in eval mode."""
    import torch.nn.functional as F

    from heedful.data.batching import collate
    from heedful.data.tokenizers import PAD_ID
    from heedful.models.build import build_model

    torch.manual_seed(0)
    model = build_model(config, len(tokenizer), len(tokenizer))
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    for step in range(steps):
        pairs = reverse_pairs(64, seed=step)
        batch = collate(
            [tokenizer.encode(s) for s, _ in pairs], [tokenizer.encode(t) for _, t in pairs]
        )
        logits = model(batch.src, batch.tgt_in).logits  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="session")
def reverse_model_dir(tmp_path_factory) -> Path:
    """A character Transformer trained for 300 steps (~4 s) to reverse words, saved as a model
    directory: it gets about nine words in ten right, so its outputs are confident, as a real
    model's are, yet not all right (BLEU has room to move either way)."""
    from heedful.checkpoint.model_dir import GenerationConfig, save_model_dir
    from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig
    from heedful.data.tokenizers import CharTokenizer

    tokenizer = CharTokenizer.train([LETTERS])
    config = ModelConfig(
        d_model=32,
        num_heads=4,
        d_ff=64,
        dropout=0.0,
        encoder=TextEncoderConfig(layers=1),
        decoder=DecoderConfig(layers=1),
    )
    model = train_reverse(config, tokenizer, steps=300)
    generation = GenerationConfig(num_beams=1, max_len_ratio=1.5, max_len_offset=4)
    path = tmp_path_factory.mktemp("reverse") / "model"
    return save_model_dir(path, model, config, tokenizer, tokenizer, generation)


@pytest.fixture(scope="session")
def reverse_test_set() -> list[tuple[str, str]]:
    """200 held-out (word, reversed word) pairs for the model above."""
    return reverse_pairs(200, seed=10_000)
