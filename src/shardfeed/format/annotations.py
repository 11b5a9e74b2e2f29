"""One image's objects as a record stores them: written under the keys the TF Model Garden's
and the Object Detection API's decoders read (format/schema.py), and read back. What is written
of a source's annotations is checked first (format/object_checks.py).

In memory (`Objects`), for N objects of an image W pixels wide and H high, as stored:

    boxes      [N, 4] float32   (xmin, ymin, xmax, ymax) in pixels, 0 <= xmin < xmax <= W
    classes    [N] int64        class ids 0..K-1 (the record adds the folder's label offset)
    is_crowd   [N] bool         COCO's iscrowd: a region of many instances
    areas      [N] float32      pixels: the source's (COCO's segment area), else the box's
    masks      N PNGs or None   one per object, W x H, 1 inside the object and 0 outside
    attributes name -> [N] int  per-object flags a source has (VOC's difficult, truncated)

In the record, boxes are normalised by W and H (as Model Garden and the OD API expect), the
classes come with their names (`image/object/class/text`), and `image/source_id` holds the
image's number as a numeric string (COCO evaluation matches detections to images by it).
"""

from __future__ import annotations

import hashlib
import math
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardfeed.format import schema
from shardfeed.format.example_proto import FeatureValue


@dataclass(frozen=True)
class Objects:
    """One image's objects, in pixels of the stored image (module docstring)."""

    boxes: np.ndarray
    classes: np.ndarray
    is_crowd: np.ndarray
    areas: np.ndarray
    masks: tuple[bytes, ...] | None = None
    attributes: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.classes)

    @classmethod
    def none(cls) -> Objects:
        """An image without objects (kept and counted, as COCO keeps them)."""
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.float32))


@dataclass(frozen=True)
class SourceObjects:
    """One image's annotations as a source lists them, before checking (picklable: it travels
    with its item to the worker that encodes the image).

    Attributes:
        boxes: (xmin, ymin, xmax, ymax) in pixels of the image as its file holds it.
        classes: class ids 0..K-1 (a source maps its own ids, COCO's category ids among them).
        is_crowd: COCO's iscrowd flags.
        areas: the source's areas in pixels (None: the box's).
        ids: each annotation's id in the source (COCO's annotation id, VOC's object number,
            YOLO's line number), for the report of those skipped.
        source_id: the image's number, written as `image/source_id` (COCO's image id).
        attributes: (name, one 0/1 flag per annotation) pairs a source has (VOC's difficult,
            truncated), written as `image/object/<name>`.
        normalised: the boxes are fractions of the upright image's width and height (YOLO's
            convention, where the reader applies the EXIF turn first), not pixels as stored.
        segmentations: each annotation's COCO `segmentation` (polygons or RLE) as JSON text
            ('' where it has none), made into instance masks when the image is encoded; None:
            no masks are written.
    """

    boxes: tuple[tuple[float, float, float, float], ...]
    classes: tuple[int, ...]
    is_crowd: tuple[bool, ...]
    areas: tuple[float | None, ...]
    ids: tuple[int, ...]
    source_id: int
    attributes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    normalised: bool = False
    segmentations: tuple[str, ...] | None = None

    @classmethod
    def of_json(cls, fields: Mapping[str, Any]) -> SourceObjects:
        """The annotations `dataclasses.asdict` made JSON of (a plan file, a staging listing)."""
        segmentations = fields.get("segmentations")
        return cls(
            boxes=tuple((b[0], b[1], b[2], b[3]) for b in fields["boxes"]),
            classes=tuple(fields["classes"]),
            is_crowd=tuple(fields["is_crowd"]),
            areas=tuple(fields["areas"]),
            ids=tuple(fields["ids"]),
            source_id=int(fields["source_id"]),
            attributes=tuple((name, tuple(flags)) for name, flags in fields.get("attributes", ())),
            normalised=bool(fields.get("normalised", False)),
            segmentations=tuple(segmentations) if segmentations is not None else None,
        )


