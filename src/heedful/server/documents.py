"""What of a text the model translates: the pieces of plain text, of an HTML document, of a
file; and the text put back together from their translations.

A Document is a sequence of parts: kept text (markup, whitespace, a blank item), copied as it
came, and slots, each a text the model translates. /translate with format=html and
/translate_file both read their input into one, so the model only ever sees text, and the
answer keeps every byte of markup where it was.

HTML is read with the standard library's html.parser, the parser browsers' tokenizer is
modelled on, never with regexes: it takes broken and unclosed markup as a browser would, and
it does not recurse, so nesting costs nothing. The parser reports where each construct starts;
the text between two starts is that construct as written, so tags, comments and entities in
kept parts are copied verbatim, and only text nodes are decoded, translated and escaped again.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from html.parser import HTMLParser

from heedful.server.fields import is_blank

# Elements whose contents are not text to read: code and style, kept as they are
RAW_ELEMENTS = frozenset({"script", "style", "noscript", "template", "textarea"})


@dataclass(frozen=True)
class Slot:
    """A text the model translates; `markup`: its translation is written into HTML, escaped.
    `offset`: where it starts in the input (a file's messages name the line)."""

    text: str
    markup: bool = False
    offset: int = 0


@dataclass(frozen=True)
class Document:
    """Kept text (str) and slots, in order; filled with one translation per slot."""

    parts: tuple[str | Slot, ...]

    @property
    def slots(self) -> list[Slot]:
        return [part for part in self.parts if isinstance(part, Slot)]

    def fill(self, translations: list[str]) -> str:
        """The document with each slot's translation in its place (escaped in HTML)."""
        given = iter(translations)
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            else:
                text = next(given)
                out.append(html.escape(text, quote=False) if part.markup else text)
        return "".join(out)


def _trimmed(text: str, offset: int, markup: bool) -> list[str | Slot]:
    """A text as kept whitespace around a slot (none when blank: nothing to translate)."""
    if is_blank(text):
        return [text] if text else []
    core = text.strip()
    start = text.index(core)
    lead, trail = text[:start], text[start + len(core) :]
    return [p for p in (lead, Slot(core, markup, offset + start), trail) if p != ""]


def plain(text: str) -> Document:
    """One text of /translate: itself one slot, exactly as sent; a blank one kept as it came."""
    return Document((text,) if is_blank(text) else (Slot(text),))


def lines(text: str, offset: int = 0, markup: bool = False) -> list[str | Slot]:
    """Each line a slot of its own, its spaces and line ending kept (a file's text)."""
    parts: list[str | Slot] = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        parts += _trimmed(body, offset, markup)
        if len(body) < len(line):
            parts.append(line[len(body) :])
        offset += len(line)
    return parts


class _Nodes(HTMLParser):
    """Where each construct of a document starts, and which are text to translate."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.starts: list[tuple[int, int, str | None]] = []  # (line, column, text or None)
        self.raw: str | None = None  # inside <script> and its kind: the element's name

    def _mark(self, text: str | None) -> None:
        self.starts.append((*self.getpos(), text))

    def handle_starttag(self, tag, attrs):
        self._mark(None)
        if tag in RAW_ELEMENTS and self.raw is None:
            self.raw = tag

    def handle_startendtag(self, tag, attrs):
        self._mark(None)

    def handle_endtag(self, tag):
        self._mark(None)
        if tag == self.raw:
            self.raw = None

    def handle_data(self, data):
        self._mark(data if self.raw is None else None)

    def handle_comment(self, data):
        self._mark(None)

    def handle_decl(self, decl):
        self._mark(None)

    def handle_pi(self, data):
        self._mark(None)

    def unknown_decl(self, data):
        self._mark(None)


def _offsets(text: str) -> list[int]:
    """Where each line starts (html.parser counts lines by \\n, from 1)."""
    starts = [0, 0]
    starts += [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    return starts


def markup(text: str, by_line: bool = False) -> Document:
    """An HTML document (or fragment): its text nodes outside script, style and the like are
    slots, trimmed of their surrounding whitespace; everything else is kept as written.
    by_line: a text node's lines are slots of their own (a file, whose paragraphs span lines)."""
    parser = _Nodes()
    parser.feed(text)
    parser.close()
    line_starts = _offsets(text)
    starts = [line_starts[line] + column for line, column, _ in parser.starts]
    ends = [*starts[1:], len(text)]
    parts: list[str | Slot] = []
    node, span = "", (0, 0)  # text nodes run together: "a < b" is reported in three pieces
    for (_, _, data), start, end in zip(parser.starts, starts, ends):
        if data is not None:
            node, span = node + data, (span[0] if node else start, end)
            continue
        parts += _text_node(node, text[span[0] : span[1]], span[0], by_line)
        node = ""
        parts.append(text[start:end])
    parts += _text_node(node, text[span[0] : span[1]], span[0], by_line)
    head = text[: starts[0]] if starts else text  # nothing before the first construct
    return Document(tuple(p for p in ([head] if head else []) + parts if p != ""))


def _text_node(node: str, written: str, offset: int, by_line: bool) -> list[str | Slot]:
    """A text node (decoded) as slots and the whitespace around them, escaped again; a
    blank one is kept as `written`, entities and all."""
    if not node:
        return []
    if is_blank(node):
        return [written] if written else []
    pieces = lines(node, offset, markup=True) if by_line else _trimmed(node, offset, True)
    return [p if isinstance(p, Slot) else html.escape(p, quote=False) for p in pieces]
