"""Segmentation's target: a mask of class ids, the image's size, cut, resized and flipped as its
image is (the same crop window, cut at full resolution; nearest-neighbour, so every pixel stays
an id; a letterbox's padding 255, ignored as Model Garden's ignore_label).

    load             uint8 [B, H, W]
    IndexedRecords   uint8 [h, w]: the stored mask
    grain_dataset    uint8 [B, H, W]
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from shardfeed.format.schema import IGNORED_LABEL, SEGMENTATION, SEGMENTATION_MASK
from shardfeed.lazy import tensorflow
from shardfeed.read.augment import flip_seed
from shardfeed.read.decode.image import crop_window, letterboxed
from shardfeed.read.geometry import View, letterbox_frame, tf_ops
from shardfeed.read.targets.base import Placing, Targets, TfTargets

if TYPE_CHECKING:
    from shardfeed.format.schema import Schema
    from shardfeed.read.decode.image import Preprocess


class SegmentationTargets(Targets):
    """A mask of class ids (module docstring)."""

    task: ClassVar[str] = SEGMENTATION
    exact: ClassVar[bool] = True
    images_only: ClassVar[bool] = False

    def features(self, schema: Schema) -> dict[str, Any]:
        tf = tensorflow()
        return {SEGMENTATION_MASK: tf.io.FixedLenFeature([], tf.string)}

    def tf_targets(self, schema: Schema, options: Preprocess) -> TfTargets | None:
        return lambda parsed, seed: (decode_mask(parsed[SEGMENTATION_MASK], seed, options),)

    def raw(self, example: dict[str, Any], offset: int, classes: int) -> Any:
        from PIL import Image

        with Image.open(io.BytesIO(example[SEGMENTATION_MASK])) as mask:
            return np.asarray(mask, np.uint8)

    def placed(self, target: Any, view: View, placing: Placing) -> Any:
        """The mask cut by the view's window, resized nearest-neighbour into its frame (the
        letterbox's padding ignored), flipped with the image."""
        from PIL import Image

        top, left, h, w = view.window
        frame_h, frame_w, frame_top, frame_left = view.frame
        cut = Image.fromarray(np.ascontiguousarray(target[top : top + h, left : left + w]))
        placed = np.full(view.size, IGNORED_LABEL, np.uint8)
        placed[frame_top : frame_top + frame_h, frame_left : frame_left + frame_w] = np.asarray(
            cut.resize((frame_w, frame_h), Image.Resampling.NEAREST), np.uint8
        )
        return placed[:, ::-1].copy() if view.flipped else placed


def decode_mask(data: Any, seed: Any, options: Preprocess) -> Any:
    """A record's segmentation mask [H, W] (uint8 class ids), cut and flipped as its image is:
    the same crop window (drawn from the same seed; a mask has its image's size), resized with
    nearest-neighbour so that every pixel stays an id, flipped with the image's flip seed."""
    tf = tensorflow()
    mask = tf.io.decode_png(data, channels=1)
    window = crop_window(tf.shape(mask), seed, options)
    mask = tf.image.crop_to_bounding_box(mask, window[0], window[1], window[2], window[3])
    if letterboxed(options):  # the padding is 255: ignored, as Model Garden's ignore_label
        frame = tf.stack(letterbox_frame(tf.shape(mask)[0], tf.shape(mask)[1], options.image_size, tf_ops()))
        mask = tf.image.resize(mask, frame[:2], method="nearest")
        bottom, right = options.image_size[0] - frame[0] - frame[2], options.image_size[1] - frame[1] - frame[3]
        mask = tf.pad(mask, [[frame[2], bottom], [frame[3], right], [0, 0]], constant_values=IGNORED_LABEL)
    else:
        mask = tf.image.resize(mask, options.image_size, method="nearest")
    if options.augment is not None and options.augment.flip:
        mask = tf.image.stateless_random_flip_left_right(mask, flip_seed(seed))
    mask.set_shape([*options.image_size, 1])
    return mask[..., 0]
