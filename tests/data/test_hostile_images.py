"""Hostile inputs for images (data/images.py) and caption files (data/caption_files.py): each
ends in a named error (ImageError naming the file; CorpusError naming the key, file and line or
JSON entry) or in correct behaviour that the case checks."""

from __future__ import annotations

import io
import json
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from heedful.data.corpus import CorpusError
from heedful.data.images import (
    MAX_FILE_BYTES,
    ImageError,
    ImageTransform,
    image_pixels,
    load_image,
    read_captions,
)

TRANSFORM = ImageTransform(size=8)


def encoded(image: Image.Image, fmt: str = "PNG", **options) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def png_claiming(width: int, height: int) -> bytes:
    """A 1 × 1 PNG whose header (with a correct checksum) claims width × height pixels."""
    data = bytearray(encoded(Image.new("L", (1, 1))))
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def bad_crc_png() -> bytes:
    data = bytearray(encoded(Image.new("RGB", (6, 6), (1, 2, 3))))
    data[-20] ^= 0xFF  # inside the IDAT chunk's data or checksum
    return bytes(data)


def animated_gif() -> bytes:
    frames = [Image.new("RGB", (3, 3), c) for c in ((0, 255, 0), (255, 0, 0))]
    return encoded(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=50)


def cmyk_jpeg() -> bytes:
    return encoded(Image.new("CMYK", (5, 4), (0, 0, 255, 0)), "JPEG")


def uniform(colour) -> Callable[[np.ndarray], None]:
    def check(pixels: np.ndarray) -> None:
        assert (pixels == colour).all(), pixels[0, 0]

    return check


def shape(height: int, width: int) -> Callable[[np.ndarray], None]:
    def check(pixels: np.ndarray) -> None:
        assert pixels.shape == (height, width, 3)

    return check


def strip(width: int, height: int) -> bytes:
    """A black width × height PNG: a few kB for a strip of millions of pixels."""
    return encoded(Image.new("L", (width, height)))


def sixteen_bit_transparent() -> bytes:
    """A 16-bit grayscale PNG whose tRNS makes the grey 1000 transparent: one pixel of 5140
    (20 in 8 bits) and five transparent ones."""
    values = np.full((2, 3), 1000, dtype=np.uint16)
    values[0, 0] = 5140
    return encoded(Image.fromarray(values), transparency=1000)


def top_left_then_white(first: int) -> Callable[[np.ndarray], None]:
    def check(pixels: np.ndarray) -> None:
        expected = np.full(pixels.shape, 255, dtype=np.uint8)
        expected[0, 0] = first
        np.testing.assert_array_equal(pixels, expected)

    return check


def fifo(folder: Path) -> Path:
    os.mkfifo(folder / "pipe.png")
    return folder / "pipe.png"


def link_loop(folder: Path) -> Path:
    (folder / "a.png").symlink_to(folder / "b.png")
    (folder / "b.png").symlink_to(folder / "a.png")
    return folder / "a.png"


def sparse_huge(folder: Path) -> Path:
    path = folder / "huge.png"
    with open(path, "wb") as f:
        f.write(encoded(Image.new("RGB", (1, 1))))
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: no disk is used
    return path


@dataclass
class Case:
    reader: (
        str  # image: load_image and image_pixels; resize: load_image; flickr / coco: read_captions
    )
    content: bytes | str | Callable[[Path], Path]  # the file, or (folder) -> a path
    words: tuple[str, ...] = ()  # in the error; none: the input must be read
    check: Callable | None = None  # on image_pixels' array, or read_captions' list
    transform: ImageTransform = TRANSFORM


def flickr(text: str | bytes, *words: str, check=None) -> Case:
    content = text if isinstance(text, bytes) else text.encode()
    return Case("flickr", content, words, check)


def coco(data, *words: str, check=None) -> Case:
    content = data if isinstance(data, (bytes, str)) else json.dumps(data)
    return Case("coco", content.encode() if isinstance(content, str) else content, words, check)


