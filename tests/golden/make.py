"""Write the golden files that pin heedful's outputs: HTTP answers, traces, the viewer page.

    python tests/golden/make.py            # the expected outputs, from the committed models
    python tests/golden/make.py --models   # first train the two tiny models again

Run it only when a change to an output is meant; tests/test_golden.py compares the code's
outputs with these files (text exactly, numbers within a rounding step).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/ for conftest's reverse task

SENTENCE = "abcdefg"

PAIR = {"source": "src", "target": "tgt"}
# (name, method, path, JSON body or None, extra headers, raw body or None)
REQUESTS = [
    ("health-before", "GET", "/health", None, {}, None),
    ("ready", "GET", "/ready", None, {}, None),
    ("languages", "GET", "/languages", None, {}, None),
    ("translate-one", "POST", "/translate", {"q": "abcd", **PAIR}, {}, None),
    ("translate-list", "POST", "/translate",
     {"q": ["abc", "hgfe"], "source": "auto", "target": "tgt", "alternatives": 2}, {}, None),
    ("translate-beams", "POST", "/translate",
     {"q": "abcdef", **PAIR, "num_beams": 3, "max_new_tokens": 5}, {}, None),
    ("translate-attention", "POST", "/translate",
     {"q": "abca", **PAIR, "return_attention": True, "alternatives": 1}, {}, None),
    ("translate-form", "POST", "/translate", None,
     {"content-type": "application/x-www-form-urlencoded"},
     b"q=bad&source=src&target=tgt&num_beams=2"),
    ("translate-query", "POST", "/translate?q=cab&source=src&target=tgt&alternatives=1",
     None, {}, b""),
    ("error-missing-q", "POST", "/translate", {**PAIR}, {}, None),
    ("error-pair", "POST", "/translate", {"q": "a", "source": "fr", "target": "tgt"}, {}, None),
    ("error-type", "POST", "/translate", {"q": 5, **PAIR}, {}, None),
    ("error-blank", "POST", "/translate", {"q": ["a", " "], **PAIR}, {}, None),
    ("error-beams", "POST", "/translate", {"q": "a", **PAIR, "num_beams": 99}, {}, None),
    ("error-beams-type", "POST", "/translate", {"q": "a", **PAIR, "num_beams": "x"}, {}, None),
    ("error-json", "POST", "/translate", None, {"content-type": "application/json"}, b'{"q": "a",'),
    ("error-media", "POST", "/translate", None, {"content-type": "text/plain"}, b"q=a"),
    ("error-long", "POST", "/translate", {"q": "a" * 60, **PAIR}, {}, None),
    ("detect", "POST", "/detect", {"q": "abc"}, {}, None),
    ("not-found", "GET", "/nowhere", None, {}, None),
    ("page", "GET", "/", None, {}, None),
    ("openapi", "GET", "/openapi.json", None, {}, None),
]  # fmt: skip


def train_models() -> None:
    from conftest import LETTERS, train_reverse

    from heedful.checkpoint.model_dir import GenerationConfig, save_model_dir
    from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig
    from heedful.data.tokenizers import CharTokenizer

    tokenizer = CharTokenizer.train([LETTERS])
    configs = {
        "transformer": ModelConfig(
            d_model=16,
            num_heads=2,
            d_ff=32,
            dropout=0.0,
            encoder=TextEncoderConfig(layers=2),
            decoder=DecoderConfig(layers=2),
        ),
        "rnn": ModelConfig(arch="rnn", d_model=16, hidden_size=32, dropout=0.0),
    }
    for name, config in configs.items():
        model = train_reverse(config, tokenizer, steps=400)
        generation = GenerationConfig(num_beams=2, max_len_ratio=1.5, max_len_offset=4)
        save_model_dir(HERE / "models" / name, model, config, tokenizer, tokenizer, generation)


def traces() -> dict[str, str]:
    """name -> file text: the traces a user saves, and the viewer page of one."""
    from heedful.inference.translator import Translator
    from heedful.visualize.html import render_html
    from heedful.visualize.trace import build_trace

    out = {}
    for name in ("transformer", "rnn"):
        translator = Translator.load(HERE / "models" / name)
        for label, beams, n_best in (("greedy", 1, 1), ("beam", 3, 2)):
            trace = build_trace(translator, SENTENCE, num_beams=beams, n_best=n_best)
            path = HERE / "out.json"
            trace.save(path)
            out[f"trace-{name}-{label}.json"] = path.read_text(encoding="utf-8")
            path.unlink()
            if label == "beam":
                out[f"viewer-{name}.html"] = render_html(trace)
    return out


def http_answers() -> dict[str, str]:
    """name -> "STATUS content-type\\n\\nbody" for each request of REQUESTS."""
    from fastapi.testclient import TestClient

    from heedful.server import ServerLimits, create_app

    limits = ServerLimits(max_chars=50, max_items=4, max_num_beams=4, max_new_tokens=64)
    app = create_app(HERE / "models" / "transformer", limits)
    out = {}
    with TestClient(app) as client:
        for _ in range(200):
            if client.get("/ready").status_code == 200:
                break
            time.sleep(0.05)
        for name, method, path, body, headers, raw in REQUESTS:
            kwargs = {"headers": headers}
            if body is not None:
                kwargs["json"] = body
            elif raw is not None:
                kwargs["content"] = raw
            answer = client.request(method, path, **kwargs)
            kind = answer.headers.get("content-type", "")
            out[f"http-{name}.txt"] = f"{answer.status_code} {kind}\n\n{answer.text}"
    return out


def outputs() -> dict[str, str]:
    torch.set_num_threads(1)
    return {**traces(), **http_answers()}


if __name__ == "__main__":
    if "--models" in sys.argv:
        train_models()
    expected = HERE / "expected"
    expected.mkdir(exist_ok=True)
    for name, text in outputs().items():
        (expected / name).write_text(text, encoding="utf-8")
        print(f"wrote {expected / name} ({len(text):,} characters)")