def key_number(key: str) -> int:
    """A number for an image from its key alone, for `image/source_id` where the source has no
    image ids (VOC, YOLO, tables): the first 60 bits of the key's SHA-256, so it stays the same
    when images are added (`convert --append`) and two of a million images share one with odds
    of about 4 in 10 million."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:15], 16)


COCO_SIZES = (("small", 32.0**2), ("medium", 96.0**2), ("large", math.inf))  # area below each bound


def is_pixel_area(area: float) -> bool:
    """Whether `area` can be an object's size in pixels: finite and not negative (NaN is not)."""
    return 0 <= area < math.inf


def size_name(area: float) -> str:
    """COCO's size of an object of `area` pixels: 'small' (< 32²), 'medium' (< 96²) or 'large'."""
    for name, bound in COCO_SIZES[:-1]:
        if area < bound:
            return name
    return COCO_SIZES[-1][0]  # what is not below the last bound but one (`check_objects` keeps no NaN)


def turned_boxes(boxes: np.ndarray, size: tuple[int, int], orientation: int) -> np.ndarray:
    """(xmin, ymin, xmax, ymax) boxes of an image of (width, height) `size` as they lie once the
    image is turned upright by its EXIF `orientation` (what Pillow's exif_transpose does to it)."""
    w, h = size
    x0, y0, x1, y1 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    turned = {
        2: (w - x1, y0, w - x0, y1),  # mirrored left-right
        3: (w - x1, h - y1, w - x0, h - y0),  # turned 180 degrees
        4: (x0, h - y1, x1, h - y0),  # mirrored top-bottom
        5: (y0, x0, y1, x1),  # transposed
        6: (h - y1, x0, h - y0, x1),  # turned 90 degrees clockwise
        7: (h - y1, w - x1, h - y0, w - x0),  # transversed
        8: (y0, w - x1, y1, w - x0),  # turned 90 degrees counter-clockwise
    }.get(orientation)
    return boxes if turned is None else np.stack(turned, axis=-1)


def moved_boxes(
    boxes: np.ndarray, size: tuple[int, int], region: tuple[float, float, float, float] | None, out: tuple[int, int]
) -> np.ndarray:
    """Boxes of an upright image of `size` once the `region` of it (None: all) is resized to
    `out`: write-time resize and crop (write/images/transforms.py)."""
    left, top, right, bottom = region if region is not None else (0.0, 0.0, float(size[0]), float(size[1]))
    scale = np.array([out[0] / (right - left), out[1] / (bottom - top)] * 2)
    return (boxes - np.array([left, top, left, top])) * scale


def object_features(
    objects: Objects, *, width: int, height: int, class_names: Sequence[str], label_offset: int, source_id: int
) -> dict[str, FeatureValue]:
    """The record features of one image's objects (the image's own features are written beside them)."""
    return record_features(
        array("f", objects.boxes.astype(np.float32).tobytes()),
        objects.classes.tolist(),
        objects.is_crowd.tolist(),
        array("f", objects.areas.astype(np.float32).tobytes()),
        objects.masks,
        {name: values.tolist() for name, values in objects.attributes.items()},
        size=(width, height),
        class_names=class_names,
        label_offset=label_offset,
        source_id=source_id,
    )


_NO_BYTES = np.zeros(0, dtype=object)  # an empty BytesList: a list says its type by its first value


