"""The native ops `load` and `grain_dataset` use where they can be built: compiled on first use
from the sources the package ships (native/csrc/) into the user's cache, each op's absence a slower
path with the same pixels.

    build.py          the compile, the cache (its key: the sources, TensorFlow, libjpeg, the
                      compiler), SHARDFEED_NATIVE=auto|off|require, status() for `shardfeed native`
    fused_resize.py   resize, rounding and flip as one TensorFlow op (`load`)
    batch_decode.py   a batch's JPEG windows decoded and resized into the batch by one op (`load`)
    window_decode.py  the same through ctypes, for `grain_dataset` (no TensorFlow)
"""
