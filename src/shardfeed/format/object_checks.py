"""What is written of one image's annotations: each checked against the image, clipped to it or
skipped with the reason (format/annotations.py stores what is kept).

What `check_objects` does with each annotation (nothing is dropped silently: every skip comes
back with its index and reason, for report.json):

    a box partly outside the image          clipped to it, and counted
    a box wholly outside, empty, inverted   skipped ("outside the image", "empty", "inverted")
    a coordinate that is NaN or infinite    skipped ("not a number")
    a class outside 0..K-1                  skipped
    a mask of another size than the image   skipped

Most images need none of that: `clean_object_features` makes their record features straight
from the source's lists.
"""

from __future__ import annotations

import io
import math
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import cast

import numpy as np
from PIL import Image

from shardfeed.format.annotations import Objects, SourceObjects, is_pixel_area, record_features
from shardfeed.format.example_proto import FeatureValue


@dataclass(frozen=True)
class SkippedAnnotation:
    """An annotation that was not written: its index in the source's list for the image, and why."""

    index: int
    reason: str


CLIP_TOLERANCE = 1e-6  # of the image's side: a box reaching no further outside is not counted as clipped


@dataclass(frozen=True)
class CheckedObjects:
    """What `check_objects` kept, what it skipped, and which kept boxes it clipped: (annotation
    index, how far the box reached outside), those clipped by more than CLIP_TOLERANCE."""

    objects: Objects
    skipped: tuple[SkippedAnnotation, ...]
    clipped: tuple[tuple[int, str], ...]


def check_objects(
    boxes: Sequence[Sequence[float]],
    classes: Sequence[int],
    *,
    width: int,
    height: int,
    num_classes: int,
    is_crowd: Sequence[bool] | None = None,
    areas: Sequence[float | None] | None = None,
    masks: Sequence[np.ndarray | str | None] | None = None,
    attributes: Mapping[str, Sequence[int]] | None = None,
) -> CheckedObjects:
    """The annotations of one W x H image that can be written, clipped to it where they stick out.

    Args:
        boxes: (xmin, ymin, xmax, ymax) in pixels, one per annotation.
        classes: class ids 0..num_classes-1, one per annotation.
        is_crowd, areas, masks, attributes: per annotation, when the source has them (an area
            of None: the clipped box's; a mask: a 2-D array, nonzero inside the object, or the
            reason it could not be made).
    """
    if _all_clean(boxes, classes, width, height, num_classes, masks, areas):  # the common case: nothing to clip or skip
        return CheckedObjects(_kept(list(range(len(boxes))), boxes, classes, is_crowd, areas, None, attributes), (), ())
    kept: list[int] = []
    out_boxes: list[list[float]] = []
    skipped: list[SkippedAnnotation] = []
    clipped: list[tuple[int, str]] = []
    masked = masks is not None and any(m is not None for m in masks)
    for index, (box, label) in enumerate(zip(boxes, classes, strict=True)):
        mask = masks[index] if masks is not None else None
        area = areas[index] if areas is not None else None
        reason = _refusal(box, int(label), width, height, num_classes, mask, masked, area)
        if reason is not None:
            skipped.append(SkippedAnnotation(index, reason))
            continue
        inside = [min(max(float(box[0]), 0.0), width), min(max(float(box[1]), 0.0), height)]
        inside += [min(max(float(box[2]), 0.0), width), min(max(float(box[3]), 0.0), height)]
        if outside := _reach_outside(box, width, height):
            clipped.append((index, outside))
        kept.append(index)
        out_boxes.append(inside)
    return CheckedObjects(
        _kept(kept, out_boxes, classes, is_crowd, areas, masks, attributes), tuple(skipped), tuple(clipped)
    )


def _reach_outside(box: Sequence[float], width: int, height: int) -> str | None:
    """How far a box reaches outside the W x H image, in words, when it is by more than
    CLIP_TOLERANCE of the image's side along either axis; else None (it is clipped all the same).
    A YOLO export's six decimals put boxes on the edge up to 1e-6 of the side outside it: 148 of
    one dataset's boxes were counted as clipped for 0.0003 px."""
    x0, y0, x1, y1 = (float(v) for v in box)
    across, down = max(0.0, -x0, x1 - width), max(0.0, -y0, y1 - height)
    if across <= CLIP_TOLERANCE * width and down <= CLIP_TOLERANCE * height:
        return None
    shown = [round(v, 2) for v in (x0, y0, x1, y1)]
    return f"box {shown} clipped to the {width} x {height} image ({max(across, down):.2f} px outside)"


