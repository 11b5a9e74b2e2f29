"""PNG completeness: every row the header declares, as TensorFlow's decoder requires."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from conftest import photos, png_bytes
from PIL import Image

from shardfeed.write.images import BadImageError, ImageOptions, check_stored_image, png, prepare_file_image


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def rows_missing(array: np.ndarray, rows: int) -> bytes:
    """An RGB PNG whose header declares all of `array` but whose (complete, valid) zlib stream
    holds only the first `rows` rows: Pillow decodes it, TensorFlow refuses it."""
    height, width = array.shape[:2]
    raw = b"".join(b"\x00" + array[r].tobytes() for r in range(rows))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def half() -> bytes:
    return rows_missing(np.ascontiguousarray(photos()["coffee"][:96, :96]), 48)


def test_pillow_accepts_it_tensorflow_does_not(half: bytes) -> None:
    import tensorflow as tf

    with Image.open(io.BytesIO(half)) as im:
        im.load()  # the silent pass this module exists for
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_png(half)


def test_a_png_missing_rows_is_refused_at_write_and_by_verify(half: bytes) -> None:
    assert png.problem(half) == "truncated PNG: image data ends after 50% of the rows its 96x96 header declares"
    with pytest.raises(BadImageError, match="truncated PNG"):
        prepare_file_image(half, "half.png", ImageOptions())
    assert check_stored_image(half, "PNG", 96, 96, 3) == png.problem(half)


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "P", "I;16", "1", "LA"])
def test_every_whole_png_passes(mode: str) -> None:
    """Real photos in every mode Pillow writes (bit depths 1, 8, 16; all colour types)."""
    image = Image.fromarray(np.ascontiguousarray(photos()["astronaut"][:77, :123]))
    converted = image.convert("L").convert(mode) if mode in ("I;16", "1") else image.convert(mode)
    data = png_bytes(converted)
    assert png.problem(data) is None
    import tensorflow as tf

    decoded = tf.io.decode_png(data, dtype=tf.uint16 if mode == "I;16" else tf.uint8)
    assert tuple(decoded.shape[:2]) == (77, 123)


def test_damaged_chunks_are_named(half: bytes) -> None:
    whole = png_bytes(Image.fromarray(np.ascontiguousarray(photos()["coffee"][:64, :64])))
    idat = whole.index(b"IDAT")
    flipped = bytearray(whole)
    flipped[idat + 10] ^= 0xFF
    assert png.problem(bytes(flipped)) == "corrupt PNG: CRC mismatch in the IDAT chunk"
    assert png.problem(whole[: idat + 40]) == "truncated PNG: the IDAT chunk is cut short"
