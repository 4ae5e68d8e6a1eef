"""Images for captioning: decoded strictly with Pillow, turned into RGB by one rule, resized and
normalised as torchvision's ImageNet preprocessing does, so that a pretrained backbone sees what
it was trained on.

Decoding (every fault is an ImageError naming the file, or `name` for bytes):
- Content decides, not the file name: a PNG called photo.jpg is a PNG. Only the formats in
  FORMATS are opened; EPS and the other formats Pillow hands to outside programs never are.
- Size is checked from the header before any pixel is decoded: more than
  `ImageTransform.max_pixels` (40 megapixels unless changed) is refused, so a small file that
  would expand to gigabytes (a decompression bomb) never does. Pillow's own limit,
  Image.MAX_IMAGE_PIXELS (about 89 megapixels), applies as well.
- A truncated or damaged file is refused (PNG checksums are verified); so is an empty one.
- The EXIF orientation tag is applied, so a phone's portrait photo stands upright.
- An animated GIF, WebP or multi-page TIFF gives its first frame (and a phone's multi-picture
  JPEG, MPO, its main picture).

Modes become RGB (8 bits per channel) by this rule:
- RGB as it is; 1 (bilevel), L (grayscale), P (palette), CMYK, YCbCr, RGBX by Pillow's
  convert("RGB") (CMYK without a colour profile: R = (255 − C)(255 − K) / 255, and so on).
- Transparency (LA, La, PA, RGBA, RGBa, or a palette or colour marked transparent) is
  composited on white: a logo on a transparent background looks as a browser shows it.
- 16-bit grayscale (I;16, I;16B, I;16L, and I holding 0..65535, as 16-bit PNGs decode) is
  scaled to 8 bits, round(v / 257), so 65535 is 255 and the whole range is kept, never clipped;
  a grey its PNG marks transparent is white; an I image with values outside 0..65535 is an
  error.
- Any other mode (F, LAB, HSV, ...) is an ImageError naming it.

Resizing (load_image): the shorter side becomes `size` (the longer one
size · long // short) with Pillow's antialiased bicubic filter, then the centre size × size
square is cut out (the first row and column kept are (h − size) // 2 and (w − size) // 2).
Every image works, a 1 × 1 one included (it is upsampled to a uniform square), unless the
resize would cost more than the input: a long side over MAX_ASPECT (100) times the short side,
or a resized size over max_pixels, is refused from the header (a 1.6 KB PNG of 1 × 400,000
would become 224 × 89,600,000 pixels). Then each channel c becomes
(pixel / 255 − mean[c]) / std[c], ImageNet's statistics by default.
"""

from __future__ import annotations

import io
import math
import os
import stat
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from heedful.data.caption_files import read_captions

__all__ = [
    "FORMATS",
    "ImageError",
    "ImageTransform",
    "check_images",
    "image_bytes",
    "image_pixels",
    "load_image",
    "normalize",
    "read_captions",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
MAX_PIXELS = 40_000_000  # 40 megapixels: more than any camera photo people caption
MAX_SIZE = 4096  # the largest square load_image makes
MAX_FILE_BYTES = 256 * 2**20  # an uncompressed 40-megapixel RGB image is 120 MB
MAX_ASPECT = 100  # long side / short side: a longer strip keeps under 1% of itself in the crop
FORMATS = ("PNG", "JPEG", "GIF", "BMP", "TIFF", "WEBP", "PPM")
_COLOUR = ("1", "L", "P", "RGB", "RGBX", "CMYK", "YCbCr")
_ALPHA = ("LA", "La", "PA", "RGBA", "RGBa")
_SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N", "I")


class ImageError(ValueError):
    """An image that cannot be used, or a bad ImageTransform; the message names the file."""


def _pil():
    """Pillow's Image and ImageOps modules: matplotlib depends on Pillow, so the core install
    has it, but a trimmed environment may not."""
    try:
        from PIL import Image, ImageOps
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "reading images needs Pillow (a dependency of matplotlib): pip install pillow"
        ) from None
    return Image, ImageOps


