"""data/images.py and data/caption_files.py: decoding, the mode rule, the resize-and-crop rule and
the normalisation against float64 references, and the caption readers on small image sets
written with Pillow (the hostile inputs are in test_hostile_images.py)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from PIL import Image

from heedful.data.corpus import CorpusError
from heedful.data.images import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageError,
    ImageTransform,
    image_pixels,
    load_image,
    read_captions,
)


def encoded(image: Image.Image, fmt: str = "PNG", **options) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def reference(pixels: np.ndarray, mean=IMAGENET_MEAN, std=IMAGENET_STD) -> np.ndarray:
    """(H, W, 3) uint8 -> (3, H, W) float64 (pixel / 255 − mean) / std."""
    x = pixels.astype(np.float64) / 255.0
    return ((x - np.array(mean, dtype=np.float64)) / np.array(std, dtype=np.float64)).transpose(
        2, 0, 1
    )


def random_pixels(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


# ---------------------------------------------------------------------------------------------
# Normalisation and the resize rule
# ---------------------------------------------------------------------------------------------


def test_a_square_of_the_size_is_only_normalised():
    pixels = random_pixels(5, 5)
    got = load_image(encoded(Image.fromarray(pixels)), ImageTransform(size=5))
    assert got.dtype == torch.float32 and got.shape == (3, 5, 5)
    np.testing.assert_allclose(got.numpy(), reference(pixels), rtol=0, atol=2e-6)


@pytest.mark.parametrize(("height", "width"), [(4, 7), (7, 4), (4, 6), (6, 4)])
def test_the_centre_square_is_cut_from_the_longer_side(height, width):
    """The shorter side is already `size`: no resampling, only the crop at (long − size) // 2."""
    pixels = random_pixels(height, width, seed=height * 10 + width)
    got = load_image(encoded(Image.fromarray(pixels)), ImageTransform(size=4))
    top, left = (height - 4) // 2, (width - 4) // 2
    np.testing.assert_allclose(
        got.numpy(), reference(pixels[top : top + 4, left : left + 4]), rtol=0, atol=2e-6
    )


def test_other_statistics_are_used():
    pixels = random_pixels(3, 3, seed=5)
    mean, std = (0.5, 0.25, 0.0), (0.5, 2.0, 1.0)
    got = load_image(encoded(Image.fromarray(pixels)), ImageTransform(3, mean, std))
    np.testing.assert_allclose(got.numpy(), reference(pixels, mean, std), rtol=0, atol=2e-6)


def test_the_shorter_side_is_scaled_to_the_size_then_the_centre_kept():
    """20 × 10, left half red, right half blue, size 5: scaled to 10 × 5, columns 2..6 kept.
    The kept columns whose bicubic taps (±4 source pixels at scale 1/2) lie on one side of
    the edge are that side's colour exactly; a wrong scale or offset would mix them."""
    pixels = np.zeros((10, 20, 3), dtype=np.uint8)
    pixels[:, :10] = (255, 0, 0)
    pixels[:, 10:] = (0, 0, 255)
    got = load_image(encoded(Image.fromarray(pixels)), ImageTransform(size=5)).numpy()
    red, blue = reference(np.array([[[255, 0, 0]]])), reference(np.array([[[0, 0, 255]]]))
    assert got.shape == (3, 5, 5)
    np.testing.assert_allclose(got[:, :, 0], np.repeat(red[:, 0], 5, axis=1), atol=2e-6)
    np.testing.assert_allclose(got[:, :, 4], np.repeat(blue[:, 0], 5, axis=1), atol=2e-6)
    assert not np.allclose(got[:, :, 2], red[:, 0]) and not np.allclose(got[:, :, 2], blue[:, 0])


def test_a_one_pixel_image_is_upsampled_to_a_uniform_square():
    got = load_image(encoded(Image.new("RGB", (1, 1), (10, 200, 30))), ImageTransform(size=6))
    expected = reference(np.full((6, 6, 3), (10, 200, 30), dtype=np.uint8))
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=2e-6)


# ---------------------------------------------------------------------------------------------
# Modes -> RGB
# ---------------------------------------------------------------------------------------------


def test_grayscale_bilevel_and_palette_become_rgb():
    gray = np.arange(12, dtype=np.uint8).reshape(3, 4) * 20
    got = image_pixels(encoded(Image.fromarray(gray, "L")))
    assert got.dtype == np.uint8 and got.shape == (3, 4, 3)
    assert (got == gray[:, :, None]).all()
    bits = image_pixels(encoded(Image.fromarray(gray > 100).convert("1")))
    assert (bits == np.where(gray > 100, 255, 0)[:, :, None]).all()
    palette = Image.new("P", (2, 2))
    palette.putpalette([0, 0, 0, 12, 34, 56] + [0] * 762)
    palette.putpixel((1, 0), 1)
    assert image_pixels(encoded(palette))[0, 1].tolist() == [12, 34, 56]


