"""A 64-bit perceptual hash of each image, from the small gray image the decode check makes anyway.

    gray image (a JPEG's DCT-scaled decode: 1/8 scale, or larger where that leaves a side under
                MIN_SIDE; other images: their luma), box-reduced by an integer factor to a shorter
                side under 2 x MAX_SIDE
    -> its projection on the 8 x 8 lowest cosines of the image's DCT-II, each pixel taken at the
       place and width it covers in the full-size image (a scaled decode's last pixel covers a
       part block), weighted by a window that leans to the middle (1 - ALPHA + ALPHA sin)
    -> bit i set where coefficient i is above the median of the 63 AC coefficients

Re-encoding, resizing and brightness changes move few bits; small crops (a few percent a side)
move the most; different photos sit far apart (docs/benchmarks.md, "near-duplicates"). Two
choices make a 1/8-scale decode enough (no larger decode, so hashing costs only the projection):
the pixel geometry (a 1/8 image of a 300 px side has 38 pixels, the last covering 4 px, not 8)
and the window (a crop moves content least in the middle of the frame). Images too flat to say
anything (no low frequency of half a gray level's amplitude, `MIN_AC`) or too small (a side under
`SMALLEST`) get no hash, so they never group by accident. The definition is ours (`NAME`, pinned
by a golden test), not imagehash's or imagededup's: their resize filters differ, so their bits do.
"""

from __future__ import annotations

import functools

import numpy as np
from PIL import Image

NAME = "shardfeed-phash-v2"  # recorded in the manifest: hashes of another version are not compared
UNNAMED = "shardfeed-phash-v1"  # what made the hashes of an appended generation that names none
LOW = 8  # the lowest LOW x LOW frequencies make the 64 bits
MIN_SIDE = 24  # a JPEG is decoded at the smallest DCT scale that keeps both sides at least this
# Larger gray images are box-reduced by an integer factor to under twice this first: cheaper, and
# the projection stays a small product BLAS runs on one thread (a 8 x 187 x 250 one ran threaded
# in each of the conversion's worker processes, which then fought over the cores: 1.35x wall).
MAX_SIDE = 64
SMALLEST = 16  # 8 cosines need at least this many pixels a side: smaller images get no hash
# A cosine of amplitude A projects to about A / 4: an image whose low frequencies all stay under
# 0.1 (under half a gray level's amplitude) has no hash. (A constant image measures under 1e-5;
# the dimmest of 3,620 real photo crops and their copies in the benchmark corpora, 0.33.)
MIN_AC = 0.1
ALPHA = 0.2  # the window's depth: recall 0.945 without it, 0.96 with 0.1..0.3 (docs/benchmarks.md)


@functools.lru_cache(maxsize=4096)
def _axis(decoded: int, length: int, factor: int) -> np.ndarray:
    """The LOW windowed cosines (LOW x pixels) along one side of `length` full-size pixels that
    was decoded to `decoded` pixels (`_decode_step`), then box-reduced by `factor`: pixel i covers
    [i * step, (i + 1) * step) of the full-size side, the last one cut at `length`. AC rows sum
    to zero, so a constant image projects to nothing."""
    step, pixels = _decode_step(decoded, length) * factor, -(-decoded // factor)
    starts = np.arange(pixels) * step
    ends = np.minimum(starts + step, length)
    centre, cover = (starts + ends) / 2 / length, (ends - starts) / length
    rows = np.cos(np.pi * np.arange(LOW)[:, None] * centre) * (cover * (1 - ALPHA + ALPHA * np.sin(np.pi * centre)))
    rows[1:] -= rows[1:].sum(axis=1, keepdims=True) * (cover / cover.sum())
    return rows.astype(np.float32)


def _decode_step(decoded: int, length: int) -> float:
    """How many full-size pixels one pixel of a decode covers: 1 at full size, 8 / M for
    libjpeg's M/8 scaled decodes (ceil(length * M / 8) pixels)."""
    if decoded == length:
        return 1.0
    return next((8 / m for m in range(1, 16) if -(-length * m // 8) == decoded), length / decoded)


def of_gray(gray: np.ndarray, size: tuple[int, int] | None = None) -> str | None:
    """The hash of a 2-D uint8 gray image as 16 hex digits; None for a flat or tiny image.

    Args:
        gray: the image, or a DCT-scaled decode of it.
        size: (height, width) of the full-size image `gray` was decoded from; None: full size.
    """
    h, w = gray.shape
    height, width = size or (h, w)
    short = min(h, w)
    if short < SMALLEST:
        return None
    factor = max(1, short // MAX_SIDE)
    if factor > 1:  # the shorter side ends in MAX_SIDE..2 * MAX_SIDE - 1
        gray = np.asarray(Image.fromarray(np.ascontiguousarray(gray), "L").reduce(factor))
    rows, columns = _axis(h, height, factor), _axis(w, width, factor)
    # np.dot casts the uint8 image itself, and costs 1 us less than @ (4 us an image in all)
    coefficients = np.dot(np.dot(rows, gray), columns.T).ravel()
    ac = np.sort(coefficients[1:])
    if -ac[0] < MIN_AC and ac[-1] < MIN_AC:
        return None
    return np.packbits(coefficients > ac[len(ac) // 2]).tobytes().hex()  # above the median of the 63


def of_image(im: Image.Image, size: tuple[int, int] | None = None) -> str | None:
    """The hash of a decoded image (any mode): its luma, hashed by `of_gray` (`size`: as there)."""
    gray = im if im.mode == "L" else im.convert("RGB").convert("L")
    return of_gray(np.asarray(gray), size)


def distance(a: str, b: str) -> int:
    """Bits that differ between two hashes."""
    return (int(a, 16) ^ int(b, 16)).bit_count()
