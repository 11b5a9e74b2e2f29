"""`grain_dataset`'s crop-window JPEG decode: only the window's pixels, through libjpeg.

simplejpeg, the TensorFlow-free path's decoder, decodes the whole image; a training crop covers
~40% of it on average. csrc/window_decode.c asks libjpeg(-turbo) for the window only, as
TensorFlow's `decode_and_crop_jpeg` does for `load`: rows above it skipped, columns outside it
not transformed, decoding stopped after its last row. The pixels are the whole image's (the
columns widened by one on each side, so that the edge columns are upsampled from their true
neighbours): equal, value for value, to simplejpeg's whole decode cut to the window
(tests/test_window_decode.py), in ~0.7 of its CPU on 200-500 px photos.

It is compiled on first use by the machine's C compiler (`$CC`, else `cc`) against the system's
libjpeg (`jpeglib.h`, `-ljpeg`: Debian's libjpeg62-turbo-dev, Fedora's libjpeg-turbo-devel),
once per machine, into the user's cache (read/native_build.py). Where that cannot be (no
compiler or headers), or a JPEG is one libjpeg refuses or warns about (corrupt data, CMYK), the
caller decodes the whole image with simplejpeg as before, which reports the error as before.
The call goes through ctypes, which releases the GIL while libjpeg works.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from typing import Any

import numpy as np

from shardfeed.read import native_build

log = logging.getLogger("shardfeed")

SOURCE, LIBRARY = "window_decode.c", "window_decode.so"
INSTEAD = "grain_dataset decodes whole JPEGs with simplejpeg"
MARGIN = 72  # columns the decoder may add around a window: up to an iMCU (32 px at most) and one, a side


def decode_window(data: bytes, scale: int, window: tuple[int, int, int, int]) -> np.ndarray | None:
    """Pixels [top, left, height, width] (RGB uint8, a view) of the JPEG `data` decoded at 1/`scale`
    (1, 2, 4, 8; the window in that scale's pixels); None where the library cannot be had or
    libjpeg refuses or warns about this JPEG: the caller then decodes it whole."""
    decode = _function()
    if decode is None:
        return None
    top, left, height, width = window
    data = data if isinstance(data, bytes) else bytes(data)  # ctypes passes bytes as they are
    out = np.empty((height, width + MARGIN, 3), np.uint8)
    skip = ctypes.c_int()
    failed = decode(data, len(data), scale, top, left, height, width, 3, 0, out.ctypes.data, out.strides[0], skip)
    if failed:
        return None
    return out[:, skip.value : skip.value + width]


def available() -> bool:
    """Whether the decoder can be used in this process: built (now, once per machine, if not
    yet) and loaded. `make install` and `make test` call it."""
    return _function() is not None


@functools.cache
def _function() -> Any:
    """The library's decode function, built first if this machine has none; None (with one
    warning) where that fails."""
    compiler = native_build.compiler("CC", "cc", "C", INSTEAD)
    if compiler is None:
        return None
    command = [compiler, "-O2", "-fPIC", "-shared", str(native_build.SOURCES / SOURCE), "-ljpeg"]
    path = native_build.built(LIBRARY, command, (SOURCE,), what="the crop-window JPEG decoder", instead=INSTEAD)
    if path is None:
        return None
    try:
        function = ctypes.CDLL(str(path)).shardfeed_window_decode
    except OSError as e:
        log.warning("the crop-window JPEG decoder %s did not load (%s): %s", path, e, INSTEAD)
        return None
    function.argtypes = [
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
    function.restype = ctypes.c_int
    return function
