"""How large an image may be: dimensions read from the header, refused before any decode.

A few kilobytes can declare an image of billions of pixels (a 30,000 x 30,000 PNG of one colour
is under a megabyte and decodes to 2.7 GB; a few such files drove a conversion to 23 GB and the
kernel killed it). Every decode of an untrusted image (convert, predict on a folder, report
thumbnails, previews of foreign shards) first asks `refusal`, so memory is bounded by the
limit whatever the input. Reading a file is bounded too (`max_file_bytes`): a character device
or a multi-gigabyte file named .jpg is refused before it is read whole.
"""

from __future__ import annotations

import io

import simplejpeg
from PIL import Image

# Pillow's own decompression-bomb threshold: a quarter GiB of 24-bit pixels (89.5 megapixels,
# e.g. 11,600 x 7,700; the largest camera sensors sold today are about 100 MP).
DEFAULT_MAX_PIXELS = 1024 * 1024 * 1024 // 4 // 3
# Beyond the pixels, metadata a decoder may hold: Pillow caps PNG text chunks at this total.
_METADATA_BYTES = 64 * 1024 * 1024
_BYTES_PER_PIXEL = 8  # 16-bit RGBA stored uncompressed: the most any allowed image needs
# Pillow's own check would refuse some files outright (DecompressionBombError, no dimensions)
# and let others through; `too_large` is the one rule, asked before every decode.
Image.MAX_IMAGE_PIXELS = None


def header_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) as the image's header declares it, without decoding; None if unknown."""
    if data[:3] == b"\xff\xd8\xff":
        try:
            height, width, _, _ = simplejpeg.decode_jpeg_header(data)
            return width, height
        except ValueError:
            return None
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    try:
        with Image.open(io.BytesIO(data)) as im:  # parses the header only; no pixels yet
            return im.size
    except Exception:
        return None


def too_large(size: tuple[int, int] | None, max_pixels: int | None) -> str | None:
    """Why an image of (width, height) `size` must not be decoded, or None when it may."""
    if size is None or max_pixels is None:
        return None
    width, height = size
    if width * height <= max_pixels:
        return None
    return (
        f"image too large: {width}x{height} pixels ({width * height / 1e6:,.1f} megapixels) is over the "
        f"{max_pixels / 1e6:,.1f}-megapixel limit (--max-pixels / max_pixels to raise it)"
    )


def refusal(data: bytes, max_pixels: int | None) -> str | None:
    """Why the image in `data` must not be decoded (the size its header declares is over
    `max_pixels`), or None: the one question every decode of an untrusted image asks first."""
    return too_large(header_size(data), max_pixels)


def max_file_bytes(max_pixels: int | None) -> int | None:
    """The most bytes an input file of an allowed image can need: every pixel at 16-bit RGBA
    uncompressed, plus metadata; None when pixels are not limited."""
    if max_pixels is None:
        return None
    return max_pixels * _BYTES_PER_PIXEL + _METADATA_BYTES
