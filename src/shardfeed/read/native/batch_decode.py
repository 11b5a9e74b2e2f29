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

import numpy as np

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
    library = native_build.op_library(LIBRARY, SOURCES, command, what=what, instead=INSTEAD, libjpeg=True)
    if library is None or not native_build.verified(LIBRARY, lambda: _pixel_check(library), REFERENCE):
        return None
    return library


REFERENCE = "TensorFlow's decode_and_crop_jpeg, resize, round and flip"
CHECK_WINDOWS = (((3, 5, 38, 50), 1, False), ((2, 3, 19, 25), 2, True), ((0, 0, 6, 8), 8, False))  # window, ratio, flip


def _pixel_check(library: Any) -> str | None:
    """The op against TensorFlow's decode of the same windows of a JPEG (4:2:0, made by
    TensorFlow's encoder) at 1/1, 1/2 and 1/8, resized, rounded and flipped by
    `fused_resize.reference_resize_flip`: None where every value is equal, else what differs."""
    from shardfeed.read.native.fused_resize import reference_resize_flip

    tf = tensorflow()
    size = (24, 32)
    with tf.init_scope():
        rng = np.random.default_rng(0)
        ramp = np.linspace(0, 200, 64)[None, :, None] + np.linspace(0, 50, 48)[:, None, None]
        image = np.clip(ramp + rng.normal(0, 12, (48, 64, 3)), 0, 255).astype(np.uint8)
        data = tf.io.encode_jpeg(image, quality=90)
        count = len(CHECK_WINDOWS)
        images, ok = library.shardfeed_decode_resize_batch(
            tf.fill([count], data),
            tf.constant([w for w, _, _ in CHECK_WINDOWS], tf.int32),
            tf.constant([r for _, r, _ in CHECK_WINDOWS], tf.int32),
            tf.constant([f for _, _, f in CHECK_WINDOWS]),
            height=size[0],
            width=size[1],
            channels=3,
            fast_dct=False,
        )
        for row, (window, ratio, flip) in enumerate(CHECK_WINDOWS):
            cut = tf.io.decode_and_crop_jpeg(data, window, channels=3, ratio=ratio, dct_method="INTEGER_ACCURATE")
            theirs = reference_resize_flip(cut, size, flip).numpy()
            ours = images[row].numpy()
            if not bool(ok[row]) or (ours != theirs).any():
                return f"window {window} at 1/{ratio}: {int((ours != theirs).sum())} values differ (ok {bool(ok[row])})"
    return None