def one_image(data_images, annotations) -> dict:
    return {"images": data_images, "annotations": annotations}


def captions_of(*expected: tuple[str, list[str]]):
    def check(got) -> None:
        assert [(path.name, caps) for path, caps in got] == list(expected)

    return check


GOOD = [{"id": 1, "file_name": "a.png"}]
ANN = [{"image_id": 1, "caption": "a red square"}]

IMAGE_CASES = [
    pytest.param(Case("image", b"", ("empty file",)), id="row0-empty-file"),
    pytest.param(Case("image", png_claiming(20_000, 20_000),
                      ("refused before decoding", "400000000 pixels", "decompression bomb")),
                 id="row0-huge-20000x20000-header"),
    pytest.param(Case("image", png_claiming(7_000, 7_000),
                      ("49,000,000", "limit of 40,000,000", "max_pixels")),
                 id="row0-huge-over-max-pixels"),
    pytest.param(Case("image", encoded(Image.new("L", (1200, 1000))),
                      ("1,200 × 1,000", "limit of 1,000,000"), transform=ImageTransform(
                          size=8, max_pixels=1_000_000)),
                 id="row0-decompression-bomb-under-a-lower-limit"),
    pytest.param(Case("image", png_claiming(20_000, 20_000), ("decompression bomb",),
                      transform=ImageTransform(size=8, max_pixels=10**12)),
                 id="row0-decompression-bomb-pillows-own-limit"),
    pytest.param(Case("image", sparse_huge, ("bytes, more than",)), id="row0-huge-file"),
    pytest.param(Case("image", encoded(Image.new("RGB", (40, 40), (9, 9, 9)))[:-40],
                      ("damaged image",)), id="row0-truncated-png"),
    pytest.param(Case("image", encoded(Image.fromarray(
        np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)), "JPEG")[:-200],
                      ("damaged image", "truncated")), id="row0-truncated-jpeg"),
    pytest.param(Case("image", encoded(Image.new("RGB", (4, 4)))[:30], ("a damaged one",)),
                 id="row0-png-header-only"),
    pytest.param(Case("image", bad_crc_png(), ("damaged image",)), id="row0-png-bad-checksum"),
    pytest.param(Case("image", b"just some text\n", ("not an image",)),
                 id="row0-wrong-type-text"),
    pytest.param(Case("image", b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\n",
                      ("not an image", "PNG, JPEG")), id="row0-wrong-type-eps-never-run"),
    pytest.param(Case("image", b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n", ("not an image",)),
                 id="row0-wrong-type-pdf"),
    pytest.param(Case("image", encoded(Image.new("F", (2, 2), float("nan")), "TIFF"),
                      ("mode 'F' is not supported",)), id="row0-non-finite-float-tiff"),
    pytest.param(Case("image", encoded(Image.new("I", (2, 2), -5), "TIFF"),
                      ("values from -5 to -5", "0..65535")), id="row0-wrong-range-32-bit"),
    pytest.param(Case("image", "\ufeffnot an image".encode("utf-16"), ("not an image",)),
                 id="row0-wrong-encoding-utf16-text"),
    pytest.param(Case("image", lambda folder: folder, ("is a directory",)), id="directory"),
    pytest.param(Case("image", lambda folder: folder / "nothing.png", ("image file not found",)),
                 id="missing-file"),
    pytest.param(Case("image", fifo, ("not a regular file",)), id="fifo-never-blocks"),
    pytest.param(Case("image", link_loop, ("cannot read it",)), id="symbolic-link-loop"),
    pytest.param(Case("image", encoded(Image.new("RGB", (1, 1), (3, 4, 5))),
                      check=uniform((3, 4, 5))), id="one-pixel-works"),
    pytest.param(Case("image", encoded(Image.new("L", (3, 2), 77)), check=uniform(77)),
                 id="grayscale"),
    pytest.param(Case("image", encoded(Image.new("RGBA", (3, 2), (9, 9, 9, 0))),
                      check=uniform(255)), id="rgba-fully-transparent-is-white"),
    pytest.param(Case("image", encoded(Image.new("LA", (3, 2), (0, 255))), check=uniform(0)),
                 id="grayscale-alpha-opaque"),
    pytest.param(Case("image", cmyk_jpeg(), check=shape(4, 5)), id="cmyk-jpeg"),
    pytest.param(Case("image", encoded(Image.new("I;16", (3, 2), 65535)), check=uniform(255)),
                 id="sixteen-bit-png"),
    pytest.param(Case("image", encoded(Image.new("1", (3, 2), 1), "BMP"), check=uniform(255)),
                 id="bilevel-bmp"),
    pytest.param(Case("image", animated_gif(), check=uniform((0, 255, 0))),
                 id="animated-gif-first-frame"),
    pytest.param(Case("image", encoded(Image.new("RGB", (2, 2), (1, 2, 3)), "WEBP",
                                       lossless=True), check=uniform((1, 2, 3))),
                 id="webp-lossless"),
    pytest.param(Case("image", encoded(Image.new("RGB", (2, 5), (10, 20, 30)), "TIFF"),
                      check=shape(5, 2)), id="tiff-portrait"),
    pytest.param(Case("resize", strip(1, 400_000), ("1 × 400,000", "aspect ratio of 400,000:1",
                                                    "limit of 100:1", "refused before decoding")),
                 id="row2-elongated-1x400000"),
    pytest.param(Case("resize", strip(2_000_000, 1), ("2,000,000 × 1", "aspect ratio")),
                 id="row2-elongated-2000000x1"),
    pytest.param(Case("resize", strip(10, 500), ("10 × 500", "resized to 204,800 pixels",
                                                 "limit of 100,000 (max_pixels)"),
                      transform=ImageTransform(size=64, max_pixels=100_000)),
                 id="row2-resize-over-max-pixels"),
    pytest.param(Case("image", strip(1, 100), check=shape(100, 1)),
                 id="strip-at-the-aspect-limit"),
    pytest.param(Case("image", sixteen_bit_transparent(), check=top_left_then_white(20)),
                 id="sixteen-bit-grey-transparency-is-white"),
    pytest.param(Case("image", encoded(Image.new("L", (3, 2), 51), bits=4, transparency=3),
                      check=uniform(255)), id="four-bit-grey-transparency-is-white"),
    pytest.param(Case("image", encoded(Image.new("L", (3, 2), 85), bits=2, transparency=1),
                      check=uniform(255)), id="two-bit-grey-transparency-is-white"),
]  # fmt: skip

