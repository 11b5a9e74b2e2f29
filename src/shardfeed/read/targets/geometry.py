"""The geometry a target shares with its image, for `load` (TensorFlow tensors) and
`grain_dataset` (NumPy arrays).

Both place a record's targets by the same arithmetic, so the two feeds give the same values for
the same crop window and flip: here are KerasHub's box formats made from pixel edges, where a
letterboxed image lies in its output (`tf.image.resize_with_pad`'s numbers), and `View`, how one
output image was made from its stored image. The functions use only arithmetic, so they take
either kind of array.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


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


def letterbox_numbers(height: int, width: int, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """Where a `height` x `width` image lies in a letterboxed output of `size` (H, W): [resized
    height, resized width, top padding, left padding], in float32 as `tf.image.resize_with_pad`
    computes them (decode.letterbox_frame is the same in TensorFlow)."""
    h, w, out_h, out_w = (np.float32(v) for v in (height, width, *size))
    ratio = max(w / out_w, h / out_h)
    top = max(np.float32(0), np.floor((out_h - h / ratio) / np.float32(2)))
    left = max(np.float32(0), np.floor((out_w - w / ratio) / np.float32(2)))
    return max(1, int(np.floor(h / ratio))), max(1, int(np.floor(w / ratio))), int(top), int(left)
