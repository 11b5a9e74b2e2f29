"""A segmentation mask on the write path: read, checked against its image and the classes, and
moved with the image's pixels.

A mask is a one-channel PNG of class ids (mode L; P, a palette PNG, whose indices are the ids;
or 1, two classes), the size of its image as the file holds it. It follows what happened to the
image, with nearest-neighbour resampling so that every stored pixel is an id the mask held:

    the image turned upright by its EXIF orientation (it was re-encoded)  -> the mask turned alike
    --resize / --max-size / --center-crop (transforms.py's `Geometry`) -> the same region, to
                                                                            the stored size

Stored as a PNG (mode L) under `image/segmentation/class/encoded`, as Model Garden's
segmentation decoder reads it. Pixels of 255 are kept: they mean "ignore" (its ignore_label).

A detection object's instance mask (COCO's polygons or RLE, `instance_masks`) is drawn with
pycocotools on the file's pixels and moved the same way; format/annotations.py stores it.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from PIL import Image

from shardfeed import lazy
from shardfeed.format import image_limits, schema
from shardfeed.write.images.prepare import BadImageError, ImageOptions, PreparedImage, encode, source_frame

IGNORE = schema.IGNORED_LABEL  # a mask pixel that belongs to no class
_TURNS = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}  # EXIF orientation -> the turn that makes the image upright (as Pillow's exif_transpose)


class StoredMask(NamedTuple):
    """A mask as stored: its PNG, and the classes it shows (255 left out), for the manifest's counts."""

    data: bytes
    classes: tuple[int, ...]
    digest: str | None = None  # of the mask file's bytes (items.annotation_digest), for --append


def prepare_mask(
    mask_data: bytes,
    name: str,
    image_data: bytes,
    stored: PreparedImage,
    options: ImageOptions,
    num_classes: int,
) -> StoredMask:
    """The mask stored for `name`, the mask of the image whose source bytes are `image_data` and
    whose stored form is `stored`.

    Raises:
        BadImageError: not a one-channel image, another size than its image (told from its header,
            before decoding: a 875 KB PNG of 30000 x 30000 was decoded whole, 1.76 GB), or a pixel
            that is no class id (0..num_classes-1) and not 255; the image is then not converted either.
    """
    source_size, orientation = source_frame(image_data, stored)
    declared = image_limits.header_size(mask_data)  # before any pixel is decoded: a mask is its image's size
    if declared is not None and declared != source_size:
        raise BadImageError(
            f"mask {name} is {declared[0]} x {declared[1]}, its image {source_size[0]} x {source_size[1]}"
        )
    if too_large := image_limits.refusal(mask_data, options.max_pixels):
        raise BadImageError(f"mask {name}: {too_large}")
    mask = _ids(mask_data, name)
    if mask.size != source_size:
        raise BadImageError(
            f"mask {name} is {mask.width} x {mask.height}, its image {source_size[0]} x {source_size[1]}"
        )
    mask = _moved(mask, orientation, stored, options)
    if mask.size != (stored.width, stored.height):
        raise BadImageError(
            f"mask {name} is {mask.width} x {mask.height} after its image's transforms, the image "
            f"{stored.width} x {stored.height}"
        )
    ids = np.unique(np.asarray(mask))
    stray = [int(i) for i in ids if i >= num_classes and i != IGNORE]
    if stray:
        raise BadImageError(
            f"mask {name} holds class id {stray[0]}, but classes.txt names {num_classes} (0..{num_classes - 1}; "
            f"{IGNORE}: ignored)"
        )
    return StoredMask(encode(mask, "png"), tuple(int(i) for i in ids if i != IGNORE))


def _moved(mask: Image.Image, orientation: int, stored: PreparedImage, options: ImageOptions) -> Image.Image:
    """A mask drawn on the file's pixels, moved as its image was: turned upright, then the same
    region resized to the stored size, nearest-neighbour."""
    if orientation in _TURNS:  # re-encoded upright
        mask = mask.transpose(_TURNS[orientation])
    if options.transforms:
        out, box = options.geometry.region(mask.size)
        mask = mask.resize((stored.width, stored.height) if box is None else out, Image.Resampling.NEAREST, box=box)
    return mask


