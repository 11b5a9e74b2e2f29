"""What `load` yields beside a record's image, cut as its image is (read/preprocess.py: the same
crop window and letterbox frame): multi-label k-hot vectors, detection boxes, segmentation masks."""

from __future__ import annotations

from typing import Any

from shardfeed.format.schema import BOX_KEYS, IGNORED_LABEL, OBJECT_LABEL
from shardfeed.lazy import tensorflow
from shardfeed.read.augment import flip_seed, flipped
from shardfeed.read.boxes import box_columns
from shardfeed.read.preprocess import Preprocess, crop_window, letterbox_frame, letterboxed


def k_hot(ids: Any, classes: int, offset: int) -> Any:
    """A multi-label record's stored ids (a sparse list) as a float32 [classes] vector of 0 and 1."""
    tf = tensorflow()
    dense = tf.sparse.to_dense(ids) - offset
    return tf.minimum(tf.reduce_sum(tf.one_hot(dense, classes, dtype=tf.float32), axis=0), 1.0)


def place_boxes(parsed: dict[str, Any], height: Any, width: Any, seed: Any, options: Preprocess, offset: int) -> Any:
    """A detection record's objects as its image is cut, resized (or letterboxed) and flipped:
    {"boxes": [N, 4] in `DecodeOptions.bounding_box_format` (default xyxy in pixels of the
    output), "labels": [N]}. The crop window is drawn from the image's seed and size, as the
    image's own; boxes are clipped to it, and those with less than `Augment.min_visible` of their
    area left inside are dropped."""
    tf = tensorflow()
    columns = [tf.sparse.to_dense(parsed[key]) for key in BOX_KEYS]
    labels = tf.sparse.to_dense(parsed[OBJECT_LABEL]) - offset
    shape = tf.cast(tf.stack([height, width, 3]), tf.int32)
    window = tf.cast(crop_window(shape, seed, options), tf.float32)
    h, w = tf.cast(height, tf.float32), tf.cast(width, tf.float32)
    x0, y0 = (columns[0] * w - window[1]) / window[3], (columns[1] * h - window[0]) / window[2]
    x1, y1 = (columns[2] * w - window[1]) / window[3], (columns[3] * h - window[0]) / window[2]
    before = (x1 - x0) * (y1 - y0)
    x0, y0, x1, y1 = (tf.clip_by_value(v, 0.0, 1.0) for v in (x0, y0, x1, y1))
    after = (x1 - x0) * (y1 - y0)
    augment = options.augment
    least = augment.min_visible if augment is not None else 0.0
    keep = tf.logical_and(after > 0, after >= least * before)
    out_h, out_w = (float(v) for v in options.image_size)
    if letterboxed(options):  # fractions of the window -> pixels of the picture inside the padding
        frame = tf.cast(
            letterbox_frame(tf.cast(height, tf.int32), tf.cast(width, tf.int32), options.image_size), tf.float32
        )
        x0, x1 = x0 * frame[1] + frame[3], x1 * frame[1] + frame[3]
        y0, y1 = y0 * frame[0] + frame[2], y1 * frame[0] + frame[2]
    else:
        x0, y0, x1, y1 = x0 * out_w, y0 * out_h, x1 * out_w, y1 * out_h
    if augment is not None and augment.flip:  # the decision tf.image.stateless_random_flip_left_right takes
        mirrored = flipped(seed)
        x0, x1 = tf.where(mirrored, out_w - x1, x0), tf.where(mirrored, out_w - x0, x1)
    boxes = box_format(x0, y0, x1, y1, options.config.bounding_box_format, (out_h, out_w))
    boxes, labels = tf.boolean_mask(boxes, keep), tf.boolean_mask(labels, keep)
    if options.config.max_objects is not None:
        boxes, labels = boxes[: options.config.max_objects], labels[: options.config.max_objects]
    return {"boxes": boxes, "labels": labels}


def box_format(x0: Any, y0: Any, x1: Any, y1: Any, name: str, size: tuple[float, float]) -> Any:
    """Boxes given by their pixel edges, as [N, 4] in one of KerasHub's formats (options.BOX_FORMATS)."""
    return tensorflow().stack(box_columns(x0, y0, x1, y1, name, size), axis=-1)


def decode_mask(data: Any, seed: Any, options: Preprocess) -> Any:
    """A record's segmentation mask [H, W] (uint8 class ids), cut and flipped as its image is:
    the same crop window (drawn from the same seed; a mask has its image's size), resized with
    nearest-neighbour so that every pixel stays an id, flipped with the image's flip seed."""
    tf = tensorflow()
    mask = tf.io.decode_png(data, channels=1)
    window = crop_window(tf.shape(mask), seed, options)
    mask = tf.image.crop_to_bounding_box(mask, window[0], window[1], window[2], window[3])
    if letterboxed(options):  # the padding is 255: ignored, as Model Garden's ignore_label
        frame = letterbox_frame(tf.shape(mask)[0], tf.shape(mask)[1], options.image_size)
        mask = tf.image.resize(mask, frame[:2], method="nearest")
        bottom, right = options.image_size[0] - frame[0] - frame[2], options.image_size[1] - frame[1] - frame[3]
        mask = tf.pad(mask, [[frame[2], bottom], [frame[3], right], [0, 0]], constant_values=IGNORED_LABEL)
    else:
        mask = tf.image.resize(mask, options.image_size, method="nearest")
    if options.augment is not None and options.augment.flip:
        mask = tf.image.stateless_random_flip_left_right(mask, flip_seed(seed))
    mask.set_shape([*options.image_size, 1])
    return mask[..., 0]