def test_alpha_is_composited_on_white():
    alpha = np.array([[0, 255, 128]], dtype=np.uint8)
    rgba = np.zeros((1, 3, 4), dtype=np.uint8)
    rgba[..., :3], rgba[..., 3] = (200, 100, 0), alpha
    got = image_pixels(encoded(Image.fromarray(rgba, "RGBA"))).astype(np.float64)
    a = alpha[0, :, None] / 255.0
    expected = np.array([200, 100, 0]) * a + 255 * (1 - a)  # over white, float64
    assert np.abs(got[0] - expected).max() <= 1  # Pillow composites in integers


def test_a_transparent_palette_entry_is_white():
    image = Image.new("P", (2, 1))
    image.putpalette([255, 0, 0, 0, 255, 0] + [0] * 762)
    image.putpixel((1, 0), 1)
    got = image_pixels(encoded(image, transparency=0))
    assert got[0].tolist() == [[255, 255, 255], [0, 255, 0]]


def test_sixteen_bit_grayscale_is_scaled_not_clipped():
    values = np.array([[0, 128, 257, 300, 32896, 65000, 65535]], dtype=np.uint16)
    image = Image.fromarray(values)
    assert Image.open(io.BytesIO(encoded(image))).mode == "I;16"
    got = image_pixels(encoded(image))[..., 0]
    assert got.tolist() == np.rint(values / 257.0).astype(int).tolist()
    assert got.tolist() == [[0, 0, 1, 1, 128, 253, 255]]


def test_cmyk_becomes_rgb():
    cmyk = Image.new("CMYK", (2, 2), (0, 255, 0, 0))  # magenta ink
    assert image_pixels(encoded(cmyk, "TIFF"))[0, 0].tolist() == [255, 0, 255]
    ink = (100, 0, 30, 100)
    got = image_pixels(encoded(Image.new("CMYK", (1, 1), ink), "TIFF"))[0, 0]
    expected = [(255 - c) * (255 - ink[3]) / 255 for c in ink[:3]]  # float64
    assert np.abs(got - np.array(expected)).max() <= 1
    assert image_pixels(encoded(cmyk, "JPEG")).shape == (2, 2, 3)  # JPEG's own CMYK


def test_other_modes_are_named_errors():
    with pytest.raises(ImageError, match="mode 'F' is not supported"):
        image_pixels(encoded(Image.new("F", (2, 2), 0.5), "TIFF"), name="float.tif")


def test_the_exif_orientation_is_applied():
    pixels = np.zeros((2, 4, 3), dtype=np.uint8)  # 4 wide, 2 tall; left red, right blue
    pixels[:, :2], pixels[:, 2:] = (255, 0, 0), (0, 0, 255)
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display"
    got = image_pixels(encoded(Image.fromarray(pixels), exif=exif))
    assert got.shape == (4, 2, 3)  # upright: 2 wide, 4 tall
    assert got[0, 0].tolist() == [255, 0, 0] and got[-1, 0].tolist() == [0, 0, 255]


def test_an_animated_gif_gives_its_first_frame(tmp_path):
    frames = [Image.new("RGB", (3, 3), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    path = tmp_path / "moving.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0)
    assert Image.open(path).n_frames == 2
    assert (image_pixels(path) == (255, 0, 0)).all()


def test_content_decides_not_the_extension(tmp_path):
    path = tmp_path / "photo.jpg"
    pixels = random_pixels(4, 4, seed=3)
    path.write_bytes(encoded(Image.fromarray(pixels), "PNG"))
    assert (image_pixels(path) == pixels).all()  # lossless: read as the PNG it is


def test_errors_name_the_file_or_the_name_given(tmp_path):
    path = tmp_path / "notes.png"
    path.write_text("not a picture")
    with pytest.raises(ImageError, match=f"^{path}: not an image"):
        load_image(path, ImageTransform())
    with pytest.raises(ImageError, match="^upload.png: not an image"):
        load_image(b"not a picture", ImageTransform(), name="upload.png")


# ---------------------------------------------------------------------------------------------
# ImageTransform
# ---------------------------------------------------------------------------------------------


def test_the_transform_survives_json():
    transform = ImageTransform(size=32, mean=(0.5, 0.5, 0.5), std=(0.25, 0.5, 1), max_pixels=10)
    again = ImageTransform.from_dict(json.loads(json.dumps(transform.to_dict())))
    assert again == transform and isinstance(again.mean, tuple)
    assert ImageTransform.from_dict({}) == ImageTransform()


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"size": 0}, "size must be a whole number from 1"),
        ({"size": True}, "size must be a whole number"),
        ({"size": 224.0}, "size must be a whole number"),
        ({"size": 10**6}, "from 1 to 4096"),
        ({"mean": [0.5, 0.5]}, "mean must be 3 numbers"),
        ({"mean": [0.5, float("nan"), 0.5]}, "mean must be finite"),
        ({"std": [0.5, 0.0, 0.5]}, "std must be above 0"),
        ({"std": "0.5"}, "std must be 3 numbers"),
        ({"max_pixels": -1}, "max_pixels must be a whole number above 0"),
        ({"sise": 224}, "unknown field 'sise'"),
        ([224], "expected an object"),
    ],
)
def test_bad_transform_fields_are_named(data, words):
    with pytest.raises(ImageError, match=words):
        ImageTransform.from_dict(data)