def instance_masks(
    segmentations: Sequence[str], image_data: bytes, stored: PreparedImage, options: ImageOptions
) -> list[np.ndarray | str]:
    """Each object's COCO `segmentation` (JSON text: polygons, or RLE) as a 0/1 mask of the
    stored image, moved as the image was; or, for one that cannot be made, the reason."""
    mask_api = lazy.coco_mask()
    (width, height), orientation = source_frame(image_data, stored)
    out: list[np.ndarray | str] = []
    for text in segmentations:
        drawn = _coco_mask(mask_api, json.loads(text) if text else None, height, width)
        if isinstance(drawn, str):
            out.append(drawn)
            continue
        out.append(np.asarray(_moved(Image.fromarray(drawn, mode="L"), orientation, stored, options)))
    return out


MAX_POLYGON_POINTS = 100_000  # an annotation's polygons together; COCO's have a few hundred (1.6 M took 1.47 GB)


def _coco_mask(mask_api: Any, segmentation: Any, height: int, width: int) -> np.ndarray | str:
    """One COCO segmentation drawn on a `width` x `height` image: 0/1 uint8 [H, W], or why not.

    Everything is checked before pycocotools' C code sees it (`polygon_problem`, `rle_problem`):
    a NaN or 1e308 in a polygon killed the worker with a segmentation fault, a negative count or
    a polygon of strings ended the whole conversion."""
    if isinstance(segmentation, list):  # polygons [[x1, y1, x2, y2, ...], ...]
        if problem := polygon_problem(segmentation, height, width):
            return problem
        polygons = [[float(v) for v in p] for p in segmentation]
        rle = mask_api.merge(mask_api.frPyObjects(polygons, height, width))
    elif isinstance(segmentation, dict) and {"counts", "size"} <= segmentation.keys():  # RLE
        size = segmentation["size"]
        if not isinstance(size, list) or size != [height, width]:
            return f"RLE of size {size!r:.40} for a {width} x {height} image (size [{height}, {width}])"
        counts = segmentation["counts"]
        if problem := rle_problem(counts, height * width):
            return problem
        if isinstance(counts, list):  # uncompressed (COCO's crowd regions)
            rle = mask_api.frPyObjects({"size": [height, width], "counts": counts}, height, width)
        else:
            rle = {"size": [height, width], "counts": counts.encode()}
    else:
        return "no segmentation (polygons or RLE) to make its mask from"
    try:
        return np.ascontiguousarray(mask_api.decode(rle), dtype=np.uint8)
    except Exception as e:  # pycocotools raises bare Exceptions on bad RLE
        return f"its RLE cannot be decoded ({e})"


def polygon_problem(polygons: list[Any], height: int, width: int) -> str | None:
    """Why COCO polygons cannot be drawn on a W x H image, or None: each a list of 3 or more
    (x, y) points of finite numbers within one image size of the image on every side, at most
    `MAX_POLYGON_POINTS` points in all."""
    if not polygons or not all(isinstance(p, list) and len(p) >= 6 and len(p) % 2 == 0 for p in polygons):
        return "a polygon is not 3 or more (x, y) points"
    if sum(len(p) for p in polygons) > 2 * MAX_POLYGON_POINTS:
        return f"polygons of more than {MAX_POLYGON_POINTS:,} points"
    for polygon in polygons:
        for v in polygon:
            if type(v) not in (int, float) or not math.isfinite(v):
                return f"a polygon coordinate is not a finite number ({v!r:.40})"
        xs, ys = polygon[0::2], polygon[1::2]
        if min(xs) < -width or max(xs) > 2 * width or min(ys) < -height or max(ys) > 2 * height:
            return f"a polygon reaches far outside the {width} x {height} image"
    return None


