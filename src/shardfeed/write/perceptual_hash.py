"""A 64-bit perceptual hash of each image, from the small gray image the decode check makes anyway.

    gray image (a JPEG's DCT-scaled decode, 1/8 down to 64 px a side at most: block means of its
                luma; other images: their luma)
    -> 32 x 32, resampled bilinearly (antialiased)
    -> 2-D DCT-II, its lowest 8 x 8 frequencies
    -> bit i set where coefficient i is above the median of the 63 AC coefficients

Re-encoding, resizing and brightness or contrast changes move few bits; different photos sit far
apart (docs/benchmarks.md, "near-duplicates"). Images too flat to say anything (a blank page, a
constant colour: thumbnail standard deviation under `MIN_STD` gray levels) get no hash, so they
never group with each other by accident. The definition is ours (`NAME`, pinned by a golden test),
not imagehash's or imagededup's: their resize filters differ, so their bits do.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

NAME = "shardfeed-phash-v1"  # recorded in the manifest: hashes of another version are not compared
SIDE = 32  # the thumbnail the DCT runs on
LOW = 8  # its lowest LOW x LOW frequencies make the 64 bits
MIN_STD = 2.0  # gray levels: a flatter thumbnail has no hash
MIN_SIDE = 64  # a JPEG is decoded at the smallest DCT scale that keeps both sides at least this


def _dct_matrix() -> np.ndarray:
    """The first LOW rows of the orthonormal DCT-II matrix of size SIDE."""
    n, k = np.arange(SIDE), np.arange(LOW)[:, None]
    m = np.cos(np.pi * (2 * n + 1) * k / (2 * SIDE)) * np.sqrt(2 / SIDE)
    m[0] /= np.sqrt(2)
    return m


_DCT = _dct_matrix()


def of_gray(gray: np.ndarray) -> str | None:
    """The hash of a 2-D uint8 gray image as 16 hex digits; None for a flat image."""
    thumb = np.asarray(Image.fromarray(gray, "L").resize((SIDE, SIDE), Image.Resampling.BILINEAR), np.float64)
    if thumb.std() < MIN_STD:
        return None
    coefficients = (_DCT @ thumb @ _DCT.T).ravel()
    bits = coefficients > np.median(coefficients[1:])
    return np.packbits(bits).tobytes().hex()


def of_image(im: Image.Image) -> str | None:
    """The hash of a decoded image (any mode): its luma, hashed by `of_gray`."""
    gray = im if im.mode == "L" else im.convert("RGB").convert("L")
    return of_gray(np.asarray(gray))


def distance(a: str, b: str) -> int:
    """Bits that differ between two hashes."""
    return (int(a, 16) ^ int(b, 16)).bit_count()
