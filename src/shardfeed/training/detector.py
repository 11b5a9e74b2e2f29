"""The detector `train` fits on boxes, and how its detections are read and scored.

model        KerasHub's `RetinaNetObjectDetector` on a small ResNet from random weights
             (basic blocks, 64-64-128-256 filters, one block a stage; FPN levels 3-5, one
             conv before each head, anchors twice the stride at 3 scales and 3 aspect
             ratios): the setting that learned from scratch on 2 CPU cores (mAP@0.5 0.74 in
             19 minutes at 96 px, docs/benchmarks/training.md). KerasHub's ImageNet presets
             are downloads, which `train` cannot count on; a larger backbone would not learn
             from random weights in that time. On a keras.applications backbone with ImageNet
             weights instead when one is asked for or they can be had (training/encoders.py).
input        `load`'s uint8 images as they are (0-255): the stem's BatchNorm takes the scale,
             so the model needs no rescaling layer and reads what `load` yields; boxes in
             `load`'s xyxy pixels of the output image, labels padded with -1
losses       KerasHub's "auto": focal loss for the classes, smooth L1 for the boxes
detections   decoded eagerly (`decode_predictions` after `model(x)`): KerasHub's NMS needs
             a batch size known when traced, which `predict`'s graph does not give it
scores       COCO's, by pycocotools (training/detection_metrics.py), on detections down to a
             confidence of 0.05 as COCO's protocol has it; `predict` and the report's tiles
             show KerasHub's default, 0.5 (`scoring_detections`)
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from shardfeed import lazy
from shardfeed.errors import OptionError
from shardfeed.training.detection_metrics import ImageObjects, detection_metrics

log = logging.getLogger("shardfeed")

DETECTOR = "retinanet"  # the model name `train` knows it by (--model retinanet)
STRIDE = 32  # the input's sides are multiples of this: the FPN's coarsest level (P5)
BOX_FORMAT = "xyxy"  # `load`'s default, so the batches need no conversion
MIN_LEVEL, MAX_LEVEL = 3, 5  # the FPN levels the heads read
ANCHOR_SIZE = 2  # an anchor's side in strides of its level, at its first scale
POSITIVE_IOU = 0.5  # KerasHub's RetinaNet label encoder: an anchor learns an object it overlaps this much
REACH_WARNING = 0.1  # the share of objects no anchor reaches that `train` warns of
REACH_IMAGES = 128  # the training images `train` looks at for it
SCORED_CONFIDENCE = 0.05  # the least confidence of a detection COCO's scores count (`scoring_detections`)
SCORED_DETECTIONS = 100  # the most detections an image COCO's scores count (COCOeval's maxDets)


def build_detector(
    class_names: Sequence[str],
    image_size: tuple[int, int],
    *,
    weights: str | None = None,
    image_encoder: Any = None,
) -> Any:
    """The detector (module docstring), not compiled: uint8 [H, W, 3] in; `compile_args` says how
    to compile it.

    Args:
        image_encoder: a KerasHub feature-pyramid backbone with P3-P5 in place of the small ResNet
            (a keras.applications backbone's, from its own weights: training/encoders.py).

    Raises:
        OptionError: weights asked for the small ResNet (it trains from random weights), sides not
            multiples of STRIDE.
        MissingDependencyError: KerasHub is not installed (the line says how to install it).
    """
    if weights not in (None, "none"):
        raise OptionError(
            f"{DETECTOR} trains from random weights here; --weights {weights} is for a backbone (--model mobilenet_v2)"
        )
    if image_size[0] % STRIDE or image_size[1] % STRIDE:
        raise OptionError(f"{DETECTOR} takes sides that are multiples of {STRIDE} (its FPN's P5), got {image_size}")
    hub = lazy.keras_hub()
    if image_encoder is None:
        image_encoder = hub.models.ResNetBackbone(
            input_conv_filters=[64],
            input_conv_kernel_sizes=[3],
            stackwise_num_filters=[64, 64, 128, 256],
            stackwise_num_blocks=[1, 1, 1, 1],
            stackwise_num_strides=[1, 2, 2, 2],
            block_type="basic_block",
            use_pre_activation=False,
            image_shape=(*image_size, 3),
        )
    backbone = hub.models.RetinaNetBackbone(
        image_encoder=image_encoder, min_level=MIN_LEVEL, max_level=MAX_LEVEL, use_p5=False
    )
    return detector_class()(
        backbone=backbone,
        num_classes=len(class_names),
        anchor_generator=_anchor_generator(),
        bounding_box_format=BOX_FORMAT,
        pre_logits_num_conv_layers=1,
        preprocessor=None,
    )


def _anchor_generator() -> Any:
    """The detector's anchors: FPN levels 3-5, twice the level's stride, 3 scales, 3 aspect ratios."""
    return lazy.keras_hub().layers.AnchorGenerator(
        bounding_box_format=BOX_FORMAT,
        min_level=MIN_LEVEL,
        max_level=MAX_LEVEL,
        num_scales=3,
        aspect_ratios=[0.5, 1.0, 2.0],
        anchor_size=ANCHOR_SIZE,
    )


def anchor_reach(batches: Iterable[Any], image_size: tuple[int, int]) -> tuple[int, int, float]:
    """(objects, those no anchor of the detector at `image_size` overlaps by IoU >= POSITIVE_IOU,
    their median side in pixels) in `batches` of `load`'s (images, {"boxes", "labels"}) at that
    size. An object no anchor reaches never becomes a positive of KerasHub's label encoder: the
    detector cannot learn it, and where none is reached its losses are 0 and it learns nothing."""
    import keras

    height, width = image_size
    levels = _anchor_generator()(np.zeros((1, height, width, 3), np.float32))
    anchors = keras.ops.concatenate(list(levels.values()), axis=0)
    objects, missed, sides = 0, 0, []
    for _, targets in batches:
        for boxes, labels in zip(np.asarray(targets["boxes"]), np.asarray(targets["labels"]), strict=True):
            boxes = boxes[labels >= 0]
            if not len(boxes):
                continue
            iou = keras.utils.bounding_boxes.compute_iou(anchors, boxes, bounding_box_format=BOX_FORMAT)
            reached = keras.ops.convert_to_numpy(iou).max(axis=0) >= POSITIVE_IOU
            objects, missed = objects + len(boxes), missed + int(np.sum(~reached))
            small = boxes[~reached]
            sides += np.sqrt((small[:, 2] - small[:, 0]) * (small[:, 3] - small[:, 1])).tolist()
    return objects, missed, float(np.median(sides)) if sides else 0.0


def check_anchor_reach(batches: Iterable[Any], image_size: tuple[int, int]) -> None:
    """Refuses a size at which the detector's anchors reach none of the objects in `batches`
    (`anchor_reach`), and says how many they miss where that is REACH_WARNING of them or more.

    Raises:
        OptionError: no object is reached: training would learn nothing.
    """
    objects, missed, side = anchor_reach(batches, image_size)
    size = f"{image_size[1]} x {image_size[0]} px"
    smallest = ANCHOR_SIZE * 2**MIN_LEVEL  # in pixels: the first scale's side at the finest level
    if objects and missed == objects:
        raise OptionError(
            f"at {size} no anchor of {DETECTOR} overlaps any of the {objects} objects of the first training "
            f"images by IoU {POSITIVE_IOU} (objects ~{side:.0f} px across, its smallest anchors {smallest} px): "
            "it would learn nothing; train at a larger --image-size"
        )
    if objects and missed >= REACH_WARNING * objects:
        log.warning(
            "%d of the %d objects of the first training images (%.0f%%) are too small for %s's anchors at %s "
            "(~%.0f px across; its smallest anchors are %d px): it cannot learn them; a larger --image-size "
            "reaches more",
            missed,
            objects,
            100 * missed / objects,
            DETECTOR,
            size,
            side,
            smallest,
        )


@functools.cache
def detector_class() -> type:
    """KerasHub's RetinaNet detector that restores its optimizer when loaded (module docstring);
    made, and registered with Keras for loading, once KerasHub is imported."""
    import keras

    hub = lazy.keras_hub()

    @keras.saving.register_keras_serializable(package="shardfeed")
    class Detector(hub.models.RetinaNetObjectDetector):  # type: ignore[name-defined]
        """RetinaNet, compiled again with its saved optimizer when loaded."""

        def compile_from_config(self, config: dict[str, Any]) -> None:
            self.compile(optimizer=keras.optimizers.deserialize(config["optimizer"]), **compile_args())
            if self.built:
                self.optimizer.build(self.trainable_variables)  # so that its saved variables load

    return Detector


def compile_args() -> dict[str, Any]:
    """What `compile` takes beside the optimizer: KerasHub's losses for its detector."""
    return {"box_loss": "auto", "classification_loss": "auto"}


def detections(net: Any, images: Any) -> list[ImageObjects]:
    """The detections in one batch of `images` (uint8 [B, H, W, 3]), in pixels of those images:
    boxes xyxy, class ids, confidences."""
    import keras

    images = np.asarray(images)
    height, width = images.shape[1:3]
    # float32 for the decoder: under mixed precision the heads give float16, which KerasHub's
    # decoder multiplies with its float32 anchors (TensorFlow refuses; JAX promotes)
    raw = {k: keras.ops.cast(v, "float32") for k, v in net(images, training=False).items()}
    out = net.decode_predictions(raw, images)
    # convert_to_numpy: PyTorch's tensors keep their gradient tape, which np.asarray refuses
    keys = ("num_detections", "boxes", "labels", "confidence")
    counts, boxes, labels, scores = (keras.ops.convert_to_numpy(out[k]) for k in keys)
    return [
        ImageObjects(
            width,
            height,
            boxes[i, :n].astype(np.float64),
            labels[i, :n].astype(np.int64),
            scores[i, :n].astype(np.float64),
        )
        for i, n in enumerate(counts.astype(int))
    ]


def truths(images: Any, targets: dict[str, Any]) -> list[ImageObjects]:
    """The true objects of one `load` batch (boxes xyxy in pixels of its images, -1 padding
    dropped)."""
    height, width = np.asarray(images).shape[1:3]
    found = []
    for boxes, labels in zip(np.asarray(targets["boxes"]), np.asarray(targets["labels"]), strict=True):
        keep = labels >= 0
        found.append(ImageObjects(width, height, boxes[keep].astype(np.float64), labels[keep].astype(np.int64)))
    return found


def detection_scores(net: Any, batches: Iterable[Any], class_names: Sequence[str]) -> dict[str, Any]:
    """COCO's scores of `net` on `batches` of (images, {"boxes", "labels"}), in the frame `load`
    made them in (training/detection_metrics.py: mAP, mAP@0.5, ..., per_class_ap), from its
    detections down to SCORED_CONFIDENCE (`scoring_detections`)."""
    truth: list[ImageObjects] = []
    found: list[ImageObjects] = []
    with scoring_detections(net):
        for images, targets in batches:
            truth += truths(images, targets)
            found += detections(net, images)
    return detection_metrics(truth, found, list(class_names))


@contextlib.contextmanager
def scoring_detections(net: Any) -> Iterator[None]:
    """While inside, `net` keeps its detections down to SCORED_CONFIDENCE, as COCO's protocol
    scores a detector (Detectron2's test threshold, Model Garden's and torchvision's RetinaNet:
    0.05, at most 100 an image): average precision rewards the low-confidence boxes that find
    more objects, and KerasHub's default of 0.5 (what `predict` and the report's tiles show)
    cut mAP@0.5 from 0.646 to 0.628 on the training benchmark's model. NMS at 0.05 then keeps
    the same boxes above 0.5 as NMS at 0.5 (greedy by confidence, class-agnostic)."""
    hub = lazy.keras_hub()
    shown = net.prediction_decoder
    net.prediction_decoder = hub.layers.NonMaxSuppression(
        bounding_box_format=shown.bounding_box_format,
        from_logits=shown.from_logits,
        iou_threshold=shown.iou_threshold,
        confidence_threshold=SCORED_CONFIDENCE,
        max_detections=SCORED_DETECTIONS,
    )
    try:
        yield
    finally:
        net.prediction_decoder = shown


def predicted_boxes(
    net: Any, inputs: Any, records: Any, split: str, names: Sequence[str], batch_size: int | None, grid_size: int
) -> tuple[list[tuple[str, ImageObjects]], list[Any]]:
    """`predict` for a detection run: each image of `split` read whole as the run was trained
    and evaluated (`inputs`: the run's; the image resized to the model's size), its detections
    scaled back to the file's own pixels (clipped to it), as (file name, `ImageObjects`) in
    read order; and the `grid_size` images whose names sort first as the model saw them with
    their boxes drawn (grid tiles; only those are held, whatever the folder's size)."""
    from shardfeed.format import schema
    from shardfeed.read.options import ReadOptions
    from shardfeed.tools.preview import drawn_boxes, keep_first

    placed: list[tuple[str, ImageObjects]] = []
    first: list[tuple[str, np.ndarray, ImageObjects]] = []  # at most grid_size, the names first in order
    index = 0
    for batch in inputs.evaluation(split, batch_size=batch_size, read=ReadOptions(with_filenames=True)):
        images, files = np.asarray(batch[0]), batch[-1].numpy()
        for image, found, file in zip(images, detections(net, images), files, strict=True):
            example = records.example(index)
            index += 1
            height, width = int(example[schema.HEIGHT]), int(example[schema.WIDTH])
            sx, sy = width / image.shape[1], height / image.shape[0]
            boxes = np.clip(found.boxes * [sx, sy, sx, sy], 0, [width, height, width, height])
            name = file.decode()
            placed.append((name, ImageObjects(width, height, boxes, found.classes, found.scores)))
            keep_first(first, (name, image, found), grid_size)
    shown = [
        drawn_boxes(name, image, found.boxes.tolist(), found.classes.tolist(), list(names))
        for name, image, found in sorted(first, key=lambda t: t[0])
    ]
    return placed, shown


def box_rows(name: str, found: ImageObjects, names: Sequence[str]) -> list[dict[str, Any]]:
    """`predict`'s CSV rows for one file: a row per box (file, class, score, xmin, ymin, xmax,
    ymax), or one row with the file alone when nothing was found."""
    scores = found.scores if found.scores is not None else np.ones(len(found.boxes))
    rows = [
        {"file": name, "class": names[int(c)], "score": float(s), **dict(zip(_CORNERS, map(float, b), strict=True))}
        for b, c, s in zip(found.boxes, found.classes, scores, strict=True)
    ]
    return rows or [{"file": name}]


_CORNERS = ("xmin", "ymin", "xmax", "ymax")
