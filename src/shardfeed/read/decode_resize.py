"""`load`'s JPEG path as one compiled TensorFlow op: the crop window decoded, resized, rounded and
flipped, the same pixels as TensorFlow's ops, in about two thirds of their CPU.

`decode_and_crop_jpeg` then the fused resize (read/fused_resize.py) cost ~0.40 + 0.07 ms a
200-500 px photo here, and TensorFlow's decode_and_crop is hardly cheaper than its whole decode
(~0.45 ms): it hands libjpeg's rows over one at a time and copies each. The op
(csrc/decode_resize_op.cc) decodes the same window with libjpeg's partial decode
(csrc/window_decode.c, as `grain_dataset` does, here cut as `decode_and_crop_jpeg` cuts it and
with its DCT: every value equal, tests/test_decode_resize.py), all the window's rows in one
call, and hands them straight to the fused resize: ~0.27 ms for the decode.

It is compiled on first use against TensorFlow's headers (as the fused resize op) and the
system's libjpeg (`jpeglib.h`, `-ljpeg`; TensorFlow's own libjpeg is not exported), once per
machine, TensorFlow and compiler (read/native_build.py). Where it cannot be had, `load` runs
TensorFlow's decode and the fused resize; where libjpeg refuses or warns about a JPEG (corrupt
data, CMYK), the op says so and that record takes TensorFlow's path, which reports as before.
`DecodeOptions(fused_resize=False)` uses neither op.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from shardfeed.lazy import tensorflow
from shardfeed.read import fused_resize, native_build

log = logging.getLogger("shardfeed")

SOURCES = ("window_decode.c", "fused_resize.cc", "decode_resize_op.cc")
LIBRARY = "decode_resize.so"
INSTEAD = "load decodes JPEGs with TensorFlow's decode_and_crop_jpeg"


def decode_resize(
    data: Any, window: Any, ratio: Any, size: tuple[int, int], flip: Any, *, channels: int, fast_dct: bool
) -> tuple[Any, Any] | None:
    """(image uint8 [size, channels], ok) for the JPEG `data`'s `window` ([top, left, height,
    width] at 1/`ratio` scale) resized to `size`, mirrored where `flip`: what
    `decode_and_crop_jpeg` then `fused_resize.resize_flip` give; `ok` false where libjpeg
    refused or warned (then the image is zeros: the caller decodes with TensorFlow). None where
    the op cannot be had."""
    library = _library()
    if library is None:
        return None
    tf = tensorflow()
    image, ok = library.shardfeed_decode_resize(
        data, window, tf.cast(ratio, tf.int32), tf.constant(size, tf.int32), flip, channels=channels, fast_dct=fast_dct
    )
    return image, ok


def available() -> bool:
    """Whether the op can be used in this process: built (now, once per machine and
    TensorFlow, if not yet) and loaded. `make install` and `make test` call it."""
    return _library() is not None


@functools.cache
def _library() -> Any:
    """The loaded op library, built first if this machine has none for this TensorFlow; None
    (with one warning) where that fails."""
    tf = tensorflow()
    compiler = native_build.compiler("CXX", "c++", "C++", INSTEAD)
    if compiler is None:
        return None
    c, cc, op = (str(native_build.SOURCES / name) for name in SOURCES)
    flags = tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()
    command = [compiler, *fused_resize.OPTIMIZE, "-x", "c", c, "-x", "c++", cc, op, *flags, "-ljpeg"]
    what = "the JPEG decode-and-resize op"
    path = native_build.built(LIBRARY, command, SOURCES, what=what, instead=INSTEAD, extra=tf.__version__)
    if path is None:
        return None
    try:
        return tf.load_op_library(str(path))
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError, tf.errors.AlreadyExistsError) as e:
        log.warning("%s %s did not load (%s): %s", what, path, e, INSTEAD)
        return None
