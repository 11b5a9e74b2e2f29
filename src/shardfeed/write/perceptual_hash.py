"""A 64-bit perceptual hash of each image, from the small gray image the decode check makes anyway.

    gray image (a JPEG's DCT-scaled decode, 1/8 down to 64 px a side at most: block means of its
                luma; other images: their luma), box-reduced by an integer factor to a shorter
                side of 32..63 px
    -> its projection on the 8 x 8 lowest cosines of a DCT-II at its own size (the frequencies a
       32 x 32 pHash keeps, without resampling to 32 x 32 first: cheaper, and the same cosines
       whatever the image's size)
    -> bit i set where coefficient i is above the median of the 63 AC coefficients

Re-encoding, resizing and brightness or contrast changes move few bits; different photos sit far
apart (docs/benchmarks.md, "near-duplicates"). Images too flat to say anything (a blank page, a
constant colour: no low frequency of half a gray level's amplitude, `MIN_AC`) get no hash, so they
never group with each other by accident. The definition is ours (`NAME`, pinned by a golden test),
not imagehash's or imagededup's: their resize filters differ, so their bits do.
"""

from __future__ import annotations

import functools

import numpy as np
from PIL import Image

NAME = "shardfeed-phash-v1"  # recorded in the manifest: hashes of another version are not compared
LOW = 8  # the lowest LOW x LOW frequencies make the 64 bits
MIN_SIDE = 64  # a JPEG is decoded at the smallest DCT scale that keeps both sides at least this
# Larger gray images are box-reduced by an integer factor to under twice this first: cheaper, and
# the projection stays a small product BLAS runs on one thread (a 8 x 187 x 250 one ran threaded
# in each of the conversion's worker processes, which then fought over the cores: 1.35x wall).
MAX_SIDE = 64
# A cosine of amplitude A projects to A / 4 on its (mean-normalised) basis pair: an image whose
# low frequencies all stay under 0.1 (under half a gray level's amplitude) has no hash. (A
# constant image measures 2e-6; the dimmest real photo crop in the benchmark corpus, 0.38.)
MIN_AC = 0.1


@functools.lru_cache(maxsize=512)
def _basis(n: int) -> np.ndarray:
    """The LOW lowest DCT-II cosines sampled at n pixel centres, divided by n (LOW x n)."""
    k, x = np.arange(LOW)[:, None], np.arange(n)
    return (np.cos(np.pi * (2 * x + 1) * k / (2 * n)) / n).astype(np.float32)


def of_gray(gray: np.ndarray) -> str | None:
    """The hash of a 2-D uint8 gray image as 16 hex digits; None for a flat image."""
    factor = min(gray.shape) // MAX_SIDE
    if factor > 1:  # the shorter side ends in MAX_SIDE..2 * MAX_SIDE - 1
        gray = np.asarray(Image.fromarray(np.ascontiguousarray(gray), "L").reduce(factor))
    h, w = gray.shape
    coefficients = (_basis(h) @ gray.astype(np.float32) @ _basis(w).T).ravel()
    ac = coefficients[1:]
    if np.abs(ac).max() < MIN_AC:
        return None
    bits = coefficients > np.partition(ac, len(ac) // 2)[len(ac) // 2]  # the median of the 63
    return np.packbits(bits).tobytes().hex()


def of_image(im: Image.Image) -> str | None:
    """The hash of a decoded image (any mode): its luma, hashed by `of_gray`."""
    gray = im if im.mode == "L" else im.convert("RGB").convert("L")
    return of_gray(np.asarray(gray))


def distance(a: str, b: str) -> int:
    """Bits that differ between two hashes."""
    return (int(a, 16) ^ int(b, 16)).bit_count()
