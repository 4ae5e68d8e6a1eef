"""The web page at GET /: a form, and the viewer of heedful.visualize.html in an iframe.

The page is assets/index.html with assets/page.css and assets/page.js inlined (it loads nothing,
so it works offline); its data, the language pair and viewer_template()'s pieces of the viewer
page, is JSON in a <script> element, which page.js fills with each answer's trace.
"""

from __future__ import annotations

import functools
import re
from html import escape
from importlib import resources

from heedful.safejson import for_script
from heedful.server.limits import ServerLimits
from heedful.visualize.html import viewer_template

LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "fi": "Finnish", "fr": "French", "hi": "Hindi",
    "hu": "Hungarian", "it": "Italian", "ja": "Japanese", "ko": "Korean", "nl": "Dutch",
    "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sv": "Swedish",
    "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


@functools.cache
def _asset(name: str) -> str:
    return (resources.files(__package__) / "assets" / name).read_text(encoding="utf-8")


def index_page(languages: tuple[str, str], limits: ServerLimits, default_beams: int) -> str:
    src, tgt = languages
    data = {"source": src, "target": tgt, "viewer": viewer_template()}
    beams = "".join(
        f'<option value="{n}"{" selected" if n == default_beams else ""}>{n}</option>'
        for n in range(1, limits.max_num_beams + 1)
    )
    parts = {
        "PAIR": escape(f"{language_name(src)} → {language_name(tgt)}"),
        "SRC": escape(src),
        "MAXCHARS": str(limits.max_chars),
        "BEAMS": beams,
        "DATA": for_script(data),
        # the files end with a newline, which the template has already
        "CSS": _asset("page.css").removesuffix("\n"),
        "JS": _asset("page.js").removesuffix("\n"),
    }
    # One pass, so that a marker inside the data or an asset is never itself replaced.
    return re.sub(r"@@([A-Z]+)@@", lambda match: parts[match.group(1)], _asset("index.html"))
