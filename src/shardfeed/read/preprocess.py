"""What decides a batch's pixels (`Preprocess`: output size, augmentation, decode options) and
where each output pixel comes from: the crop window (random-resized or centre) and the letterbox
frame, which the image (read/decode.py), its boxes and its mask (read/record_targets.py) share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shardfeed.lazy import tensorflow
from shardfeed.read.augment import Augment, random_crop_window
from shardfeed.read.options import DecodeOptions


@dataclass(frozen=True)
class Preprocess:
    """Everything that decides the pixels of a batch: output size, augmentation, decode config."""

    image_size: tuple[int, int]
    augment: Augment | None  # None: evaluation preprocessing (the centre crop)
    config: DecodeOptions = field(default_factory=DecodeOptions)
    whole_image: bool = False  # evaluation reads the whole image, not the centre crop (detection)


def crop_window(shape: Any, seed: Any, options: Preprocess) -> Any:
    """The crop to decode: random-resized when augmenting, else the centre square."""
    tf = tensorflow()
    if options.augment is not None and options.augment.crop:
        return random_crop_window(shape, seed, options.augment)
    h, w = shape[0], shape[1]
    if options.whole_image or options.config.letterbox:  # detection's evaluation: every object stays in view
        return tf.stack([0, 0, h, w])
    side = tf.maximum(1, tf.cast(tf.cast(tf.minimum(h, w), tf.float32) * options.config.crop_fraction, tf.int32))
    return tf.stack([(h - side) // 2, (w - side) // 2, side, side])


def letterboxed(options: Preprocess) -> bool:
    """Whether the image is letterboxed: asked for, and not randomly cropped."""
    augment = options.augment
    return options.config.letterbox and (augment is None or not augment.crop)


def letterbox_frame(height: Any, width: Any, size: tuple[int, int]) -> Any:
    """Where a `height` x `width` image lies in a letterboxed output of `size` (H, W): int32
    [resized height, resized width, top padding, left padding], by `tf.image.resize_with_pad`'s
    arithmetic (the image, its boxes and its mask all use these numbers)."""
    tf = tensorflow()
    h, w = tf.cast(height, tf.float32), tf.cast(width, tf.float32)
    out_h, out_w = float(size[0]), float(size[1])
    ratio = tf.maximum(w / out_w, h / out_h)
    resized_h, resized_w = tf.floor(h / ratio), tf.floor(w / ratio)
    top = tf.maximum(0.0, tf.floor((out_h - h / ratio) / 2))
    left = tf.maximum(0.0, tf.floor((out_w - w / ratio) / 2))
    return tf.cast(tf.stack([tf.maximum(resized_h, 1.0), tf.maximum(resized_w, 1.0), top, left]), tf.int32)
