"""The pixel limit and bounded reads: hostile images are refused from their header, never decoded."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import jpeg_bytes, photos, png_bytes
from PIL import Image

from shardfeed import ConvertOptions
from shardfeed.errors import OptionError, SourceError
from shardfeed.format import fileio, image_limits, schema
from shardfeed.read.pixels import decode_image
from shardfeed.write import folder_state
from shardfeed.write.images import BadImageError, ImageOptions, prepare_file_image


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "TIFF", "WEBP", "BMP"])
def test_header_size_is_the_decoded_size(fmt: str) -> None:
    image = Image.fromarray(np.ascontiguousarray(photos()["rocket"][:123, :77]))
    buffer = __import__("io").BytesIO()
    image.save(buffer, fmt)
    assert image_limits.header_size(buffer.getvalue()) == (77, 123)


def test_header_size_of_garbage_is_unknown() -> None:
    assert image_limits.header_size(b"not an image") is None
    assert image_limits.header_size(b"\xff\xd8\xff\xe0 cut") is None


def test_too_large_names_the_dimensions_and_the_flag() -> None:
    assert image_limits.too_large((100, 100), 10_000) is None
    assert image_limits.too_large((100, 100), None) is None
    reason = image_limits.too_large((30000, 30000), image_limits.DEFAULT_MAX_PIXELS)
    assert reason is not None and "30000x30000" in reason and "900.0 megapixels" in reason
    assert "--max-pixels" in reason


def test_every_hostile_file_is_refused_with_its_reason(hostile: dict[str, bytes]) -> None:
    for name, data in hostile.items():
        with pytest.raises(BadImageError) as e:
            prepare_file_image(data, name, ImageOptions())
        if "ztxt" in name:  # Pillow's own cap on text chunks (1 MB each, 64 MB in all)
            assert "corrupt PNG" in str(e.value) and "too large" in str(e.value).lower()
        else:
            declared = name.split("_")[2].split(".")[0]
            assert f"image too large: {declared} pixels" in str(e.value)


def test_the_limit_is_an_option() -> None:
    photo = photos()["chelsea"]
    data = jpeg_bytes(photo)
    pixels = photo.shape[0] * photo.shape[1]
    with pytest.raises(BadImageError, match="too large"):
        prepare_file_image(data, "a.jpg", ImageOptions(max_pixels=pixels - 1))
    assert prepare_file_image(data, "a.jpg", ImageOptions(max_pixels=pixels)).width == photo.shape[1]
    assert prepare_file_image(png_bytes(Image.fromarray(photo)), "a.png", ImageOptions(max_pixels=None)).height == 300
    for bad in (0, -5, 1.5):
        with pytest.raises(OptionError, match="max_pixels"):
            ImageOptions(max_pixels=bad)  # type: ignore[arg-type]


def test_the_limit_applies_to_transforms_too(hostile: dict[str, bytes]) -> None:
    with pytest.raises(BadImageError, match="too large"):
        prepare_file_image(hostile["bomb_jpeg_60000x1600.jpg"], "x.jpg", ImageOptions(resize=64))


def test_read_regular_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            fileio.read_regular(str(fifo))
        except BaseException as e:
            outcome.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert isinstance(outcome[0], fileio.UnusableFileError) and "FIFO" in str(outcome[0])


def test_read_regular_refuses_a_device_and_an_oversized_file(tmp_path: Path) -> None:
    device = tmp_path / "zero.jpg"
    device.symlink_to("/dev/zero")
    with pytest.raises(fileio.UnusableFileError, match="character device"):
        fileio.read_regular(str(device), 1000)
    big = tmp_path / "big.jpg"
    big.write_bytes(bytes(5000))
    with pytest.raises(fileio.UnusableFileError, match="file too large"):
        fileio.read_regular(str(big), 4999)
    assert fileio.read_regular(str(big), 5000) == bytes(5000)


def test_an_image_read_from_its_span_is_bounded_as_a_file_is(tmp_path: Path) -> None:
    """An image inside a container (a staged images file, an Arrow table) declares its size in
    its span: one larger than any allowed image is refused before anything is read, with the
    reason a file that large gets, and reported, never converted."""
    from shardfeed.write.encode import EncodingSpec, SkippedItem, encode_item
    from shardfeed.write.items import Discovery, Item

    container = tmp_path / "images.bin"
    container.write_bytes(jpeg_bytes(photos()["rocket"]) * 2)
    with pytest.raises(fileio.UnusableFileError, match="file too large"):
        fileio.read_range(str(container), 0, 5000, 4999)
    assert fileio.read_range(str(container), 0, 5000, 5000) == container.read_bytes()[:5000]
    declared = image_limits.max_file_bytes(image_limits.DEFAULT_MAX_PIXELS) + 1  # ~770 MB: never read
    items = [Item("big.jpg", 0, None, declared, span=(str(container), 0, declared))]
    spec = EncodingSpec.of(Discovery("webdataset", str(tmp_path), items, str(tmp_path), ["a"]), ConvertOptions())
    skipped = encode_item(items[0], spec)
    assert isinstance(skipped, SkippedItem) and skipped.reason.startswith("file too large"), skipped


def test_max_file_bytes_fits_any_allowed_image() -> None:
    assert image_limits.max_file_bytes(None) is None
    assert image_limits.max_file_bytes(1000) == 8000 + 64 * 1024 * 1024


def test_walk_reports_what_cannot_be_an_input(tmp_path: Path) -> None:
    root = tmp_path / "src"
    (root / "cat").mkdir(parents=True)
    (root / "cat" / "ok.jpg").write_bytes(b"x")
    os.mkfifo(root / "cat" / "pipe.jpg")
    (root / "cat" / "zero.jpg").symlink_to("/dev/zero")
    (root / "cat" / "gone.jpg").symlink_to(root / "nowhere.jpg")
    (root / "cat" / "loop").symlink_to(root)  # a folder link back to the root
    (root / "cat" / "self.jpg").symlink_to(root / "cat" / "self.jpg")
    os.close(os.open(os.fsencode(root / "cat") + b"/caf\xe9.jpg", os.O_CREAT | os.O_WRONLY))
    files, refused = fileio.walk_files(str(root))
    assert files == ["cat/ok.jpg"]
    reasons = dict(refused)
    assert reasons["cat/pipe.jpg"] == "not a regular file: a FIFO (named pipe)"
    assert reasons["cat/zero.jpg"] == "not a regular file: a character device"
    assert reasons["cat/loop"].startswith("folder link loops back")
    assert "cannot be read" in reasons["cat/gone.jpg"] and "cannot be read" in reasons["cat/self.jpg"]
    assert reasons["cat/caf\\xe9.jpg"].startswith("file name is not valid UTF-8")


def test_records_over_the_limit_are_not_decoded_for_previews(hostile: dict[str, bytes]) -> None:
    """A foreign shard may hold anything: `show`, `report` and IndexedRecords decode under the limit."""
    example = {schema.ENCODED: hostile["bomb_png_12000x12000.png"], schema.FILENAME: b"big/one.png"}
    with pytest.raises(SourceError, match=r"record big/one\.png: image too large: 12000x12000"):
        decode_image(example)
    assert decode_image(example | {schema.ENCODED: png_bytes(Image.new("L", (5, 4)))}).shape == (4, 5, 1)


def test_a_folder_written_before_the_limit_counts_as_the_default() -> None:
    """Re-running convert on a folder whose manifest has no max_pixels resumes it, not refuses it."""
    settings = ConvertOptions().settings()
    old = {"source": {"fingerprint": "f"}, "settings": {**settings, "image": dict(settings["image"])}}
    del old["settings"]["image"]["max_pixels"]
    new = {"source": {"fingerprint": "f"}, "settings": settings}
    assert folder_state.same_conversion(old, new)
    changed = ConvertOptions(image=ImageOptions(max_pixels=1000)).settings()
    assert not folder_state.same_conversion(old, {**new, "settings": changed})