def rle_problem(counts: Any, pixels: int) -> str | None:
    """Why an RLE's `counts` (a list, or COCO's compressed string) cannot be decoded into a mask
    of `pixels` pixels, or None: whole non-negative runs that add up to the pixels exactly (C
    code writes as many pixels as the runs say)."""
    if isinstance(counts, str):
        runs = compressed_runs(counts)
        if runs is None:
            return "its compressed RLE is not COCO's run-length string"
    elif isinstance(counts, list) and all(type(c) is int for c in counts):
        runs = counts
    else:
        return "RLE counts are neither whole numbers nor COCO's compressed string"
    if any(run < 0 for run in runs):
        return "RLE counts hold a negative run"
    if sum(runs) != pixels:
        return f"RLE runs cover {sum(runs):,} pixels, not the image's {pixels:,}"
    return None


def compressed_runs(text: str) -> list[int] | None:
    """The runs of COCO's compressed RLE string (pycocotools' rleFrString, in Python), or None
    for a string that is not one (a character outside its alphabet, a run cut short)."""
    runs: list[int] = []
    position = 0
    while position < len(text):
        value, shift, more = 0, 0, True
        while more:
            if position >= len(text) or not 48 <= ord(text[position]) < 48 + 64:
                return None
            c = ord(text[position]) - 48
            value |= (c & 0x1F) << (5 * shift)
            more = bool(c & 0x20)
            position, shift = position + 1, shift + 1
            if not more and c & 0x10:
                value |= -1 << (5 * shift)
        if len(runs) > 2:
            value += runs[-2]
        runs.append(value)
    return runs


def class_ids(data: bytes, name: str) -> set[int]:
    """The class ids a mask's pixels hold, 255 (ignored) aside: how a folder without classes.txt
    learns how many classes it has (write/sources/segmentation.py).

    Raises:
        BadImageError: not a one-channel image, or one declaring more pixels than any image may.
    """
    if too_large := image_limits.refusal(data, image_limits.DEFAULT_MAX_PIXELS):
        raise BadImageError(f"mask {name}: {too_large}")
    return {int(i) for i in np.unique(np.asarray(_ids(data, name)))} - {IGNORE}


def _ids(data: bytes, name: str) -> Image.Image:
    """The mask's class ids as an 'L' image.

    Raises:
        BadImageError: not an image, or not one channel of ids.
    """
    try:
        with Image.open(io.BytesIO(data)) as opened:
            opened.load()
            mask = opened.copy()
    except Exception as e:
        raise BadImageError(f"mask {name} cannot be read: {e}") from e
    if mask.mode == "1":
        return Image.fromarray(np.asarray(mask, dtype=bool).astype(np.uint8), mode="L")
    if mask.mode == "P":
        return Image.fromarray(np.asarray(mask, dtype=np.uint8), mode="L")
    if mask.mode != "L":
        raise BadImageError(f"mask {name} is a {mask.mode} image; masks hold class ids in one channel (L or P)")
    return mask


def check_stored_mask(data: bytes | None, height: int, width: int, num_classes: int) -> str | None:
    """What is wrong with a record's stored mask (`verify`), or None: missing, not a PNG of
    one channel, not the image's size, or holding an id that is no class and not 255."""
    if not data:
        return "record has no segmentation mask"
    declared = image_limits.header_size(data)  # checked before decoding: an edited record's could be any size
    if declared is not None and declared != (width, height):
        return f"segmentation mask is {declared[0]} x {declared[1]}, the image {width} x {height}"
    try:
        mask = _ids(data, "")
    except BadImageError as e:
        return f"segmentation mask: {e}"
    if mask.size != (width, height):
        return f"segmentation mask is {mask.width} x {mask.height}, the image {width} x {height}"
    stray = [int(i) for i in np.unique(np.asarray(mask)) if i >= num_classes and i != IGNORE]
    return f"segmentation mask holds class id {stray[0]}, outside 0..{num_classes - 1}" if stray else None
