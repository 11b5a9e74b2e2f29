"""JPEG on the write path: its EXIF orientation read off the header segments without decoding,
and decoding in C (simplejpeg, libjpeg-turbo): the decode check, and the DCT-scaled decode that
feeds write-time resizing.

Most files carry no EXIF block; walking the marker segments up to the first scan finds that
out in a few steps, so Pillow's parse is paid only by files that have one. Pillow parses a
JPEG's header segments in Python (~100-190 µs a file, ~7% of a resize conversion's time per
image); simplejpeg reads them in C and decodes to the same pixels.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
import simplejpeg
from PIL import Image

Size = tuple[int, int]  # (width, height), as Pillow gives sizes
EXIF_ORIENTATION = 0x0112  # the EXIF tag Pillow reports the orientation under


class DamagedJpegError(ValueError):
    """The JPEG cannot be decoded as TensorFlow would; the message says why."""


def decode_check(data: bytes, colorspace: str, min_side: int = 1) -> tuple[str | None, np.ndarray]:
    """Decodes at the smallest DCT scale that keeps both sides at least `min_side` (1: 1/8);
    returns a warning for damage TensorFlow steps over, and the decoded gray (or RGB) pixels.

    libjpeg's "Corrupt JPEG data: ..." complaints are warnings TensorFlow ignores (the image
    decodes, slightly damaged): such files are kept and reported. Any other failure (bad
    markers, truncation) also makes `tf.io.decode_jpeg` fail, so it raises DamagedJpegError.

    `colorspace` is the header's. YCbCr files are decoded to gray: every component's
    entropy-coded data is still decoded (where the damage shows: 1,800 damaged real photos,
    baseline and progressive, gave the same verdicts), but the chroma IDCT and the colour
    conversion are skipped, 10% of the check's time. The gray image is what the perceptual hash
    is computed from (write/perceptual_hash.py).
    """
    colorspace = "RGB" if colorspace == "RGB" else "GRAY"
    try:
        return None, simplejpeg.decode_jpeg(data, colorspace, min_height=min_side, min_width=min_side)
    except ValueError as e:
        message = str(e)
    if not message.startswith("Corrupt JPEG data"):
        raise DamagedJpegError(f"corrupt JPEG: {message}")
    try:
        pixels = simplejpeg.decode_jpeg(data, colorspace, min_height=min_side, min_width=min_side, strict=False)
    except ValueError as e:
        raise DamagedJpegError(f"corrupt JPEG: {e}") from e
    return f"damaged JPEG data, decodes with a warning: {message}", pixels


def draft_scale(size: Size, target: Size | None) -> int:
    """The DCT reduction (1, 2, 4 or 8) that keeps both sides at least `target`: the largest
    power of two, as Pillow's `draft` picks it (so both decoders give the same pixels)."""
    if target is None:
        return 1
    fits = min(size[0] // target[0], size[1] // target[1])
    return next((scale for scale in (8, 4, 2) if fits >= scale), 1)


def decode_scaled(data: bytes, target_of: Callable[[Size], Size | None]) -> Image.Image | None:
    """A YCbCr or grayscale JPEG decoded to 'RGB' / 'L' at `draft_scale` for the target size
    `target_of` gives for its full size; None for any other JPEG or one the decoder complains
    about (Pillow then decides, as before, whether it is usable)."""
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
        if colorspace not in ("YCbCr", "Gray"):
            return None
        scale = draft_scale((width, height), target_of((width, height)))
        gray = colorspace == "Gray"
        pixels = simplejpeg.decode_jpeg(
            data, "GRAY" if gray else "RGB", min_height=-(-height // scale), min_width=-(-width // scale)
        )
    except ValueError:
        return None
    return Image.fromarray(pixels[:, :, 0] if gray else pixels, "L" if gray else "RGB")


def exif_orientation(data: bytes) -> int:
    """The EXIF orientation tag of a JPEG (1, upright, when it has no EXIF block)."""
    if not may_have_exif(data):
        return 1
    try:
        with Image.open(io.BytesIO(data)) as im:
            return int(im.getexif().get(EXIF_ORIENTATION, 1) or 1)
    except Exception:
        return 1


def may_have_exif(data: bytes) -> bool:
    """Whether a JPEG's header segments (those before its first scan) hold an EXIF APP1 block.

    Walks the marker segments, a few steps per file, where a byte search or Pillow's parse cost
    ~50 µs a file (a sixth of a header-checked conversion's time per image). A header it cannot
    walk answers True, so Pillow decides.
    """
    pos, end = 2, len(data)
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            return True
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
        elif marker == 0x01 or 0xD0 <= marker <= 0xD9:  # markers without a length field
            pos += 2
        elif marker == 0xDA:  # start of scan: the header segments are over
            return False
        elif marker == 0xE1 and data[pos + 4 : pos + 10] == b"Exif\x00\x00":
            return True
        else:
            pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
    return True
