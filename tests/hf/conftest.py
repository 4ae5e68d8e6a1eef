"""The tiny Hugging Face models every test in tests/hf shares, built once per session
(builders.py: random weights, tokenizers trained on the spot, nothing downloaded)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from .builders import BUILDERS

ARCHS = tuple(BUILDERS)  # marian, bart, mbart, m2m_100, t5


@pytest.fixture(scope="session")
def hf_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf-models")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MarianTokenizer recommends sacremoses
        return {name: build(root / name) for name, build in BUILDERS.items()}


@pytest.fixture(scope="session")
def translators(hf_dirs):
    import heedful

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {name: heedful.load(path) for name, path in hf_dirs.items()}
