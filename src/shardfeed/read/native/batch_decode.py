"""`load`'s JPEG batches decoded by one compiled TensorFlow op: the pixels of TensorFlow's ops,
for about three quarters of their CPU.

Per record, `load` ran `decode_and_crop_jpeg` then the fused resize (read/native/fused_resize.py), and
tf.data copied each 224 px image into its batch; on 200-500 px photos the decode and the resize
were ~0.36 of the ~0.49 ms an image, the rest TensorFlow's per-record machinery and copies. The
op (csrc/decode_resize_batch_op.cc) takes a whole batch's JPEG bytes, crop windows, DCT ratios
and flips, decodes each window with libjpeg's partial decode (csrc/window_decode.c, as
`grain_dataset` does, here cut as `decode_and_crop_jpeg` cuts it and with its DCT: every value
equal, tests/test_batch_decode.py) and resizes it straight into its place in the batch.

It is compiled on first use against TensorFlow's headers (as the fused resize op) and the
system's libjpeg (`jpeglib.h`, `-ljpeg`; TensorFlow's own libjpeg is not exported), once per
machine, TensorFlow and compiler (read/native/build.py). Where it cannot be had (one warning),
`load` decodes record by record as before; where libjpeg refuses or warns about a JPEG (corrupt
data, CMYK), that record takes TensorFlow's ops (read/decode/mapped.py), which report as before.
`DecodeOptions(batch_decode=False)` never builds it.
"""

from __future__ import annotations

import functools
from typing import Any

from shardfeed.lazy import tensorflow
from shardfeed.read.native import build as native_build
from shardfeed.read.options import FAST_DCT

SOURCES = ("window_decode.c", "fused_resize.cc", "decode_resize_batch.cc", "decode_resize_batch_op.cc")
LIBRARY = "decode_resize_batch.so"
INSTEAD = "load decodes each JPEG with TensorFlow's decode_and_crop_jpeg"


def decode_resize(data: Any, windows: Any, ratios: Any, flips: Any, options: Any) -> tuple[Any, Any]:
    """(images uint8 [B, H, W, C], ok bool [B]) for a batch of JPEGs `data` [B], each one's
    window [top, left, height, width] at 1/ratio scale resized to `options.image_size` and
    mirrored where its flip holds: what `decode_and_crop_jpeg` then `fused_resize.resize_flip`
    give; ok false where libjpeg refused or warned (that image zeros). Only where `available()`."""
    height, width = options.image_size
    config = options.config
    return _library().shardfeed_decode_resize_batch(
        data,
        windows,
        ratios,
        flips,
        height=height,
        width=width,
        channels=config.channels,
        fast_dct=config.dct_method in FAST_DCT,
    )


def available() -> bool:
    """Whether the op can be used in this process: built (now, once per machine and
    TensorFlow, if not yet) and loaded. `make install` and `make test` call it."""
    return _library() is not None


@functools.cache
def _library() -> Any:
    """The loaded op library, built first if this machine has none for this TensorFlow; None
    (with one warning) where that fails."""
    tf = tensorflow()
    c, *cc = (str(native_build.SOURCES / name) for name in SOURCES)
    flags = tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()

    def command(compiler: str) -> list[str]:
        return [compiler, *native_build.OPTIMIZE, "-x", "c", c, "-x", "c++", *cc, *flags, "-ljpeg"]

    what = "the JPEG batch decode op"
    return native_build.op_library(LIBRARY, SOURCES, command, what=what, instead=INSTEAD, libjpeg=True)
