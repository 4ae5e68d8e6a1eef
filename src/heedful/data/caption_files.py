"""Caption files, read as strictly as text corpora (data/corpus.py): Flickr8k / Flickr30k token
files, Flickr30k's results.csv, and COCO captions JSON; each gives (image path, its captions).

Every problem stops the reading with a CorpusError naming the config key, the file and the line
(or the JSON array index) and what to fix: a captions file that silently drops or misplaces
images trains a model that looks fine and captions badly. That includes a missing image file.
A damaged image is found later, when it is decoded (data/images.py), as an ImageError naming it.

The "flickr" format is line based, read by corpus.iter_lines (UTF-8, a byte-order mark dropped,
the line and byte offset of an invalid byte named). Each line is one of
- `1000268201_693b08cb0e.jpg#0<TAB>A child in a pink dress ...` (Flickr8k.token.txt, Flickr30k's
  results_20130124.token): one TAB; a `#N` of ASCII digits ending the image name is the
  caption's number, and the same image and number twice is an error, however spelled (`a.png#0`,
  `./a.png#00`);
- `image.jpg<TAB>a caption` (the same without numbers);
- `image.jpg| 0| a caption` when the first line is Flickr30k results.csv's header,
  `image_name| comment_number| comment`.
A blank line, a line without one TAB (or, in results.csv, without two `|`) are errors.

In both formats a caption's surrounding whitespace is removed (COCO captions often end in a
space or a newline); a caption that is then empty, or that holds NUL or (from a JSON escape) a
lone surrogate, is an error. Images come in the order they first appear (the "images" array for
COCO, where an image without captions is left out), each with its captions in file order. Image
names are relative to `image_dir` and may not leave it (no absolute paths, no `..`); in COCO,
two captioned entries naming one image file is an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from heedful.data.corpus import CorpusError, iter_lines, json_type

FORMATS = ("flickr", "coco")
CSV_HEADER = ("image_name", "comment_number", "comment")


def _caption(text: str, fail) -> str:
    """A caption without its surrounding whitespace; empty, NUL or lone surrogates are errors."""
    caption = text.strip()
    if not caption:
        raise fail("empty caption")
    if "\0" in caption:
        raise fail(f"the caption holds NUL at character {text.index(chr(0))}")
    try:
        caption.encode("utf-8")
    except UnicodeEncodeError as error:  # JSON's "\ud800" escape: not text
        raise fail(f"the caption holds a lone surrogate at character {error.start}") from None
    return caption


class _Images:
    """Image names -> checked paths under image_dir, each file looked up once."""

    def __init__(self, image_dir: Path, key: str):
        if not image_dir.is_dir():
            state = "is not a directory" if image_dir.exists() else "does not exist"
            raise CorpusError(f"{key}: the image directory {image_dir} {state}")
        self.image_dir, self.found = image_dir, {}

    def path(self, name: str, fail) -> Path:
        if name not in self.found:
            relative = Path(name)
            if not name.strip():
                raise fail("empty image name")
            if relative.is_absolute() or ".." in relative.parts:
                raise fail(f"image name {name!r} leaves the image directory {self.image_dir}")
            path = self.image_dir / relative  # pathlib drops '.': ./a.png is a.png
            if not path.is_file():
                state = "is not a file" if path.exists() else "image file not found"
                raise fail(f"{state}: {path}")
            self.found[name] = path
        return self.found[name]


# ---------------------------------------------------------------------------------------------
# Flickr8k / Flickr30k
# ---------------------------------------------------------------------------------------------


def _split_number(image: str) -> tuple[str, str | None]:
    """`name.jpg#3` -> ("name.jpg", "3"); a name without a numeric `#N` ending is whole."""
    name, hash_sign, number = image.rpartition("#")
    if hash_sign and name and _is_number(number):
        return name, number
    return image, None


def _is_number(text: str) -> bool:
    """ASCII digits only: str.isdigit() also passes '²' and '٣', which are no caption numbers."""
    return text.isascii() and text.isdigit()


def _same_number(number: str) -> str:
    """'0', '00' and '000' are one caption number; compared as text, since int() refuses more
    than 4,300 digits."""
    return number.lstrip("0") or "0"


def _csv_fields(line: str, where: str) -> tuple[str, str, str]:
    """results.csv's `image_name| comment_number| comment`, each field stripped."""
    fields = line.split("|", 2)
    if len(fields) != 3:
        raise CorpusError(
            f"{where}: expected image_name| comment_number| comment (two '|'), "
            f"found {len(fields) - 1}"
        )
    image, count, text = (f.strip() for f in fields)
    if not _is_number(count):
        raise CorpusError(f"{where}: comment_number {count!r} is not a whole number")
    return image, count, text


def _flickr_lines(path: Path, key: str) -> Iterator[tuple[int, str, str | None, str]]:
    """(line number, image name, caption number or None, caption text) per line."""
    csv = False
    for number, line in enumerate(iter_lines(path, key), start=1):
        where = f"{key}: {path}: line {number}"
        if number == 1 and tuple(f.strip() for f in line.split("|")) == CSV_HEADER:
            csv = True
            continue
        if not line.strip():
            raise CorpusError(f"{where}: blank line; every line holds an image and a caption")
        if csv:
            yield number, *_csv_fields(line, where)
            continue
        tabs = line.count("\t")
        if tabs != 1:
            raise CorpusError(f"{where}: expected image TAB caption (one TAB), found {tabs} TABs")
        image, text = line.split("\t")
        yield number, *_split_number(image), text