def _all_clean(
    boxes: Sequence[Sequence[float]],
    classes: Sequence[int],
    width: int,
    height: int,
    num_classes: int,
    masks: Sequence[np.ndarray | str | None] | None,
    areas: Sequence[float | None] | None,
) -> bool:
    """Whether every annotation is written as it is (finite, inside the image, not empty, its
    class in range, its area, if given, a number of pixels, no masks to check): then
    `check_objects` keeps them all as they are, else it looks at each one. A plain loop: an
    image has a few boxes, too few for array operations."""
    if masks is not None or len(boxes) != len(classes):
        return False
    try:
        for (xmin, ymin, xmax, ymax), label in zip(boxes, classes, strict=True):
            # NaN fails every comparison, so a box with one is not clean
            if not (0 <= xmin < xmax <= width and 0 <= ymin < ymax <= height and 0 <= label < num_classes):
                return False
            if empty_when_stored(xmin, ymin, xmax, ymax, width, height):
                return False
        return areas is None or all(a is None or is_pixel_area(a) for a in areas)
    except (ValueError, TypeError):  # a box of another length than 4, a class that is not a number
        return False


def _refusal(
    box: Sequence[float],
    label: int,
    width: int,
    height: int,
    num_classes: int,
    mask: np.ndarray | str | None,
    masked: bool,
    area: float | None = None,
) -> str | None:
    """Why one annotation cannot be written, or None (`masked`: the image's objects have masks;
    `area`: the source's, None when it gives none)."""
    if len(box) != 4:
        return f"a box has 4 coordinates, this one {len(box)}"
    xmin, ymin, xmax, ymax = (float(v) for v in box)
    if not all(math.isfinite(v) for v in (xmin, ymin, xmax, ymax)):
        return f"box {list(box)}: a coordinate is not a number"
    if xmax < xmin or ymax < ymin:
        return f"box {list(box)}: inverted (xmax < xmin or ymax < ymin)"
    if xmax == xmin or ymax == ymin:  # a line or a point, wherever it is: empty, not "outside"
        return f"box {list(box)}: empty (no width or no height)"
    if xmax <= 0 or ymax <= 0 or xmin >= width or ymin >= height:
        return f"box {list(box)}: wholly outside the {width} x {height} image"
    if min(xmax, width) - max(xmin, 0) <= 0 or min(ymax, height) - max(ymin, 0) <= 0:
        return f"box {list(box)}: empty (no width or no height)"
    if empty_when_stored(max(xmin, 0), max(ymin, 0), min(xmax, width), min(ymax, height), width, height):
        return f"box {list(box)}: empty as stored (its width or height rounds to 0 in float32)"
    if not 0 <= label < num_classes:
        return f"class {label} is outside 0..{num_classes - 1}"
    if area is not None and not is_pixel_area(area):
        return f"area {area!r}: not a finite, non-negative number of pixels"
    if isinstance(mask, str):
        return f"mask: {mask}"
    if masked and mask is None:
        return "no mask, where the image's other objects have one"
    if mask is not None and tuple(np.shape(mask)) != (height, width):
        return f"mask of shape {tuple(np.shape(mask))} for a {width} x {height} image (shape ({height}, {width}))"
    return None


def empty_when_stored(xmin: float, ymin: float, xmax: float, ymax: float, width: int, height: int) -> bool:
    """Whether a box inside a W x H image has no width or no height as records store it: float32
    pixels, then float32 fractions of the side (`annotations.record_features`). A box checked in
    float64 alone passed as not empty and was stored with xmin == xmax.

    Coordinates are >= 0 (inside the image). A side longer than 2^-20 of its far edge (plus
    1e-20 px, where float32 would underflow) cannot round to nothing: each float32 rounding moves
    a value by at most 2^-24 of it. Only thinner boxes are rounded here, so the clean-boxes path
    stays as fast as before (1.9 us a box for the rounding)."""
    if xmax - xmin > xmax * 2**-20 + 1e-20 and ymax - ymin > ymax * 2**-20 + 1e-20:
        return False
    pixels = array("f", (xmin, ymin, xmax, ymax))
    stored = array("f", (pixels[0] / width, pixels[1] / height, pixels[2] / width, pixels[3] / height))
    return not (stored[0] < stored[2] and stored[1] < stored[3])


