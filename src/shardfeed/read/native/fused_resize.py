"""`load`'s resize, rounding and flip as one compiled TensorFlow op, built once per TensorFlow.

The op (csrc/fused_resize.cc, csrc/fused_resize_op.cc) gives, bit for bit, what
`tf.cast(tf.round(tf.image.resize(image, size)), tf.uint8)` then a left-right flip give (the same
float32 arithmetic in the same order as TensorFlow's ResizeBilinear kernel), in about a fifth
of the CPU (0.06 against ~0.30 ms a 224 px image): each source row is interpolated once, read
as bytes, nothing is written as float32 but two interpolated rows, the flip is free. So using
it changes no pixel, and where it cannot be had `load` runs TensorFlow's ops instead.

It is compiled on first use by the machine's C++ compiler (`$CXX`, else `c++`) against the
installed TensorFlow's headers (`tf.sysconfig`), ~10 s, into the user's cache, once per
machine, TensorFlow and compiler (read/native/build.py: the key, the lock, `failed.txt`). A
failed build or load logs one warning and falls back (a machine without a compiler loads a
library built there before); `DecodeOptions(fused_resize=False)` and SHARDFEED_NATIVE=off never
build; `shardfeed native` says whether it is live.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from shardfeed.lazy import tensorflow
from shardfeed.read.native import build as native_build

KERNEL, OP = "fused_resize.cc", "fused_resize_op.cc"
LIBRARY = "fused_resize.so"
INSTEAD = "load resizes with TensorFlow's ops"


def resize_flip(image: Any, size: tuple[int, int], flip: Any) -> Any:
    """`image` (uint8 [h, w, c]) resized to `size`, rounded to uint8 and mirrored where `flip`
    (a bool tensor) holds, by the compiled op; None where it cannot be had (see the module
    docstring): the caller then runs TensorFlow's ops, which give the same pixels."""
    library = _library()
    if library is None:
        return None
    tf = tensorflow()
    return library.shardfeed_fused_resize(image, tf.constant(size, tf.int32), flip)


def available() -> bool:
    """Whether the op can be used in this process: built (now, once per machine and TensorFlow,
    if not yet) and loaded. `make install` and `make test` call it, so that the build is not
    made in the middle of a run."""
    return _library() is not None


@functools.cache
def _library() -> Any:
    """The loaded op library, built first if this machine has none for this TensorFlow; None
    (with one warning) where that fails."""
    tf = tensorflow()
    command = functools.partial(_command, tf)
    library = native_build.op_library(LIBRARY, (KERNEL, OP), command, what="the fused resize op", instead=INSTEAD)
    if library is None or not native_build.verified(LIBRARY, lambda: _pixel_check(library), REFERENCE):
        return None
    return library


REFERENCE = "TensorFlow's resize, round and flip"


def reference_resize_flip(image: Any, size: tuple[int, int], flip: bool) -> Any:
    """What the op promises, by TensorFlow's ops: `image` resized (bilinear), rounded to uint8,
    mirrored where `flip`."""
    tf = tensorflow()
    resized = tf.cast(tf.round(tf.image.resize(image, size)), tf.uint8)
    return tf.image.flip_left_right(resized) if flip else resized


def _pixel_check(library: Any) -> str | None:
    """The op against `reference_resize_flip` on a noise image, down and up, flipped and not:
    None where every value is equal, else what differs (run eagerly, even inside a traced map)."""
    tf = tensorflow()
    with tf.init_scope():
        image = tf.constant(np.random.default_rng(0).integers(0, 256, (23, 37, 3), dtype=np.uint8))
        for size in ((16, 16), (41, 29)):
            for flip in (False, True):
                ours = library.shardfeed_fused_resize(image, tf.constant(size, tf.int32), tf.constant(flip)).numpy()
                theirs = reference_resize_flip(image, size, flip).numpy()
                if ours.shape != theirs.shape or (ours != theirs).any():
                    return f"resized to {size}, flip {flip}: {int((ours != theirs).sum())} values differ"
    return None


def _command(tf: Any, compiler: str) -> list[str]:
    """The compiler command, less its output path."""
    flags = tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()
    return [
        compiler,
        *native_build.OPTIMIZE,
        str(native_build.SOURCES / KERNEL),
        str(native_build.SOURCES / OP),
        *flags,
    ]
