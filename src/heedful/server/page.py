"""The web page at GET /: a form with example inputs, and the viewer of heedful.visualize.html
(the translation, the beam's hypotheses and the attention) in an iframe as tall as its content.

The page is assets/index.html with assets/page.css, visualize's frame.js, assets/heads.js (the
heads to switch off) and assets/page.js inlined (it loads nothing, so it works offline); its
data, the language pair, the heads of a Transformer and viewer_template()'s pieces of the
viewer page, is JSON in a <script> element, which page.js fills with each answer's trace. The
viewer stays in an iframe, not in the page itself: its ids, styles and script then cannot clash
with the page's, whatever the viewer grows into.
"""

from __future__ import annotations

import functools
import re
from html import escape
from importlib import resources

from heedful.safejson import for_script
from heedful.server.limits import ServerLimits
from heedful.visualize.html import frame_script, viewer_template

LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "fi": "Finnish", "fr": "French", "hi": "Hindi",
    "hu": "Hungarian", "it": "Italian", "ja": "Japanese", "ko": "Korean", "nl": "Dutch",
    "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sv": "Swedish",
    "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip


# Inputs to try, by the model's source language (or demo task): short sentences a model of it
# can read. One not listed gets none: the page does not guess what a model was trained on.
EXAMPLES = {
    "en": ("A man rides a bike.", "Two dogs are playing in the snow.",
           "A little girl is reading a book."),
    "de": ("Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.",
           "Ein kleines Mädchen liest ein Buch."),
    "fr": ("Un homme fait du vélo.", "Deux chiens jouent dans la neige.",
           "Une petite fille lit un livre."),
    "es": ("Un hombre anda en bicicleta.", "Dos perros juegan en la nieve.",
           "Una niña lee un libro."),
    # heedful demo --task dialogue: the illustrated seq2seq articles' chatbot (tasks/dialogue.py)
    "dialogue": ("Hi, How are you?", "What is your name?", "Hello, how is it going?"),
}  # fmt: skip


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


def examples(source: str) -> tuple[str, ...]:
    """The example inputs for a model that reads `source`; the dates models of `heedful demo`
    (source "dates") get one date in the task's own formats."""
    if source == "dates":
        from heedful.tasks.dates import DATE_FORMAT_EXAMPLES

        return tuple(DATE_FORMAT_EXAMPLES)
    return EXAMPLES.get(source, ())


def _examples_html(texts: tuple[str, ...]) -> str:
    if not texts:
        return ""
    buttons = "".join(f'<button type="button">{escape(text)}</button>' for text in texts)
    return f'  <div id="examples" class="examples"><span>Try:</span>{buttons}</div>'


def head_shape(translator) -> dict | None:
    """{kind: [heads of each layer]} of a model whose heads can be switched off (a heedful
    Transformer on the torch engine: inference/heads.py), or None."""
    if not translator.capabilities.masks or translator.source.kind != "text":
        return None
    from heedful.inference.heads import HeadError, attention_layers

    try:
        layers = attention_layers(translator.model)
    except HeadError:  # an RNN, a Hugging Face model: no heads to switch off
        return None
    return {kind: [a.num_heads for a in stack] for kind, stack in layers.items()}


@functools.cache
def _asset(name: str) -> str:
    return (resources.files(__package__) / "assets" / name).read_text(encoding="utf-8")


def index_page(
    languages: tuple[str, str],
    limits: ServerLimits,
    default_beams: int,
    attention: bool = True,
    heads: dict | None = None,
) -> str:
    """The page at /. attention: the engine gives attention weights (torch), so the page shows
    each output in the viewer; without (ctranslate2) it lists the outputs. heads: the heads of
    each layer by kind (head_shape), which the page can switch off; None: none to switch."""
    src, tgt = languages
    data = {"source": src, "target": tgt, "viewer": viewer_template(), "attention": attention}
    data["heads"] = heads
    beams = "".join(
        f'<option value="{n}"{" selected" if n == default_beams else ""}>{n}</option>'
        for n in range(1, limits.max_num_beams + 1)
    )
    parts = {
        "PAIR": escape(f"{language_name(src)} → {language_name(tgt)}"),
        "SRC": escape(src),
        "MAXCHARS": str(limits.max_chars),
        "BEAMS": beams,
        "EXAMPLES": _examples_html(examples(src)),
        "DATA": for_script(data),
        # the files end with a newline, which the template has already
        "CSS": _asset("page.css").removesuffix("\n"),
        "JS": frame_script() + _asset("heads.js") + _asset("page.js").removesuffix("\n"),
    }
    # One pass, so that a marker inside the data or an asset is never itself replaced.
    return re.sub(r"@@([A-Z]+)@@", lambda match: parts[match.group(1)], _asset("index.html"))