def _kept(
    kept: list[int],
    boxes: Sequence[Sequence[float]],
    classes: Sequence[int],
    is_crowd: Sequence[bool] | None,
    areas: Sequence[float | None] | None,
    masks: Sequence[np.ndarray | str | None] | None,
    attributes: Mapping[str, Sequence[int]] | None,
) -> Objects:
    """The kept annotations (`kept`: their indices; `boxes`: their boxes, clipped) as `Objects`
    (areas: the source's, else the clipped box's)."""
    box_array = np.array(boxes, np.float32).reshape(-1, 4)
    given = [areas[i] for i in kept] if areas is not None else None
    area_array = np.array(_box_areas(array("f", box_array.tobytes()), given), np.float32)
    has_masks = masks is not None and any(m is not None for m in masks)
    return Objects(
        boxes=box_array,
        classes=np.array([int(classes[i]) for i in kept], np.int64),
        is_crowd=np.array([bool(is_crowd[i]) if is_crowd is not None else False for i in kept], bool),
        areas=area_array,
        masks=tuple(_mask_png(masks[i]) for i in kept) if has_masks and masks is not None else None,
        attributes={name: np.array([int(v[i]) for i in kept], np.int64) for name, v in (attributes or {}).items()},
    )


def _box_areas(boxes: array[float], given: Sequence[float | None] | None) -> array[float]:
    """The areas of objects whose boxes are `boxes` (xmin, ymin, xmax, ymax, ... as float32): the
    source's where it `given` one, else the box's width times its height, each step rounded to
    float32 as NumPy's float32 arithmetic rounds it (a float32 difference or product is exact in
    a double, and a double rounds to the float32 the float32 operation gives)."""
    if given is not None and all(a is not None for a in given):
        return array("f", cast(Sequence[float], given))
    widths = array("f", [x1 - x0 for x0, x1 in zip(boxes[0::4], boxes[2::4], strict=True)])
    heights = array("f", [y1 - y0 for y0, y1 in zip(boxes[1::4], boxes[3::4], strict=True)])
    own = (w * h for w, h in zip(widths, heights, strict=True))
    return array("f", own if given is None else (a if a is not None else b for a, b in zip(given, own, strict=True)))


def _mask_png(mask: np.ndarray | str | None) -> bytes:
    """One object's mask as a PNG of 0 and 1 (what Model Garden and the OD API decode)."""
    out = io.BytesIO()
    Image.fromarray((np.asarray(mask) != 0).astype(np.uint8), mode="L").save(out, format="PNG")
    return out.getvalue()


def clean_object_features(
    objects: SourceObjects, *, width: int, height: int, class_names: Sequence[str], label_offset: int
) -> dict[str, FeatureValue] | None:
    """`object_features` of what `check_objects` would keep, straight from the source's lists,
    when it would keep every annotation as it is (boxes in pixels, inside the W x H image, not
    empty; classes in range; pixel areas; no masks): most images of a dataset. None when one
    needs a look. Made without the arrays of `Objects`, which cost a COCO conversion ~20 us a
    record (docs/benchmarks/convert.md); the same values, and so the same record bytes."""
    count = len(objects.boxes)
    lengths = {len(objects.is_crowd), len(objects.areas), *(len(flags) for _, flags in objects.attributes)}
    if objects.normalised or objects.segmentations is not None or lengths != {count}:
        return None
    if not _all_clean(objects.boxes, objects.classes, width, height, len(class_names), None, objects.areas):
        return None
    boxes = array("f", chain.from_iterable(objects.boxes))
    return record_features(
        boxes,
        [int(c) for c in objects.classes],
        [bool(c) for c in objects.is_crowd],
        _box_areas(boxes, objects.areas),
        None,
        {name: [int(f) for f in flags] for name, flags in objects.attributes},
        size=(width, height),
        class_names=class_names,
        label_offset=label_offset,
        source_id=objects.source_id,
    )