def record_features(
    boxes: array[float],
    classes: list[int],
    is_crowd: list[bool],
    areas: array[float],
    masks: Sequence[bytes] | None,
    attributes: Mapping[str, list[int]],
    *,
    size: tuple[int, int],
    class_names: Sequence[str],
    label_offset: int,
    source_id: int,
) -> dict[str, FeatureValue]:
    """The record features of N objects: `boxes` (xmin, ymin, xmax, ymax, ... in pixels of the
    stored image, float32) normalised by its (width, height) `size` as float32 division rounds
    them (a double quotient of float32 values rounds to the same float32)."""
    width, height = size
    features: dict[str, FeatureValue] = {
        schema.SOURCE_ID: str(source_id),
        schema.BOX_XMIN: array("f", [v / width for v in boxes[0::4]]),
        schema.BOX_YMIN: array("f", [v / height for v in boxes[1::4]]),
        schema.BOX_XMAX: array("f", [v / width for v in boxes[2::4]]),
        schema.BOX_YMAX: array("f", [v / height for v in boxes[3::4]]),
        schema.OBJECT_LABEL: array("q", [c + label_offset for c in classes]),
        schema.OBJECT_TEXT: [class_names[c].encode() for c in classes] or _NO_BYTES,
        schema.OBJECT_AREA: areas,
        schema.OBJECT_IS_CROWD: array("q", is_crowd),
    }
    if masks is not None:
        features[schema.OBJECT_MASK] = list(masks) or _NO_BYTES
    for name, values in attributes.items():
        features[schema.OBJECT_ATTRIBUTE.format(name=name)] = array("q", values)
    return features


def read_objects(features: Mapping[str, list[Any]], *, width: int, height: int, label_offset: int) -> Objects:
    """The objects of one parsed record ({key: values}), in pixels: `object_features` undone
    (up to float32 rounding of the normalised coordinates). An object labelled below
    `label_offset` (adopted records: a 0 among the OD API's 1-based ids) is no class: left out."""
    columns = [np.asarray(features.get(k, []), np.float64) for k in schema.BOX_KEYS]
    boxes = np.stack(columns, axis=-1) * [width, height, width, height] if columns[0].size else np.zeros((0, 4))
    classes = np.asarray(features.get(schema.OBJECT_LABEL, []), np.int64) - label_offset
    masks = features.get(schema.OBJECT_MASK)
    prefix = schema.OBJECT_ATTRIBUTE.format(name="")
    own = {*schema.OBJECT_TYPES, *schema.MASK_TYPES}
    keep = classes >= 0

    def kept(values: Any, dtype: Any) -> np.ndarray:
        array = np.asarray(values, dtype)
        return array[keep] if len(array) == len(keep) else array

    return Objects(
        boxes=kept(boxes, np.float32),
        classes=classes[keep],
        is_crowd=kept(features.get(schema.OBJECT_IS_CROWD, [0] * len(classes)), bool),
        areas=kept(features.get(schema.OBJECT_AREA, []), np.float32),
        masks=tuple(m for m, k in zip(masks, keep, strict=False) if k) if masks else None,
        attributes={
            key[len(prefix) :]: kept(v, np.int64)
            for key, v in features.items()
            if key.startswith(prefix) and key not in own and "/" not in key[len(prefix) :]
        },
    )


def stored_objects_problem(features: Mapping[str, list[Any]], num_classes: int, label_offset: int) -> str | None:
    """What is wrong with a record's stored objects (`verify`), or None: lists of different
    lengths (instance masks included), a coordinate outside [0, 1], an empty or inverted box, a
    class outside 0..K-1."""
    columns = [list(features.get(k, [])) for k in (*schema.BOX_KEYS, schema.OBJECT_LABEL)]
    if len({len(c) for c in columns}) != 1:
        return f"object lists of different lengths: {[len(c) for c in columns]} (xmin, ymin, xmax, ymax, label)"
    masks = features.get(schema.OBJECT_MASK)
    if masks and len(masks) != len(columns[0]):
        return f"{len(masks)} instance masks for {len(columns[0])} objects"
    for index, (x0, y0, x1, y1, label) in enumerate(zip(*columns, strict=True)):
        if not (0.0 <= x0 < x1 <= 1.0 and 0.0 <= y0 < y1 <= 1.0):
            return f"object {index}: box {[x0, y0, x1, y1]} is not inside [0, 1] with min < max"
        if 0 <= label < label_offset:  # adopted: no class, reported by adopt and left out by every reader
            continue
        if not 0 <= label - label_offset < num_classes:
            return f"object {index}: class {label - label_offset} is outside 0..{num_classes - 1}"
    return None