CAPTION_CASES = [
    pytest.param(flickr("", check=captions_of()), id="row0-empty-captions-file"),
    pytest.param(flickr("a.png#0\t" + "word " * 200_000 + "\n",
                        check=lambda got: len(got[0][1][0]) == 999_999),
                 id="row0-huge-caption-read-whole"),
    pytest.param(flickr(b"a.png#0\tcaf\xe9\n", "line 1", "invalid UTF-8 byte 0xe9",
                        "byte offset 11"), id="row0-wrong-encoding-latin1"),
    pytest.param(flickr("a.png#0\tone\n".encode("utf-16"), "UTF-16"),
                 id="row0-wrong-encoding-utf16"),
    pytest.param(flickr(b"a.png#0\tone\nb.png\x00\x00\n", "line 2", "NUL byte"),
                 id="row0-binary-line"),
    pytest.param(coco('{"images": [{"id": 1, "file_name": "a.png"}], "annot',
                      "not valid JSON"), id="row0-truncated-coco"),
    pytest.param(coco(one_image([{"id": "1", "file_name": "a.png"}], ANN), "images[0]",
                      "field 'id' must be a whole number, got a string"),
                 id="row0-wrong-type-image-id"),
    pytest.param(coco(one_image([{"id": True, "file_name": "a.png"}], ANN),
                      "must be a whole number, got true or false"), id="row0-boolean-image-id"),
    pytest.param(coco(b'{"images": [{"id": NaN, "file_name": "a.png"}], "annotations": []}',
                      "images[0]", "'id' must be a whole number"), id="row0-non-finite-image-id"),
    pytest.param(coco(one_image(GOOD, [{"image_id": 1, "caption": 5}]), "annotations[0]",
                      "'caption' must be a string"), id="row0-wrong-type-caption"),
    pytest.param(coco([GOOD, ANN], "expected an object, got an array"),
                 id="row0-wrong-type-top-level"),
    pytest.param(coco(b'{"images": [], "annotations": []}', check=captions_of()),
                 id="coco-no-images"),
    pytest.param(flickr("a.png#0\tone\n\nb.png#0\ttwo\n", "line 2", "blank line"),
                 id="blank-line"),
    pytest.param(flickr("a.png one caption\n", "line 1", "found 0 TABs"), id="line-without-tab"),
    pytest.param(flickr("a.png\tone\ttwo\n", "line 1", "found 2 TABs"), id="line-with-two-tabs"),
    pytest.param(flickr("a.png#0\t   \n", "line 1", "empty caption"), id="empty-caption"),
    pytest.param(flickr("a.png#0\tone\nb.png#0\tx\nnope.png#0\ttwo\n", "line 3",
                        "image file not found", "nope.png"), id="missing-image-names-line"),
    pytest.param(flickr("a.png#0\tone\na.png#0\tagain\n", "line 2", "a.png#0 again",
                        "first on line 1"), id="caption-number-twice"),
    pytest.param(flickr("../a.png\tout\n", "leaves the image directory"),
                 id="image-name-leaves-the-folder"),
    pytest.param(flickr("/etc/hostname\tout\n", "leaves the image directory"),
                 id="absolute-image-name"),
    pytest.param(flickr("sub\tdirectory\n", "line 1", "is not a file"),
                 id="image-name-is-a-directory"),
    pytest.param(flickr("\ufeffa.png#0\tone\r\nb.png#0\ttwo\r\na.png#1\tthree",
                        check=captions_of(("a.png", ["one", "three"]), ("b.png", ["two"]))),
                 id="bom-crlf-no-final-newline"),
    pytest.param(flickr("image_name| comment_number| comment\na.png| 0| one\nb.png| x| two\n",
                        "line 3", "comment_number 'x'"), id="results-csv-bad-number"),
    pytest.param(flickr("image_name| comment_number| comment\na.png| 0 A dog .\n", "line 2",
                        "two '|'", "found 1"), id="results-csv-missing-delimiter"),
    pytest.param(coco(b'{"images": [], "images": [], "annotations": []}', "appears twice"),
                 id="coco-repeated-key"),
    pytest.param(coco({"images": GOOD}, "no field 'annotations'"), id="coco-no-annotations"),
    pytest.param(coco(one_image([{"id": 1}], ANN), "images[0]", "no field 'file_name'"),
                 id="coco-image-without-file-name"),
    pytest.param(coco(one_image(GOOD, [{"image_id": 2, "caption": "x"}]), "annotations[0]",
                      "image_id 2 is not the id"), id="coco-unknown-image-id"),
    pytest.param(coco(one_image(GOOD + [{"id": 1, "file_name": "b.png"}], ANN), "images[1]",
                      "image id 1 again", "images[0]"), id="coco-duplicate-image-id"),
    pytest.param(coco(one_image([{"id": 4, "file_name": "gone.png"}],
                                [{"image_id": 4, "caption": "x"}]),
                      "images[0] (id 4, captioned at annotations[0])", "image file not found"),
                 id="coco-missing-image-file"),
    pytest.param(coco(one_image(GOOD, [{"image_id": 1, "caption": "bad \ud800"}]),
                      "annotations[0]", "lone surrogate"), id="coco-lone-surrogate"),
    pytest.param(coco(one_image(GOOD, [{"image_id": 1, "caption": "a\u0000b"}]),
                      "annotations[0]", "NUL"), id="coco-nul-in-caption"),
    pytest.param(coco(one_image(GOOD, [{"image_id": 1, "caption": " \n"}]), "annotations[0]",
                      "empty caption"), id="coco-empty-caption"),
    pytest.param(flickr("a.png#0\tone\na.png#00\ttwo\n", "line 2", "a.png#00 again",
                        "first on line 1"), id="flickr-number-with-a-leading-zero"),
    pytest.param(flickr("a.png#0\tone\n./a.png#0\ttwo\n", "line 2", "./a.png#0 again",
                        "first on line 1"), id="flickr-dot-slash-is-the-same-image"),
    pytest.param(flickr("a.png#1\tone\na.png#" + "0" * 5000 + "1\ttwo\n", "line 2", "again"),
                 id="flickr-number-of-5000-digits"),
    pytest.param(flickr("a.png#0\tone\n./a.png#1\ttwo\n",
                        check=captions_of(("a.png", ["one", "two"]))),
                 id="flickr-dot-slash-captions-grouped"),
    pytest.param(flickr("a.png#\u00b2\tone\n", "line 1", "image file not found", "a.png#\u00b2"),
                 id="flickr-superscript-is-no-caption-number"),
    pytest.param(flickr("image_name| comment_number| comment\na.png| 0| one\n./a.png| 00| two\n",
                        "line 3", "again", "first on line 2"), id="results-csv-same-caption"),
    pytest.param(flickr("image_name| comment_number| comment\na.png| \u0663| one\n", "line 2",
                        "comment_number '\u0663'"), id="results-csv-arabic-indic-digit"),
    pytest.param(coco(one_image(GOOD + [{"id": 2, "file_name": "./a.png"}],
                                ANN + [{"image_id": 2, "caption": "x"}]),
                      "images[1]", "'./a.png' is the image of images[0] again"),
                 id="coco-one-image-under-two-ids"),
]  # fmt: skip

