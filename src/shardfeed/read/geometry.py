"""The geometry an image and its targets share, written once for `load` (TensorFlow tensors, in
its graph) and `grain_dataset` (NumPy and Python numbers), so the two feeds give the same windows,
frames and boxes for the same draws:

    dct_index        which of libjpeg's DCT scales a window is decoded at
    scaled_window    the window in the pixels of the image decoded at that scale
    letterbox_frame  where a letterboxed image lies in its output (`tf.image.resize_with_pad`'s numbers)
    window_fractions boxes in stored pixels as clipped fractions of the crop window
    in_frame         fractions of the window in output pixels (inside a letterbox's frame), flipped
    box_columns      KerasHub's box formats from pixel edges

Each takes `ops`, the array functions of its side (`NUMPY`, or `tf_ops()`: the same names over
TensorFlow, as the array API's namespaces are), and only arithmetic besides; `View` says how one
output image was made from its stored image (Grain's side).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from shardfeed.lazy import tensorflow

DCT_SCALES = (1, 2, 4, 8)  # the reduced sizes libjpeg decodes to directly

NUMPY = SimpleNamespace(  # windows and frames are Python ints, boxes NumPy arrays
    minimum=min,
    maximum=max,
    floor=np.floor,
    clip=np.clip,
    where=np.where,
    float32=np.float32,
    int32=int,
)


@functools.cache
def tf_ops() -> SimpleNamespace:
    """`NUMPY`'s functions over TensorFlow's ops (graph-safe)."""
    tf = tensorflow()
    return SimpleNamespace(
        minimum=tf.minimum,
        maximum=tf.maximum,
        floor=tf.floor,
        clip=tf.clip_by_value,
        where=tf.where,
        float32=lambda v: tf.cast(v, tf.float32),
        int32=lambda v: tf.cast(v, tf.int32),
    )


@dataclass(frozen=True)
class View:
    """How one output image was made from its stored image."""

    shape: tuple[int, int]  # the stored image's (height, width)
    window: tuple[int, int, int, int]  # the cut: top, left, height, width, in its pixels
    frame: tuple[int, int, int, int]  # the picture in the output: height, width, top, left
    size: tuple[int, int]  # the output's (height, width)
    flipped: bool


def box_columns(x0: Any, y0: Any, x1: Any, y1: Any, name: str, size: tuple[float, float]) -> tuple[Any, ...]:
    """Boxes given by their pixel edges in an output of `size` (H, W), as the four columns of
    one of KerasHub's formats (`options.BOX_FORMATS`): 'rel_' ones are fractions of the output."""
    if name.startswith("rel_"):
        x0, x1, y0, y1 = x0 / size[1], x1 / size[1], y0 / size[0], y1 / size[0]
    return {
        "xyxy": (x0, y0, x1, y1),
        "yxyx": (y0, x0, y1, x1),
        "xywh": (x0, y0, x1 - x0, y1 - y0),
        "center_xywh": ((x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0),
        "center_yxhw": ((y0 + y1) / 2, (x0 + x1) / 2, y1 - y0, x1 - x0),
    }[name.removeprefix("rel_")]


def letterbox_frame(height: Any, width: Any, size: tuple[int, int], ops: Any = NUMPY) -> tuple[Any, Any, Any, Any]:
    """Where a `height` x `width` image lies in a letterboxed output of `size` (H, W): [resized
    height, resized width, top padding, left padding], computed in float32 as
    `tf.image.resize_with_pad` computes them, as ints (`ops.int32`: Python ints with `NUMPY`)."""
    h, w = ops.float32(height), ops.float32(width)
    out_h, out_w = ops.float32(float(size[0])), ops.float32(float(size[1]))
    ratio = ops.maximum(w / out_w, h / out_h)
    resized_h, resized_w = ops.maximum(ops.floor(h / ratio), 1.0), ops.maximum(ops.floor(w / ratio), 1.0)
    top = ops.maximum(ops.floor((out_h - h / ratio) / 2), 0.0)
    left = ops.maximum(ops.floor((out_w - w / ratio) / 2), 0.0)
    return ops.int32(resized_h), ops.int32(resized_w), ops.int32(top), ops.int32(left)


def dct_index(height: Any, width: Any, size: tuple[int, int], ops: Any = NUMPY) -> Any:
    """Which of `DCT_SCALES` to decode a `height` x `width` window at: the largest the window
    holds the output `size` that many times over (an index into `DCT_SCALES`)."""
    room = ops.minimum(height // size[0], width // size[1])  # times the window holds the output
    index = ops.int32(room >= DCT_SCALES[1])
    for scale in DCT_SCALES[2:]:
        index = index + ops.int32(room >= scale)
    return index


def scaled_window(window: Any, shape: Any, ratio: Any, ops: Any = NUMPY) -> tuple[Any, Any, Any, Any]:
    """`window` (top, left, height, width) in the pixels of the image of `shape` (height, width)
    decoded at 1/`ratio` (libjpeg's crop window is in the scaled image's coordinates): the nearest
    scaled pixel edges (off by at most half a scaled pixel), inside the scaled image. At ratio 1,
    `window` itself."""
    top, left, h, w = window[0], window[1], window[2], window[3]
    half = ratio // 2
    y0, x0 = (top + half) // ratio, (left + half) // ratio
    y1 = ops.minimum((top + h + half) // ratio, (shape[0] + ratio - 1) // ratio)
    x1 = ops.minimum((left + w + half) // ratio, (shape[1] + ratio - 1) // ratio)
    return y0, x0, y1 - y0, x1 - x0


def window_fractions(edges: tuple[Any, Any, Any, Any], window: Any, ops: Any = NUMPY) -> tuple[tuple, Any, Any]:
    """Box edges (x0, y0, x1, y1) in pixels of the stored image as fractions of the crop
    `window` (top, left, height, width), clipped to it; and each box's area before and after the
    clip (in the window's fractions), from which a reader drops the boxes with too little left."""
    top, left, h, w = window[0], window[1], window[2], window[3]
    x0, x1 = (edges[0] - left) / w, (edges[2] - left) / w
    y0, y1 = (edges[1] - top) / h, (edges[3] - top) / h
    before = (x1 - x0) * (y1 - y0)
    x0, y0, x1, y1 = (ops.clip(v, 0.0, 1.0) for v in (x0, y0, x1, y1))
    return (x0, y0, x1, y1), before, (x1 - x0) * (y1 - y0)


def in_frame(fractions: tuple[Any, Any, Any, Any], frame: Any, out_w: float, flipped: Any, ops: Any = NUMPY) -> tuple:
    """Fractions of the window (x0, y0, x1, y1) in output pixels: inside the `frame` the window's
    picture fills (height, width, top, left: all of the output, or a letterbox's), mirrored
    across the output's width `out_w` where `flipped`."""
    x0, y0, x1, y1 = fractions
    frame_h, frame_w, frame_top, frame_left = frame[0], frame[1], frame[2], frame[3]
    x0, x1 = x0 * frame_w + frame_left, x1 * frame_w + frame_left
    y0, y1 = y0 * frame_h + frame_top, y1 * frame_h + frame_top
    if flipped is False:  # known unflipped: no select
        return x0, y0, x1, y1
    return ops.where(flipped, out_w - x1, x0), y0, ops.where(flipped, out_w - x0, x1), y1
