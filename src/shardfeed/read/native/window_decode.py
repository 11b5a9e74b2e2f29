"""`grain_dataset`'s JPEG decode: only the crop window's pixels, through libjpeg, and whole
batches of windows decoded and resized as `load` decodes and resizes them.

simplejpeg, the TensorFlow-free path's decoder, decodes the whole image; a training crop covers
~40% of it on average. csrc/window_decode.c asks libjpeg(-turbo) for the window only, as
TensorFlow's `decode_and_crop_jpeg` does for `load`: rows above it skipped, columns outside it
not transformed, decoding stopped after its last row.

    decode_resize   a batch's windows, each cut as `decode_and_crop_jpeg` cuts it, resized,
                    rounded and flipped by `load`'s fused resize straight into the batch array
                    (csrc/decode_resize_batch.cc, the loop `load`'s batch op runs): every value
                    `load`'s for the same window, DCT scale and flip, in one call a batch
    decode_window   one window (letterboxed, antialiased and exact cuts, one record at a time),
                    its columns widened by one on each side so that the edge columns are
                    upsampled from their true neighbours: equal, value for value, to simplejpeg's
                    whole decode cut to the window (tests/test_window_decode.py), in ~0.7 of its
                    CPU on 200-500 px photos

The library is compiled on first use by the machine's C++ compiler (`$CXX`, else `c++`; the
decoder is C, the resize C++) against the system's libjpeg (`jpeglib.h`, `-ljpeg`: Debian's
libjpeg62-turbo-dev, Fedora's libjpeg-turbo-devel), once per machine, into the user's cache
(read/native/build.py). Where that cannot be (no compiler or headers), or a JPEG is one libjpeg
refuses or warns about (corrupt data, CMYK), the caller decodes the whole image with simplejpeg
and resizes it with OpenCV as before (within a level of these pixels), which reports the error
as before. The calls go through ctypes, which releases the GIL while they run.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from shardfeed.read.native import build as native_build

log = logging.getLogger("shardfeed")

SOURCES = ("window_decode.c", "fused_resize.cc", "decode_resize_batch.cc")
LIBRARY = "window_decode.so"
INSTEAD = "grain_dataset decodes whole JPEGs with simplejpeg and resizes them with OpenCV"
AS_TENSORFLOW, FAST_DCT = 2, 1  # csrc/window_decode.c's flags: cut as TensorFlow cuts; libjpeg's fast IDCT
MARGIN = 72  # columns the decoder may add around a window: up to an iMCU (32 px at most) and one, a side


def decode_window(data: bytes, scale: int, window: tuple[int, int, int, int]) -> np.ndarray | None:
    """Pixels [top, left, height, width] (RGB uint8, a view) of the JPEG `data` decoded at 1/`scale`
    (1, 2, 4, 8; the window in that scale's pixels); None where the library cannot be had or
    libjpeg refuses or warns about this JPEG: the caller then decodes it whole."""
    library = _library()
    return None if library is None else _decoded(library, data, scale, window)


def _decoded(library: Any, data: bytes, scale: int, window: tuple[int, int, int, int]) -> np.ndarray | None:
    """`decode_window` by the loaded `library`."""
    top, left, height, width = window
    data = data if isinstance(data, bytes) else bytes(data)  # ctypes passes bytes as they are
    out = np.empty((height, width + MARGIN, 3), np.uint8)
    skip = ctypes.c_int()
    failed = library.shardfeed_window_decode(
        data, len(data), scale, top, left, height, width, 3, 0, out.ctypes.data, out.strides[0], skip
    )
    if failed:
        return None
    return out[:, skip.value : skip.value + width]


def decode_resize(
    data: Sequence[bytes],
    windows: Sequence[tuple[int, int, int, int]],
    ratios: Sequence[int],
    flips: np.ndarray,
    out: np.ndarray,
    fast_dct: bool = False,
) -> np.ndarray | None:
    """Decodes each JPEG's window [top, left, height, width] (at 1/ratio scale, in that scale's
    pixels), resizes it to `out`'s [B, H, W, 3] and mirrors it where `flips` (uint8 [B]) says,
    into `out` (C-contiguous uint8 [B, H, W, 3]), with libjpeg's fast IDCT if `fast_dct`
    (`options.FAST_DCT`): `load`'s pixels. Returns ok (bool [B]; false where libjpeg
    refused or warned: that image zeros), or None where the library cannot be had."""
    library = _library()
    if library is None:
        return None
    count = len(data)
    _check_out(out, (count, *out.shape[1:3], 3))
    pointers = (ctypes.c_char_p * count)(*(d if isinstance(d, bytes) else bytes(d) for d in data))
    sizes = np.array([len(d) for d in data], np.uint64)
    boxes = np.ascontiguousarray(windows, np.int32).reshape(count, 4)
    scales = np.ascontiguousarray(ratios, np.int32)
    flips = np.ascontiguousarray(flips, np.uint8)
    ok = np.zeros(count, np.uint8)
    library.shardfeed_decode_resize_batch(
        count,
        pointers,
        sizes.ctypes.data,
        boxes.ctypes.data,
        scales.ctypes.data,
        flips.ctypes.data,
        out.shape[1],
        out.shape[2],
        3,
        AS_TENSORFLOW | (FAST_DCT if fast_dct else 0),
        out.ctypes.data,
        ok.ctypes.data,
    )
    return ok.astype(bool)


def resize_into(image: np.ndarray, out: np.ndarray, flip: bool) -> bool:
    """`image` (uint8 [h, w, 3], rows may be a wider image's) resized to `out`'s [H, W, 3]
    (C-contiguous), rounded and mirrored where `flip` holds, into `out`: `load`'s fused resize,
    value for value. False where the library cannot be had."""
    library = _library()
    height, width = image.shape[:2]
    if library is None or image.dtype != np.uint8 or image.strides[1:] != (3, 1) or image.strides[0] < 3 * width:
        return False  # not rows of 3-byte pixels, one after another: the caller resizes its own way
    _check_out(out, (*out.shape[:2], 3))
    out_height, out_width = out.shape[:2]
    library.shardfeed_resize_into(
        image.ctypes.data, image.strides[0], height, width, 3, out.ctypes.data, out_height, out_width, int(flip)
    )
    return True


def _check_out(out: np.ndarray, shape: tuple[int, ...]) -> None:
    """Raises TypeError (a caller's bug, not the user's) unless `out` is a C-contiguous uint8
    array of `shape`: the C code writes it as such."""
    if out.dtype != np.uint8 or not out.flags.c_contiguous or out.shape != shape:
        raise TypeError(f"out must be a C-contiguous uint8 array of shape {shape}, got {out.dtype} {out.shape}")


def available() -> bool:
    """Whether the library can be used in this process: built (now, once per machine, if not
    yet) and loaded. `make install` and `make test` call it."""
    return _library() is not None


@functools.cache
def _library() -> Any:
    """The library, its functions' types declared, built first if this machine has none; None
    (with one warning) where that fails."""
    c, *cc = (str(native_build.SOURCES / name) for name in SOURCES)

    def command(compiler: str) -> list[str]:
        return [compiler, *native_build.OPTIMIZE, "-x", "c", c, "-x", "c++", *cc, "-ljpeg"]

    what = "the crop-window JPEG decoder"
    path = native_build.built(LIBRARY, SOURCES, command, what=what, instead=INSTEAD, libjpeg=True)
    if path is None:
        return None
    try:
        library = ctypes.CDLL(str(path))
    except OSError as e:
        native_build.unavailable(LIBRARY, f"{path} did not load ({e})")
        return None
    library.shardfeed_window_decode.argtypes = [
        ctypes.c_char_p,  # data
        ctypes.c_ulong,  # its size
        ctypes.c_int,  # scale
        ctypes.c_int,  # top
        ctypes.c_int,  # left
        ctypes.c_int,  # height
        ctypes.c_int,  # width
        ctypes.c_int,  # channels
        ctypes.c_int,  # flags (csrc/window_decode.c): 0, simplejpeg's pixels
        ctypes.c_void_p,  # out
        ctypes.c_ulong,  # out's row stride in bytes
        ctypes.POINTER(ctypes.c_int),  # skip (out)
    ]
    library.shardfeed_window_decode.restype = ctypes.c_int
    library.shardfeed_decode_resize_batch.argtypes = [
        ctypes.c_int64,  # count
        ctypes.POINTER(ctypes.c_char_p),  # each record's JPEG
        ctypes.c_void_p,  # uint64 sizes [count]
        ctypes.c_void_p,  # int32 windows [count, 4]
        ctypes.c_void_p,  # int32 ratios [count]
        ctypes.c_void_p,  # uint8 flips [count]
        ctypes.c_int64,  # output height
        ctypes.c_int64,  # output width
        ctypes.c_int,  # channels
        ctypes.c_int,  # flags
        ctypes.c_void_p,  # uint8 images [count, height, width, channels] (out)
        ctypes.c_void_p,  # uint8 ok [count] (out)
    ]
    library.shardfeed_decode_resize_batch.restype = ctypes.c_int64
    library.shardfeed_resize_into.argtypes = [
        ctypes.c_void_p,  # uint8 image
        ctypes.c_int64,  # its row stride in bytes
        ctypes.c_int64,  # height
        ctypes.c_int64,  # width
        ctypes.c_int64,  # channels
        ctypes.c_void_p,  # uint8 out [out height, out width, channels]
        ctypes.c_int64,  # out height
        ctypes.c_int64,  # out width
        ctypes.c_int,  # flip
    ]
    library.shardfeed_resize_into.restype = None
    if not native_build.verified(LIBRARY, lambda: _pixel_check(library), REFERENCE):
        return None
    return library


REFERENCE = "simplejpeg's whole decode"
CHECK_WINDOWS = (((3, 5, 38, 50), 1), ((2, 3, 19, 25), 2), ((1, 1, 4, 6), 8))  # window, scale


def _pixel_check(library: Any) -> str | None:
    """The decoder against simplejpeg's whole decode of a JPEG (4:2:0, made by simplejpeg's
    encoder), cut to the same windows at 1/1, 1/2 and 1/8: None where every value is equal, else
    what differs."""
    import simplejpeg

    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 200, 64)[None, :, None] + np.linspace(0, 50, 48)[:, None, None]
    image = np.clip(ramp + rng.normal(0, 12, (48, 64, 3)), 0, 255).astype(np.uint8)
    data = simplejpeg.encode_jpeg(image, quality=90, colorsubsampling="420")
    for window, scale in CHECK_WINDOWS:
        whole = simplejpeg.decode_jpeg(data, "RGB", min_height=-(-48 // scale), min_width=-(-64 // scale))
        top, left, height, width = window
        theirs = whole[top : top + height, left : left + width]
        ours = _decoded(library, data, scale, window)
        if ours is None or ours.shape != theirs.shape or (ours != theirs).any():
            differ = "refused" if ours is None else f"{int((ours != theirs).sum())} values differ"
            return f"window {window} at 1/{scale}: {differ}"
    return None