CASES = IMAGE_CASES + CAPTION_CASES


def _run_image(case: Case, path: Path) -> None:
    if case.words:
        limit = case.transform.max_pixels
        readers = [lambda: load_image(path, case.transform)]
        if case.reader == "image":  # image_pixels does not resize: what it decodes is the input
            readers.append(lambda: image_pixels(path, None, limit))
        for read in readers:
            with pytest.raises(ImageError) as caught:
                read()
            message = str(caught.value)
            assert message.startswith(str(path)), message
            for word in case.words:
                assert word in message, (word, message)
        return
    tensor = load_image(path, case.transform)
    assert tensor.shape == (3, 8, 8) and bool(tensor.isfinite().all())
    case.check(image_pixels(path))


def _run_captions(case: Case, path: Path, folder: Path) -> None:
    images = folder / "images"
    images.mkdir()
    (images / "sub").mkdir()
    for name in ("a.png", "b.png"):
        Image.new("RGB", (2, 2)).save(images / name)
    if case.words:
        with pytest.raises(CorpusError) as caught:
            read_captions(path, images, case.reader, key="data.captions")
        message = str(caught.value)
        assert message.startswith("data.captions: "), message
        for word in case.words:
            assert word in message, (word, message)
        return
    case.check(read_captions(path, images, case.reader, key="data.captions"))


@pytest.mark.parametrize("case", CASES)
def test_hostile_image_input(tmp_path, case: Case):
    if callable(case.content):
        path = case.content(tmp_path)
    else:
        images = case.reader in ("image", "resize")
        path = tmp_path / ("input.png" if images else "captions.txt")
        path.write_bytes(case.content)
    if case.reader in ("image", "resize"):
        _run_image(case, path)
    else:
        _run_captions(case, path, tmp_path)