# ---------------------------------------------------------------------------------------------
# The transform: size, normalisation and the pixel limit, saved with a model
# ---------------------------------------------------------------------------------------------


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _triple(name: str, value, positive: bool) -> tuple[float, float, float]:
    """Three finite numbers (one per RGB channel), above 0 when `positive`."""
    if not isinstance(value, (list, tuple)) or len(value) != 3:
        raise ImageError(f"image transform: {name} must be 3 numbers (R, G, B), got {value!r}")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ImageError(f"image transform: {name} must be finite numbers, got {value!r}")
        if positive and v <= 0:
            raise ImageError(f"image transform: {name} must be above 0, got {value!r}")
    return tuple(float(v) for v in value)


@dataclass(frozen=True)
class ImageTransform:
    """How an image becomes a (3, size, size) tensor (see the module docstring)."""

    size: int = 224
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    max_pixels: int = MAX_PIXELS

    def __post_init__(self):
        if not _is_int(self.size) or not 1 <= self.size <= MAX_SIZE:
            raise ImageError(
                f"image transform: size must be a whole number from 1 to {MAX_SIZE}, "
                f"got {self.size!r}"
            )
        if not _is_int(self.max_pixels) or self.max_pixels < 1:
            raise ImageError(
                f"image transform: max_pixels must be a whole number above 0, "
                f"got {self.max_pixels!r}"
            )
        object.__setattr__(self, "mean", _triple("mean", self.mean, positive=False))
        object.__setattr__(self, "std", _triple("std", self.std, positive=True))

    def to_dict(self) -> dict:
        """Plain JSON types (lists, not tuples), as config.json stores it."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data) -> ImageTransform:
        """The inverse of to_dict; a missing field takes its default, an unknown one is an
        error (a typo would silently change nothing), a wrong type names the field."""
        if not isinstance(data, dict):
            raise ImageError(f"image transform: expected an object, got {type(data).__name__}")
        unknown = sorted(set(data) - {"size", "mean", "std", "max_pixels"})
        if unknown:
            raise ImageError(
                f"image transform: unknown field {unknown[0]!r}; the fields are size, mean, "
                "std, max_pixels"
            )
        return cls(**data)


# ---------------------------------------------------------------------------------------------
# Decoding: bytes -> an upright RGB picture
# ---------------------------------------------------------------------------------------------


def image_bytes(source: str | Path | bytes, name: str | None = None) -> tuple[bytes, str]:
    """(the file's bytes, what errors call it); anything but a readable regular file is an
    ImageError (a FIFO would block forever, a directory is a slip of the path)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), name or "image bytes"
    path = Path(source)
    where = name or str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ImageError(f"{where}: image file not found") from None
    except OSError as error:
        raise ImageError(f"{where}: cannot read it ({error.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise ImageError(f"{where}: is a directory, not an image file")
    if not stat.S_ISREG(info.st_mode):
        raise ImageError(f"{where}: not a regular file")
    if info.st_size > MAX_FILE_BYTES:
        raise ImageError(
            f"{where}: {info.st_size:,} bytes, more than the {MAX_FILE_BYTES:,} an image may have"
        )
    try:
        return path.read_bytes(), where
    except OSError as error:  # permissions, an I/O error
        raise ImageError(f"{where}: cannot read it ({error.strerror})") from None


def _check_resize(width: int, height: int, where: str, size: int, max_pixels: int) -> None:
    """Refuse, from the header, a picture whose resize would cost more than the limits: the
    shorter side is scaled to `size` first, so a 1 × 400,000 strip would become 224 ×
    89,600,000 pixels (gigabytes) although its input is small."""
    short, long = min(width, height), max(width, height)
    if long > MAX_ASPECT * short:
        raise ImageError(
            f"{where}: {width:,} × {height:,} pixels has an aspect ratio of {long / short:,.0f}:1, "
            f"more than the limit of {MAX_ASPECT}:1; crop it first; refused before decoding"
        )
    scaled = size * (size * long // short)
    if scaled > max_pixels:
        raise ImageError(
            f"{where}: {width:,} × {height:,} pixels would be resized to {scaled:,} pixels "
            f"(shorter side {size}), more than the limit of {max_pixels:,} (max_pixels); "
            "refused before decoding"
        )


def _open_checked(data: bytes, where: str, max_pixels: int, size: int | None = None):
    """Open, verify and reopen (verify() leaves the image unusable), refusing too many pixels
    (and, with `size`, a resize too costly) before a single one is decoded; then decode the
    first frame."""
    Image, _ = _pil()
    if not data:
        raise ImageError(f"{where}: empty file, not an image")
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        image = Image.open(io.BytesIO(data), formats=FORMATS)  # reads the header only
        width, height = image.size
        if width * height > max_pixels:
            raise ImageError(
                f"{where}: {width:,} × {height:,} pixels ({width * height:,}) is more than the "
                f"limit of {max_pixels:,} (max_pixels); refused before decoding"
            )
        if size is not None:
            _check_resize(width, height, where, size, max_pixels)
        image.verify()
        image = Image.open(io.BytesIO(data), formats=FORMATS)
        image.load()
    _scale_grey_transparency(image, data)
    return image


def _scale_grey_transparency(image, data: bytes) -> None:
    """A 2- or 4-bit grey PNG decodes to L scaled to 0..255 (v · 85, v · 17), but Pillow keeps
    its tRNS grey unscaled, so the transparent grey would match nothing: scale it alike."""
    depth = data[24] if image.format == "PNG" and len(data) > 24 else 8  # IHDR's bit depth
    grey = image.info.get("transparency")
    if image.mode == "L" and depth in (2, 4) and isinstance(grey, int):
        image.info["transparency"] = grey * (255 // (2**depth - 1))


def _decode(data: bytes, where: str, max_pixels: int, size: int | None = None):
    """An upright RGB Pillow image of `data`, or an ImageError naming `where`; with `size`,
    one whose resize to that shorter side stays within the limits (_check_resize)."""
    Image, ImageOps = _pil()
    try:
        image = _open_checked(data, where, max_pixels, size)
        return _to_rgb(ImageOps.exif_transpose(image), where)
    except ImageError:
        raise
    except Image.UnidentifiedImageError:
        raise ImageError(
            f"{where}: not an image, or a damaged one: Pillow reads it as none of "
            f"{', '.join(FORMATS)}"
        ) from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise ImageError(  # Pillow's own limit (module docstring), met before ours
            f"{where}: refused before decoding, as a possible decompression bomb ({error})"
        ) from None
    except Exception as error:
        # Pillow's decoders report damage as OSError ("image file is truncated"), SyntaxError,
        # ValueError, EOFError, struct.error, IndexError...: each means a damaged file
        raise ImageError(f"{where}: damaged image ({type(error).__name__}: {error})") from None


def _to_rgb(image, where: str):
    """The module's mode rule: RGB, alpha composited on white, 16 bits scaled to 8."""
    Image, _ = _pil()
    mode = image.mode
    if mode in _SIXTEEN_BIT:
        values = np.asarray(image)
        rgb = np.repeat(_sixteen_to_eight(values, mode, where)[..., None], 3, axis=2)
        grey = image.info.get("transparency")  # a 16-bit PNG's tRNS: this grey is transparent
        if isinstance(grey, int):
            rgb[values == grey] = 255  # composited on white, as the other modes are
        return Image.fromarray(rgb)
    if mode in _ALPHA or (mode in _COLOUR and "transparency" in image.info):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    if mode in _COLOUR:
        return image if mode == "RGB" else image.convert("RGB")
    raise ImageError(
        f"{where}: image mode {mode!r} is not supported; the modes read are "
        f"{', '.join(_COLOUR + _ALPHA + _SIXTEEN_BIT)}"
    )


def _sixteen_to_eight(values: np.ndarray, mode: str, where: str) -> np.ndarray:
    """16-bit values (0..65535) -> 8-bit: round(v / 257), as 65535 / 255 = 257 exactly.
    v / 257 is never k + 1/2 for a whole v, so rounding has no ties."""
    values = values.astype(np.int64)
    low, high = int(values.min()), int(values.max())
    if low < 0 or high > 65535:
        raise ImageError(
            f"{where}: image mode {mode!r} holds values from {low} to {high}; only 16-bit "
            "images (0..65535) of this mode are read"
        )
    return np.rint(values / 257).astype(np.uint8)


def image_pixels(
    source: str | Path | bytes, name: str | None = None, max_pixels: int = MAX_PIXELS
) -> np.ndarray:
    """The picture as (H, W, 3) uint8 RGB, upright, at its own size: what the overlay draws on.

    source: a path or the file's bytes (`name` then says what errors call it).
    """
    data, where = image_bytes(source, name)
    return np.asarray(_decode(data, where, max_pixels), dtype=np.uint8).copy()


# ---------------------------------------------------------------------------------------------
# Resizing and normalising: what an encoder gets
# ---------------------------------------------------------------------------------------------


def _resize_and_crop(image, size: int):
    """Shorter side to `size` (antialiased bicubic), then the centre size × size square."""
    Image, _ = _pil()
    width, height = image.size
    short, long = min(width, height), max(width, height)
    scaled_long = size * long // short  # torchvision's int(size * long / short), exactly
    new = (size, scaled_long) if width <= height else (scaled_long, size)
    image = image.resize(new, Image.Resampling.BICUBIC)  # an equal size is a copy, no filter
    left, top = (new[0] - size) // 2, (new[1] - size) // 2
    return image.crop((left, top, left + size, top + size))


def normalize(pixels: np.ndarray, transform: ImageTransform) -> torch.Tensor:
    """(H, W, 3) uint8 -> (3, H, W) float32: (pixel / 255 − mean[c]) / std[c]."""
    mean = np.asarray(transform.mean, dtype=np.float32)
    std = np.asarray(transform.std, dtype=np.float32)
    scaled = (pixels.astype(np.float32) / np.float32(255) - mean) / std  # (H, W, 3)
    return torch.from_numpy(np.ascontiguousarray(scaled.transpose(2, 0, 1)))  # (3, H, W)


def load_image(
    source: str | Path | bytes, transform: ImageTransform, name: str | None = None
) -> torch.Tensor:
    """An image file (or its bytes) as the (3, size, size) float32 tensor an encoder takes.

    Decoded, converted and resized by the module docstring's rules; any fault is an
    ImageError naming the file (or `name`, for bytes).
    """
    data, where = image_bytes(source, name)
    image = _decode(data, where, transform.max_pixels, transform.size)
    square = _resize_and_crop(image, transform.size)
    return normalize(np.asarray(square, dtype=np.uint8), transform)


def check_images(paths, max_pixels: int = MAX_PIXELS) -> None:
    """Decode every image once before training, as text corpora are read whole before it: a bad
    image stops the run at the start, not hours in when a batch first meets it. One ImageError
    names how many are bad and the first few, so they can all be fixed at once."""
    bad = []
    for path in paths:
        try:
            _decode(*image_bytes(path), max_pixels)
        except ImageError as error:
            bad.append(str(error))
    if bad:
        shown = "\n  ".join(bad[:5]) + ("\n  ..." if len(bad) > 5 else "")
        raise ImageError(f"{len(bad):,} of {len(paths):,} images cannot be read:\n  {shown}")
