"""Hugging Face seq2seq models (Marian, BART, mBART, M2M100/NLLB, T5) in heedful, and heedful
Transformers as Marian or Pegasus models: `pip install 'heedful[hf]'`.

    layout.py    which directories are Hugging Face ones, and which heedful opens (no transformers)
    files.py     every file inside the directory (links and index entries), the weights' headers
    fields.py    config.json and generation_config.json checked key by key: types, finite, ids
    tokenizer_files.py  the tokenizer's class and files (tokenizer.json, vocab.json) checked
    vocab.py     their ids renumbered as heedful's (specials at 0-3), the tokenizer behind ours
    model.py     HFSeq2Seq: encode / decode_step over the model, with its own cache
    loading.py   a directory -> the parts of a Translator
    export.py    a heedful Transformer -> a Marian (post-norm) or Pegasus (pre-norm) directory
    export_weights.py    its weights under their names, the residual stream renumbered
    export_tokenizer.py  its one vocabulary in tokenizer.json (or Marian's two files)

heedful.load(DIR) recognises a Hugging Face directory by itself, and takes the languages of a
multilingual one: heedful.load(DIR, src_lang="en_XX", tgt_lang="de_DE"). This package is an
adapter only: what draws a model's attention (visualize/explain_hf.py, visualize/words.py)
reads it from there, and nothing here imports the rest of heedful above the models.
"""

from __future__ import annotations
