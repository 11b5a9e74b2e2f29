"""A perceptual hash of each image (two 64-bit halves), from the small gray image the decode check
makes anyway.

    gray image (a JPEG's DCT-scaled decode: 1/8 scale, or larger where that leaves a side under
                MIN_SIDE; other images: their luma), box-reduced by an integer factor to a shorter
                side under 2 x MAX_SIDE
    -> its projection on the 8 x 8 lowest cosines of the image's DCT-II, each pixel taken at the
       place and width it covers in the full-size image (a scaled decode's last pixel covers a
       part block), weighted by a window that leans to the middle (1 - ALPHA + ALPHA sin)
    -> bit i set where coefficient i is above the median of the 63 AC coefficients
    -> the same again for the frame's central window, ZOOM of each side left out: the
       companion half, what a copy cropped by about ZOOM a side hashes to as a whole

Re-encoding, resizing and brightness changes move few bits; small crops (a few percent a side)
move the most in the first half (the whole frame), so two images are compared whole against
whole and whole against the other's window, the smallest of the three distances counting
(`distance`): an even 3% crop a side is found 100% of the time instead of 55%, and different
photos sit as far apart (docs/benchmarks/near_duplicates.md, "near-duplicates"). Two
choices make a 1/8-scale decode enough (no larger decode, so hashing costs only the projection):
the pixel geometry (a 1/8 image of a 300 px side has 38 pixels, the last covering 4 px, not 8)
and the window (a crop moves content least in the middle of the frame). Images too flat to say
anything (no low frequency of half a gray level's amplitude, `MIN_AC`) or too small (a side under
`SMALLEST`) get no hash, so they never group by accident. The definition is ours (`NAME`, pinned
by a golden test), not imagehash's or imagededup's: their resize filters differ, so their bits do.

A conversion keeps what each hash is made from (`source`: the small gray image) and makes a batch
of hashes after the batch's images (`of_sources`): warm, a hash costs about half as much.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
from PIL import Image

NAME = "shardfeed-phash-v3"  # recorded in the manifest: hashes of another version are not compared
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
KEPT_PIXELS = 1 << 14  # a larger (reduced) gray image is hashed at once, not kept for a batch
ALPHA = 0.2  # the window's depth: recall 0.945 without it, 0.96 with 0.1..0.3 (docs/benchmarks/near_duplicates.md)
# The companion half's window leaves out this share of each side: even crops of 1-4% a side are
# found 96-100% of the time with 0.03, 0.95-0.99 with 0.04 (2% crops lose), docs/benchmarks/near_duplicates.md.
ZOOM = 0.03
HEX = 2 * LOW * LOW // 4  # hex digits of a hash: the whole frame's 16, then the window's 16


_NOTHING = np.zeros((0, 0), np.uint8)
_FREQUENCIES = np.pi * np.arange(LOW)[:, None]
_CACHED = 4096  # bases kept (`_axis`), some 3 KB each
_bases: dict[tuple[int, int, int], np.ndarray] = {}


def _axis(decoded: int, length: int, factor: int) -> np.ndarray:
    """The LOW windowed cosines along one side of `length` full-size pixels that was decoded to
    `decoded` pixels (`_decode_step`), then box-reduced by `factor`, over the whole side, then
    over its central window (`ZOOM`): 2 LOW x pixels, cached.

    A miss also makes the bases of the other lengths that decode to as many pixels (8 at 1/8
    scale) in the same NumPy calls: photos of many sizes (200-500 px a side) made ~300 misses a
    worker at ~30 us each, as much as the hashes of 1,000 of them cost (docs/benchmarks/near_duplicates.md)."""
    found = _bases.get((decoded, length, factor))
    if found is None:
        if len(_bases) >= _CACHED:
            _bases.clear()
        step = _decode_step(decoded, length)
        lengths = [n for n in _decoding_alike(decoded, step) if n == length or _decode_step(decoded, n) == step]
        pixels = -(-decoded // factor)
        zooms = np.repeat([0.0, ZOOM], len(lengths))[:, None]  # the wholes and the windows in one pass
        both = _windowed_cosines(lengths * 2, step * factor, pixels, zooms).reshape(2, len(lengths), LOW, pixels)
        for n, whole, window in zip(lengths, *both, strict=True):
            _bases[(decoded, n, factor)] = np.concatenate((whole, window))
        found = _bases[(decoded, length, factor)]
    return found


def _decoding_alike(decoded: int, step: float) -> range:
    """The lengths whose decode at this scale (one pixel a `step` full-size ones) has `decoded`
    pixels: just `decoded` at full size (or an unknown scale)."""
    m = 8 / step
    if step == 1 or m != round(m):
        return range(decoded, decoded + 1)
    return range((decoded - 1) * 8 // round(m) + 1, decoded * 8 // round(m) + 1)


def _windowed_cosines(lengths: list[int], step: float, pixels: int, zoom: float | np.ndarray = 0.0) -> np.ndarray:
    """Per length, the bases `_axis` describes for `pixels` pixels of `step` full-size ones each,
    over the side's window [zoom, 1 - zoom] (`zoom`: one for all, or a column of one a length):
    pixel i covers [i * step, (i + 1) * step) of the side, the last one cut at the length, and
    counts for the part of it inside the window, at that part's middle (outside: nothing). AC
    rows sum to zero over the window, so a constant image projects to nothing."""
    length = np.array(lengths, np.float64)[:, None]
    starts = np.arange(pixels) * step
    ends = np.minimum(starts + step, length)
    low, high = zoom * length, (1 - zoom) * length
    inside = np.clip(np.minimum(ends, high) - np.maximum(starts, low), 0, None) / (high - low)
    centre = ((np.clip(starts, low, high) + np.clip(ends, low, high)) / 2 - low) / (high - low)
    rows = np.cos(_FREQUENCIES * centre[:, None, :])
    rows *= (inside * (1 - ALPHA + ALPHA * np.sin(np.pi * centre)))[:, None, :]
    rows[:, 1:] -= rows[:, 1:].sum(axis=2, keepdims=True) * (inside / inside.sum(axis=1, keepdims=True))[:, None, :]
    return rows.astype(np.float32)


def _decode_step(decoded: int, length: int) -> float:
    """How many full-size pixels one pixel of a decode covers: 1 at full size, 8 / M for
    libjpeg's M/8 scaled decodes (ceil(length * M / 8) pixels)."""
    if decoded == length:
        return 1.0
    return next((8 / m for m in range(1, 16) if -(-length * m // 8) == decoded), length / decoded)


class Source(NamedTuple):
    """What one image's hash is made from (`source`): its gray image, box-reduced, and the keys
    of its sides' bases; or, for a large one, the hash itself, made at once (`done`)."""

    gray: np.ndarray
    rows: tuple[int, int, int]  # `_axis` arguments of its height
    columns: tuple[int, int, int]  # and of its width
    done: bool = False
    hash: str | None = None


def source(gray: np.ndarray, size: tuple[int, int] | None = None) -> Source | None:
    """What the hash of a 2-D uint8 gray image is made from (`of_sources`); None for a tiny one.

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
    found = Source(gray, (h, height, factor), (w, width, factor))
    if gray.size > KEPT_PIXELS:  # (a long thin image) hashed now: what waits for a hash stays small
        return found._replace(gray=_NOTHING, done=True, hash=_hashes([found])[0])
    return found


def of_sources(sources: Sequence[Source]) -> list[str | None]:
    """The hashes (HEX hex digits; None for a flat image) of many images, together: made after a
    batch of images is decoded, not after each decode, a hash costs about half as much in a
    conversion's worker (shards.HASHED_AT_ONCE): the projections run warm, one after the other,
    and the medians, comparisons and hex digits are a few NumPy calls for the whole batch."""
    waiting = [s for s in sources if not s.done]
    made = iter(_hashes(waiting))
    return [s.hash if s.done else next(made) for s in sources]


def _hashes(sources: Sequence[Source]) -> list[str | None]:
    """The hashes of `source`s: per half (the whole frame, its window), bit i set where
    coefficient i of the image's projection is above the median of its 63 AC ones; None where
    either half's all stay under MIN_AC (a flat image)."""
    coefficients = np.empty((len(sources), 2, LOW, LOW), np.float32)
    for found, out in zip(sources, coefficients, strict=True):
        # .dot casts the uint8 image itself: 1 us an image less than @ (np.dot: 0.3 us more)
        both = _axis(*found.rows).dot(found.gray).dot(_axis(*found.columns).T)  # one product: fewer calls
        out[0], out[1] = both[:LOW, :LOW], both[LOW:, LOW:]
    flat = coefficients.reshape(2 * len(sources), LOW * LOW)
    ac = np.sort(flat[:, 1:], axis=1)
    flat_halves = ((-ac[:, 0] < MIN_AC) & (ac[:, -1] < MIN_AC)).reshape(len(sources), 2)
    blank = np.logical_or(flat_halves[:, 0], flat_halves[:, 1])
    digits = np.packbits(flat > ac[:, ac.shape[1] // 2, None], axis=1).tobytes().hex()  # above the median
    return [None if blank[i] else digits[HEX * i : HEX * i + HEX] for i in range(len(sources))]


def of_source(found: Source | None) -> str | None:
    """The hash of one image (`of_sources`); None for a flat one or no source (a tiny image)."""
    return None if found is None else of_sources([found])[0]


def of_gray(gray: np.ndarray, size: tuple[int, int] | None = None) -> str | None:
    """The hash of one 2-D uint8 gray image (`source`'s arguments); None for a flat or tiny one."""
    return of_source(source(gray, size))


def of_image(im: Image.Image, size: tuple[int, int] | None = None) -> str | None:
    """The hash of a decoded image (any mode): its luma, hashed by `of_gray` (`size`: as there)."""
    return of_gray(luma(im), size)


def image_source(im: Image.Image, size: tuple[int, int] | None = None) -> Source | None:
    """`source` of a decoded image (any mode): its luma (`size`: as there)."""
    return source(luma(im), size)


def luma(im: Image.Image) -> np.ndarray:
    """A decoded image's gray pixels, as the hash sees them (any mode: through RGB)."""
    return np.asarray(im if im.mode == "L" else im.convert("RGB").convert("L"))


def halves(phash: str) -> tuple[int, int]:
    """A hash's two 64-bit halves: (the whole frame's, its central window's)."""
    return int(phash[: HEX // 2], 16), int(phash[HEX // 2 :], 16)


def as_array(hashes: Iterable[str | None]) -> np.ndarray:
    """Hashes as an (N, 2) uint64 array of their `halves`, (0, 0) for none (a hash has 32 bits
    set in each half, never none): what near_duplicates searches."""
    flat = np.fromiter(itertools.chain.from_iterable(halves(h) if h else (0, 0) for h in hashes), np.uint64)
    return flat.reshape(-1, 2)


def distance(a: str, b: str) -> int:
    """How far apart two images' hashes are: the fewest bits that differ between the whole
    frames, or between one's whole frame and the other's window (a crop of the other)."""
    (a_whole, a_window), (b_whole, b_window) = halves(a), halves(b)
    return min((a_whole ^ b_whole).bit_count(), (a_whole ^ b_window).bit_count(), (a_window ^ b_whole).bit_count())
