"""Image checks and write-time transforms on real photos and real odd/broken files."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shardfeed.format.image_format import sniff_format
from shardfeed.write.images import (
    BadImageError,
    ImageOptions,
    prepare_array_image,
    prepare_file_image,
)

KEEP = ImageOptions()


def _decode(data: bytes) -> Image.Image:
    im = Image.open(io.BytesIO(data))
    im.load()
    return im


@pytest.mark.parametrize("name", ["good_1.jpg", "good_2.jpg"])
def test_good_jpeg_keeps_its_bytes(odd_tree: Path, name: str) -> None:
    data = (odd_tree / "cat" / name).read_bytes()
    out = prepare_file_image(data, name, KEEP)
    assert out.data == data and out.format == "JPEG" and out.channels == 3
    assert (out.width, out.height) == _decode(data).size
    assert out.conversion is None and out.warning is None


def test_gray_jpeg_and_rgb_png_are_kept(odd_tree: Path) -> None:
    gray = prepare_file_image((odd_tree / "cat" / "good_gray.jpg").read_bytes(), "g.jpg", KEEP)
    assert gray.channels == 1 and gray.conversion is None
    png_data = (odd_tree / "dog" / "good_3.png").read_bytes()
    png = prepare_file_image(png_data, "good_3.png", KEEP)
    assert png.data == png_data and png.format == "PNG" and png.channels == 3


@pytest.mark.parametrize(
    ("path", "reason", "fmt", "mode"),
    [
        ("cat/odd_cmyk.jpg", "CMYK JPEG", "JPEG", "RGB"),
        ("cat/odd_exif.jpg", "EXIF rotation", "JPEG", "RGB"),
        ("dog/odd_png_named.jpg", "png content named .jpg", "JPEG", "RGB"),
        ("dog/odd_16bit.png", "16-bit image", "PNG", "L"),
        ("dog/odd_palette.png", "palette image", "PNG", "RGB"),
        ("dog/odd_alpha.png", "alpha channel", "PNG", "RGB"),
        ("dog/odd_gif.gif", "gif format", "PNG", "RGB"),
        ("dog/odd_bmp.bmp", "bmp format", "PNG", "RGB"),
        ("dog/odd_webp.webp", "webp format", "JPEG", "RGB"),
        ("dog/odd_tiff.tif", "tiff format", "PNG", "RGB"),
    ],
)
def test_images_tensorflow_cannot_take_are_converted(
    odd_tree: Path, path: str, reason: str, fmt: str, mode: str
) -> None:
    out = prepare_file_image((odd_tree / path).read_bytes(), path, KEEP)
    assert out.conversion is not None and reason in out.conversion
    assert out.format == fmt
    decoded = _decode(out.data)
    assert decoded.format == fmt and decoded.mode == mode
    assert (decoded.width, decoded.height) == (out.width, out.height)


def test_exif_rotated_photo_is_made_upright(odd_tree: Path) -> None:
    source = _decode((odd_tree / "cat" / "good_1.jpg").read_bytes())  # same pixels, no EXIF
    out = prepare_file_image((odd_tree / "cat" / "odd_exif.jpg").read_bytes(), "odd_exif.jpg", KEEP)
    assert (out.width, out.height) == (source.height, source.width)  # orientation 6: 90 degrees


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("cat/bad_empty.jpg", "empty file"),
        ("cat/bad_text.jpg", "not an image"),
        ("cat/bad_truncated.jpg", "corrupt JPEG"),
        ("dog/bad_corrupt.jpg", "corrupt JPEG: Unsupported marker"),
        ("dog/bad_truncated.png", "corrupt PNG"),
    ],
)
def test_broken_files_raise_with_the_reason(odd_tree: Path, path: str, reason: str) -> None:
    with pytest.raises(BadImageError, match=reason):
        prepare_file_image((odd_tree / path).read_bytes(), path, KEEP)


def test_truncated_jpeg_is_caught_by_header_check_too(odd_tree: Path) -> None:
    with pytest.raises(BadImageError, match="no end-of-image marker"):
        prepare_file_image((odd_tree / "cat/bad_truncated.jpg").read_bytes(), "t.jpg", ImageOptions(check="header"))


def test_damaged_but_decodable_jpeg_is_kept_with_a_warning(odd_tree: Path) -> None:
    data = (odd_tree / "dog/warn_damaged.jpg").read_bytes()
    out = prepare_file_image(data, "warn_damaged.jpg", KEEP)
    assert out.data == data and out.warning and "Corrupt JPEG data" in out.warning


def test_resize_shorter_side_and_center_crop(odd_tree: Path) -> None:
    data = (odd_tree / "cat" / "good_1.jpg").read_bytes()  # 240x200
    out = prepare_file_image(data, "a.jpg", ImageOptions(resize=100))
    assert (out.width, out.height) == (120, 100) and out.format == "JPEG"
    crop = prepare_file_image(data, "a.jpg", ImageOptions(resize=100, center_crop=80, image_format="png"))
    assert (crop.width, crop.height) == (80, 80) and _decode(crop.data).format == "PNG"
    fit = prepare_file_image(data, "a.jpg", ImageOptions(max_size=60))
    assert (fit.width, fit.height) == (60, 50)
    up = prepare_file_image(data, "a.jpg", ImageOptions(center_crop=300))
    assert (up.width, up.height) == (300, 300)


def test_downscale_uses_the_dct_fast_path_and_keeps_content() -> None:
    import skimage.data

    photo = skimage.data.astronaut()  # 512x512
    buffer = io.BytesIO()
    Image.fromarray(photo).save(buffer, "JPEG", quality=95)
    out = prepare_file_image(buffer.getvalue(), "a.jpg", ImageOptions(resize=64, image_format="png"))
    small = np.asarray(_decode(out.data)).astype(float)
    reference = np.asarray(Image.fromarray(photo).resize((64, 64), Image.Resampling.BICUBIC)).astype(float)
    assert small.shape == (64, 64, 3)
    assert np.abs(small - reference).mean() < 6.0  # same picture, within JPEG error


def test_arrays_are_stored_losslessly(digits: tuple[np.ndarray, np.ndarray]) -> None:
    image = digits[0][0]
    png = prepare_array_image(image, KEEP)
    assert png.format == "PNG" and png.channels == 1
    assert np.array_equal(np.asarray(_decode(png.data)), image)
    raw = prepare_array_image(image, ImageOptions(array_encoding="raw"))
    assert raw.format == "RAW" and raw.data == image.tobytes() and (raw.height, raw.width) == image.shape
    rgb = prepare_array_image(np.stack([image] * 3, -1), KEEP)
    assert rgb.channels == 3


def test_bad_arrays_raise() -> None:
    with pytest.raises(BadImageError, match="dtype must be uint8"):
        prepare_array_image(np.zeros((4, 4), np.float32), KEEP)
    with pytest.raises(BadImageError, match="shape must be"):
        prepare_array_image(np.zeros((4, 4, 2), np.uint8), KEEP)


def test_sniff_format() -> None:
    assert sniff_format(b"\xff\xd8\xff\xe0....") == "jpeg"
    assert sniff_format(b"\x89PNG\r\n\x1a\n....") == "png"
    assert sniff_format(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "webp"
    assert sniff_format(b"hello") is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"resize": 0}, "resize must be a positive integer"),
        ({"resize": 10, "max_size": 20}, "exclude each other"),
        ({"image_format": "gif"}, r"image_format must be one of \['keep', 'jpeg', 'png'\]"),
        ({"quality": 0}, "quality must be in 1..100"),
        ({"check": "none"}, "check must be one of"),
    ],
)
def test_option_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ImageOptions(**kwargs)  # type: ignore[arg-type]
