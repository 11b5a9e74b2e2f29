"""Detection's target: boxes with a class each, placed as their image is cut, resized (or
letterboxed) and flipped: clipped to the crop window (cut at full resolution), those with less
than `Augment.min_visible` of their area left in it dropped, as are objects labelled below the
label offset (adopt reports them) and, in training batches, crowd regions
(`DecodeOptions.crowd_targets`); at most `DecodeOptions.max_objects`, in stored order. An
evaluation reads the whole image (every object stays in view).

    load             {"boxes": float32 [B, N, 4] in `DecodeOptions.bounding_box_format` (default
                     xyxy in pixels of the output), "labels": int32 [B, N]}, padded with -1 to
                     the batch's most objects (or `max_objects`)
    IndexedRecords   {"boxes": float32 [n, 4] xyxy in pixels of the stored image, "labels":
                     int64 [n], "is_crowd": bool [n]}
    grain_dataset    as `load`'s
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from shardfeed.format.annotations import read_objects
from shardfeed.format.schema import BOX_KEYS, DETECTION, HEIGHT, OBJECT_IS_CROWD, OBJECT_LABEL, WIDTH
from shardfeed.lazy import tensorflow
from shardfeed.read.augment import flipped
from shardfeed.read.decode.image import crop_window, letterboxed, stored_dimensions
from shardfeed.read.geometry import NUMPY, View, box_columns, in_frame, letterbox_frame, tf_ops, window_fractions
from shardfeed.read.targets.base import Placing, Targets, TfTargets

if TYPE_CHECKING:
    from shardfeed.format.schema import Schema
    from shardfeed.read.decode.image import Preprocess


class DetectionTargets(Targets):
    """Boxes with a class each (module docstring)."""

    task: ClassVar[str] = DETECTION
    exact: ClassVar[bool] = True
    whole_image: ClassVar[bool] = True
    padded: ClassVar[bool] = True
    stored_size: ClassVar[bool] = True
    images_only: ClassVar[bool] = False

    def features(self, schema: Schema) -> dict[str, Any]:
        tf = tensorflow()
        spec = {key: tf.io.VarLenFeature(tf.float32) for key in BOX_KEYS}
        return spec | {OBJECT_LABEL: tf.io.VarLenFeature(tf.int64), OBJECT_IS_CROWD: tf.io.VarLenFeature(tf.int64)}

    def tf_targets(self, schema: Schema, options: Preprocess) -> TfTargets | None:
        def placed(parsed: dict[str, Any], seed: Any) -> tuple[Any, ...]:
            height, width, _ = stored_dimensions(parsed, schema)
            return (place_boxes(parsed, height, width, seed, options, schema.label_offset),)

        return placed

    def raw(self, example: dict[str, Any], offset: int, classes: int) -> Any:
        wrapped = {k: v if isinstance(v, list) else [v] for k, v in example.items()}
        width, height = int(example[WIDTH]), int(example[HEIGHT])
        objects = read_objects(wrapped, width=width, height=height, label_offset=offset)
        return {"boxes": objects.boxes, "labels": objects.classes, "is_crowd": objects.is_crowd}

    def placed(self, target: Any, view: View, placing: Placing) -> Any:
        if placing.drop_crowd and target["is_crowd"].any():
            kept = ~target["is_crowd"]
            return _placed_boxes(target["boxes"][kept], target["labels"][kept], view, placing)
        return _placed_boxes(target["boxes"], target["labels"], view, placing)

    def batched(self, targets: list[Any], placing: Placing) -> Any:
        most = placing.decode.max_objects or max((len(labels) for _, labels in targets), default=0)
        boxes = np.full((len(targets), most, 4), -1, np.float32)
        labels = np.full((len(targets), most), -1, np.int32)
        for row, (kept_boxes, kept_labels) in enumerate(targets):
            boxes[row, : len(kept_labels)], labels[row, : len(kept_labels)] = kept_boxes, kept_labels
        return {"boxes": boxes, "labels": labels}


def _placed_boxes(boxes: np.ndarray, labels: np.ndarray, view: View, placing: Placing) -> tuple[np.ndarray, np.ndarray]:
    """Boxes (pixels of the stored image, xyxy) as fractions of the window, clipped; those with
    too little left dropped; then in output pixels (inside the letterbox's frame), flipped, in
    the asked format; at most `max_objects`, in stored order."""
    stored = boxes.astype(np.float64)
    edges = (stored[:, 0], stored[:, 1], stored[:, 2], stored[:, 3])
    (x0, y0, x1, y1), before, after = window_fractions(edges, view.window, NUMPY)
    keep = (after > 0) & (after >= placing.min_visible * before)
    x0, y0, x1, y1 = in_frame((x0[keep], y0[keep], x1[keep], y1[keep]), view.frame, view.size[1], view.flipped, NUMPY)
    decode = placing.decode
    placed = np.stack(box_columns(x0, y0, x1, y1, decode.bounding_box_format, view.size), axis=-1)
    most = decode.max_objects or len(placed)
    return placed[:most].astype(np.float32), np.asarray(labels)[keep][:most].astype(np.int32)


def place_boxes(parsed: dict[str, Any], height: Any, width: Any, seed: Any, options: Preprocess, offset: int) -> Any:
    """A detection record's objects as its image is cut, resized (or letterboxed) and flipped:
    {"boxes": [N, 4] in `DecodeOptions.bounding_box_format` (default xyxy in pixels of the
    output), "labels": [N]}. The crop window is drawn from the image's seed and size, as the
    image's own; boxes are clipped to it, and those with less than `Augment.min_visible` of their
    area left inside are dropped, as are objects labelled below the label offset (adopt reports them)
    and, in training batches, crowd regions (`DecodeOptions.crowd_targets`)."""
    tf = tensorflow()
    columns = [parsed[key] for key in BOX_KEYS]
    labels = parsed[OBJECT_LABEL] - offset
    shape = tf.cast(tf.stack([height, width, 3]), tf.int32)
    window = tf.cast(crop_window(shape, seed, options), tf.float32)
    h, w = tf.cast(height, tf.float32), tf.cast(width, tf.float32)
    edges = (columns[0] * w, columns[1] * h, columns[2] * w, columns[3] * h)
    (x0, y0, x1, y1), before, after = window_fractions(edges, window, tf_ops())
    augment = options.augment
    least = augment.min_visible if augment is not None else 0.0
    keep = tf.logical_and(after > 0, after >= least * before)
    keep = tf.logical_and(keep, labels >= 0)  # an adopted object labelled below the offset is no class
    if options.training and not options.config.crowd_targets:  # crowd regions left out of training batches
        crowd = parsed[OBJECT_IS_CROWD]  # [N], or [] where a record has no crowd flags
        crowd = tf.concat([crowd, tf.zeros_like(labels)], 0)[: tf.size(labels)]
        keep = tf.logical_and(keep, tf.equal(crowd, 0))
    out_h, out_w = (float(v) for v in options.image_size)
    frame: Any = (out_h, out_w, 0.0, 0.0)
    if letterboxed(options):  # fractions of the window -> pixels of the picture inside the padding
        at = letterbox_frame(tf.cast(height, tf.int32), tf.cast(width, tf.int32), options.image_size, tf_ops())
        frame = tf.cast(tf.stack(at), tf.float32)
    # the flip: the decision tf.image.stateless_random_flip_left_right takes
    mirrored = flipped(seed) if augment is not None and augment.flip else False
    x0, y0, x1, y1 = in_frame((x0, y0, x1, y1), frame, out_w, mirrored, tf_ops())
    boxes = box_format(x0, y0, x1, y1, options.config.bounding_box_format, (out_h, out_w))
    boxes, labels = tf.boolean_mask(boxes, keep), tf.boolean_mask(labels, keep)
    if options.config.max_objects is not None:
        boxes, labels = boxes[: options.config.max_objects], labels[: options.config.max_objects]
    return {"boxes": boxes, "labels": labels}


def box_format(x0: Any, y0: Any, x1: Any, y1: Any, name: str, size: tuple[float, float]) -> Any:
    """Boxes given by their pixel edges, as [N, 4] in one of KerasHub's formats (options.BOX_FORMATS)."""
    return tensorflow().stack(box_columns(x0, y0, x1, y1, name, size), axis=-1)