# ---------------------------------------------------------------------------------------------
# Caption files
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def image_dir(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    for i, name in enumerate(("a.jpg", "b.jpg", "c.png")):
        Image.new("RGB", (4, 3), (i * 80, 0, 0)).save(folder / name, "PNG")
    return folder


def test_flickr_token_files_group_captions_by_image_in_file_order(tmp_path, image_dir):
    path = tmp_path / "Flickr8k.token.txt"
    path.write_bytes(
        b"b.jpg#0\tA dog runs .\n"
        b"a.jpg#0\tA child in a pink dress .\r\n"
        b"b.jpg#1\t  A brown dog .  \n"
        b"a.jpg#1\tA girl climbs stairs ."  # no final newline
    )
    got = read_captions(path, image_dir, "flickr")
    assert got == [
        (image_dir / "b.jpg", ["A dog runs .", "A brown dog ."]),
        (image_dir / "a.jpg", ["A child in a pink dress .", "A girl climbs stairs ."]),
    ]


def test_plain_lines_and_a_byte_order_mark(tmp_path, image_dir):
    path = tmp_path / "captions.tsv"
    path.write_bytes("\ufeffc.png\tun café\na.jpg\tone\nc.png\ttwo\n".encode())
    got = read_captions(path, image_dir, "flickr")
    assert got == [(image_dir / "c.png", ["un café", "two"]), (image_dir / "a.jpg", ["one"])]


def test_flickr30k_results_csv(tmp_path, image_dir):
    path = tmp_path / "results.csv"
    path.write_text(
        "image_name| comment_number| comment\n"
        "a.jpg| 0| Two young guys | with shaggy hair .\n"
        "a.jpg| 1| Two friends .\n"
    )
    got = read_captions(path, image_dir, "flickr")
    assert got == [(image_dir / "a.jpg", ["Two young guys | with shaggy hair .", "Two friends ."])]


def coco(images, annotations) -> str:
    return json.dumps({"info": {}, "images": images, "annotations": annotations})


def test_coco_captions_json(tmp_path, image_dir):
    path = tmp_path / "captions_val2017.json"
    path.write_text(
        coco(
            [
                {"id": 7, "file_name": "c.png", "width": 4},
                {"id": 3, "file_name": "a.jpg"},
                {"id": 9, "file_name": "b.jpg"},
            ],
            [
                {"id": 1, "image_id": 3, "caption": "A man riding a bike.\n"},
                {"id": 2, "image_id": 7, "caption": "A red square. "},
                {"id": 3, "image_id": 3, "caption": "Someone cycling."},
            ],
        )  # fmt: skip
    )
    got = read_captions(path, image_dir, "coco")
    assert got == [  # the "images" order; b.jpg has no caption and is left out
        (image_dir / "c.png", ["A red square."]),
        (image_dir / "a.jpg", ["A man riding a bike.", "Someone cycling."]),
    ]


def test_a_missing_image_names_the_line_or_the_entry(tmp_path, image_dir):
    path = tmp_path / "t.txt"
    path.write_text("a.jpg#0\tfine\nmissing.jpg#0\tgone\n")
    with pytest.raises(CorpusError, match="line 2: image file not found: .*missing.jpg"):
        read_captions(path, image_dir, "flickr", key="data.train_captions")
    path.write_text(coco([{"id": 1, "file_name": "gone.jpg"}], [{"image_id": 1, "caption": "x"}]))
    with pytest.raises(CorpusError, match=r"images\[0\] \(id 1, captioned at annotations\[0\]\)"):
        read_captions(path, image_dir, "coco")


def test_an_unknown_format_is_named(tmp_path, image_dir):
    with pytest.raises(CorpusError, match="captions format 'csv' is not one of flickr, coco"):
        read_captions(tmp_path / "x", image_dir, "csv")


def test_check_images_names_every_bad_file_at_once(tmp_path, image_dir):
    from heedful.data.images import check_images

    good = sorted(image_dir.iterdir())
    check_images(good)  # nothing to say
    bad = [tmp_path / f"bad{i}.png" for i in range(7)]
    for path in bad:
        path.write_bytes(b"")
    with pytest.raises(ImageError, match="^7 of 10 images cannot be read:") as caught:
        check_images(good + bad)
    message = str(caught.value)
    assert f"{bad[0]}: empty file" in message and str(bad[5]) not in message
    assert message.endswith("...")