def read_flickr(path: str | Path, image_dir: str | Path, key: str) -> list[tuple[Path, list[str]]]:
    """(image path, captions) from a Flickr token file or results.csv (module docstring)."""
    path, images = Path(path), _Images(Path(image_dir), key)
    grouped: dict[Path, list[str]] = {}
    seen: dict[tuple[Path, str], int] = {}
    for number, name, count, text in _flickr_lines(path, key):

        def fail(problem: str, number=number) -> CorpusError:
            return CorpusError(f"{key}: {path}: line {number}: {problem}")

        image = images.path(name, fail)
        if count is not None:  # a.png#0, ./a.png#00: one caption, however spelled
            which = (image, _same_number(count))
            if which in seen:
                first = seen[which]
                raise fail(f"caption {name}#{count} again (first on line {first}, the same image)")
            seen[which] = number
        grouped.setdefault(image, []).append(_caption(text, fail))
    return list(grouped.items())


# ---------------------------------------------------------------------------------------------
# COCO captions JSON
# ---------------------------------------------------------------------------------------------


def _field(record, field: str, kind: type, fail):
    """record[field] of `kind` (int means a whole number, never true/false)."""
    if not isinstance(record, dict):
        raise fail(f"expected an object, got {json_type(record)}")
    if field not in record:
        have = ", ".join(repr(k) for k in list(record)[:8]) or "none"
        raise fail(f"no field {field!r}; the object's fields: {have}")
    value = record[field]
    if not isinstance(value, kind) or isinstance(value, bool):
        wanted = {int: "a whole number", str: "a string", list: "an array"}[kind]
        raise fail(f"field {field!r} must be {wanted}, got {json_type(value)}")
    return value


def _coco_json(path: Path, key: str) -> tuple[list, list]:
    """The "images" and "annotations" arrays of a COCO captions file."""
    from heedful.io import CheckpointError, read_json

    try:
        data = read_json(path)
    except CheckpointError as error:  # missing, not UTF-8, invalid JSON, a repeated key
        raise CorpusError(f"{key}: {error}") from None

    def fail(problem: str) -> CorpusError:
        return CorpusError(f"{key}: {path}: {problem}")

    return _field(data, "images", list, fail), _field(data, "annotations", list, fail)


def read_coco(path: str | Path, image_dir: str | Path, key: str) -> list[tuple[Path, list[str]]]:
    """(image path, captions) from COCO captions JSON: {"images": [{"id", "file_name"}, ...],
    "annotations": [{"image_id", "caption"}, ...]}; other fields are ignored."""
    path, images = Path(path), _Images(Path(image_dir), key)
    image_list, annotations = _coco_json(path, key)

    def failing(where: str):
        return lambda problem: CorpusError(f"{key}: {path}: {where}: {problem}")

    names: dict[int, tuple[int, str]] = {}  # id -> (index in "images", file_name)
    for index, record in enumerate(image_list):
        fail = failing(f"images[{index}]")
        image_id = _field(record, "id", int, fail)
        if image_id in names:
            raise fail(f"image id {image_id} again (first at images[{names[image_id][0]}])")
        names[image_id] = index, _field(record, "file_name", str, fail)
    captions: dict[int, list[str]] = {}
    first: dict[int, int] = {}  # image id -> the index of its first annotation
    for index, record in enumerate(annotations):
        fail = failing(f"annotations[{index}]")
        image_id = _field(record, "image_id", int, fail)
        if image_id not in names:
            raise fail(f"image_id {image_id} is not the id of any entry of 'images'")
        text = _caption(_field(record, "caption", str, fail), fail)
        captions.setdefault(image_id, []).append(text)
        first.setdefault(image_id, index)
    out, entry_of = [], {}  # image path -> the index of its entry in "images"
    for image_id, (index, name) in names.items():
        if image_id in captions:
            where = f"images[{index}] (id {image_id}, captioned at annotations[{first[image_id]}])"
            image = images.path(name, failing(where))
            if image in entry_of:  # a.png and ./a.png under two ids: one image, listed twice
                raise failing(where)(f"{name!r} is the image of images[{entry_of[image]}] again")
            entry_of[image] = index
            out.append((image, captions[image_id]))
    return out


def read_captions(
    path: str | Path, image_dir: str | Path, format: str = "flickr", key: str = "captions"
) -> list[tuple[Path, list[str]]]:
    """(image path, its captions) for every captioned image of a captions file.

    format: "flickr" (token files and results.csv) or "coco" (captions JSON); see the module
    docstring for the rules. key: the config key the path came from, named in every error.
    """
    if format == "flickr":
        return read_flickr(path, image_dir, key)
    if format == "coco":
        return read_coco(path, image_dir, key)
    raise CorpusError(f"{key}: captions format {format!r} is not one of {', '.join(FORMATS)}")
