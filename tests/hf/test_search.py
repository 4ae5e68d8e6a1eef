"""Our greedy and beam search over a Hugging Face model give generate()'s outputs.

Both search the same distributions (the adapter runs the model's own forward with its cache),
with generate() told the same settings: no sampling, length penalty 0 (ours is GNMT's, theirs
divides by |Y| ** alpha; at 0 both rank by log P), the same output limit, the banned and forced
tokens of the model's generation config. Token ids are compared, in the model's numbering.
"""

from __future__ import annotations

import pytest
import torch

from heedful.data.batching import pad

from .builders import TEXTS
from .conftest import ARCHS

LIMIT = 12  # output tokens: max_len_ratio 0, max_len_offset LIMIT; generate's max_new_tokens


def generate(translator, texts, beams: int) -> list[list[int]]:
    """generate()'s outputs for `texts`, model ids without the decoder start, cut at </s>."""
    adapter = translator.model
    src = pad([translator.src_tokenizer.encode(t) for t in texts]).to(translator.device)
    forced = {} if adapter.forced_bos is None else {"forced_bos_token_id": adapter.forced_bos}
    out = adapter.hf.generate(
        input_ids=adapter.ids.to_model(src),
        attention_mask=(src != 0).long(),
        num_beams=beams,
        do_sample=False,
        max_new_tokens=LIMIT,
        length_penalty=0.0,
        early_stopping=False,
        forced_eos_token_id=None,
        **forced,
    )
    eos, rows = adapter.hf.config.eos_token_id, []
    for row in out[:, 1:].tolist():
        rows.append(row[: row.index(eos) + 1] if eos in row else row)
    return rows


def ours(translator, texts, beams: int) -> list[list[int]]:
    adapter = translator.model
    src = pad([translator.src_tokenizer.encode(t) for t in texts]).to(translator.device)
    found = translator.search(
        src, beams, 1, max_len_ratio=0.0, max_len_offset=LIMIT, length_penalty=0.0
    )
    eos = adapter.hf.config.eos_token_id
    return [
        [int(adapter.ids.columns[i]) for i in h.tokens] + ([eos] if h.finished else [])
        for [h] in found
    ]


@pytest.mark.parametrize("beams", [1, 4])
@pytest.mark.parametrize("arch", ARCHS)
def test_search_gives_generates_outputs(translators, arch, beams):
    translator = translators[arch]
    assert ours(translator, TEXTS, beams) == generate(translator, TEXTS, beams)


@pytest.mark.parametrize("arch", ARCHS)
def test_translate_writes_what_the_tokenizer_decodes(translators, arch):
    translator = translators[arch]
    [expected] = generate(translator, TEXTS[:1], 1)
    [out] = translator.translate(TEXTS[:1], num_beams=1, max_len_ratio=0.0, max_len_offset=LIMIT)
    text = translator.tgt_tokenizer.tokenizer.decode(expected, skip_special_tokens=True)
    assert out.text == text.strip()
    assert out.source_tokens == translator.src_tokenizer.tokens(TEXTS[0])


def test_multilingual_models_start_with_the_target_language(translators):
    for arch, code in (("mbart", "de_DE"), ("m2m_100", "__de__")):
        [out] = translators[arch].translate(TEXTS[:1], num_beams=2)
        assert out.tokens[0] == code


def test_beam_search_returns_n_best_in_score_order(translators):
    translator = translators["marian"]
    src = pad([translator.src_tokenizer.encode(t) for t in TEXTS])
    for hyps in translator.search(src, 4, 3, length_penalty=0.0):
        assert len(hyps) == 3
        scores = [h.score for h in hyps if h.finished]
        assert scores == sorted(scores, reverse=True)


def test_decode_step_reorders_its_cache_by_beam(translators):
    """Rows swapped by index_select decode exactly as the rows they became."""
    adapter = translators["t5"].model
    src = pad([translators["t5"].src_tokenizer.encode(t) for t in TEXTS[:2]])
    memory = adapter.encode(src)
    state = adapter.init_state(memory)
    last = torch.full((2,), 1, dtype=torch.long)
    _, state, _ = adapter.decode_step(memory, state, last, need_weights=False)
    swap = torch.tensor([1, 0])
    a, _, _ = adapter.decode_step(
        memory.index_select(swap), state.index_select(swap), torch.tensor([5, 6]), False
    )
    memory2 = adapter.encode(src)
    state2 = adapter.init_state(memory2)
    _, state2, _ = adapter.decode_step(memory2, state2, last, need_weights=False)
    b, _, _ = adapter.decode_step(memory2, state2, torch.tensor([6, 5]), False)
    torch.testing.assert_close(a, b[swap])


def test_t5_v1_1_with_heads_narrower_than_d_model(tmp_path):
    import heedful
    from heedful.visualize.explain import explain

    from .builders import build_t5_v1_1

    translator = heedful.load(build_t5_v1_1(tmp_path / "t5-v1.1"))
    for beams in (1, 3):
        assert ours(translator, TEXTS, beams) == generate(translator, TEXTS, beams)
    assert explain(translator, TEXTS[0], head=6, kind="encoder").weights.numel() > 0
