"""Hugging Face seq2seq models (Marian, BART, mBART, M2M100/NLLB, T5) in heedful, and heedful
Transformers as Marian models: `pip install 'heedful[hf]'`.

    layout.py    which directories are Hugging Face ones, and which heedful opens (no transformers)
    files.py     every file inside the directory (links and index entries), the weights' headers
    fields.py    config.json and generation_config.json checked key by key: types, finite, ids
    tokenizer_files.py  the tokenizer's class and files (tokenizer.json, vocab.json) checked
    vocab.py     their ids renumbered as heedful's (specials at 0-3), the tokenizer behind ours
    model.py     HFSeq2Seq: encode / decode_step over the model, with its own cache
    loading.py   a directory -> the parts of a Translator
    explain.py   one attention head's computation, from the model's own projections
    words.py     subword pieces merged into words in a trace (heedful attention --words)
    export.py    a heedful Transformer -> a Marian model directory

heedful.load(DIR) recognises a Hugging Face directory by itself; load() here also takes the
languages of a multilingual model.
"""

from __future__ import annotations


def load(model_dir, device="cpu", src_lang=None, tgt_lang=None):
    """A Translator for a Hugging Face directory; src_lang / tgt_lang name the languages of an
    mBART or M2M100/NLLB model ("en_XX", "de"; default: those saved with its tokenizer)."""
    from heedful.hf.loading import load_parts
    from heedful.translator import Translator

    model, src, tgt, generation, languages = load_parts(model_dir, device, src_lang, tgt_lang)
    return Translator(model, src, tgt, generation, device, languages)
