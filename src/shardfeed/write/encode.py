"""Encode one example: an input item -> serialized `tf.train.Example` bytes, or a skip reason.

The feature keys are the ImageNet ones (`format/schema.py`). `EncodingSpec` is the one picklable
description of how items become records, shared by the local process pool, the Beam runner and
the shard-size estimate, so the three cannot disagree.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from shardfeed.format import fileio, image_limits, schema
from shardfeed.format.annotations import (
    SourceObjects,
    moved_boxes,
    object_features,
    size_name,
    turned_boxes,
)
from shardfeed.format.example_proto import FeatureValue, serialize_example
from shardfeed.format.object_checks import check_objects, clean_object_features
from shardfeed.write import images, perceptual_hash
from shardfeed.write.images import masks
from shardfeed.write.items import Discovery, Item, annotation_digest, locate
from shardfeed.write.options import ConvertOptions
from shardfeed.write.sources.arrays import load_array

READ_AHEAD = 8  # images read and checked before their records are made (encode_unhashed)
READ_AHEAD_BYTES = 16 << 20  # fewer once the images read hold this many bytes: memory stays bounded


@dataclass(frozen=True)
class EncodingSpec:
    """How the items of one source become records.

    Attributes:
        base: where item keys are relative to (`Discovery.base`).
        class_names: the label names (index = class id), None for unlabeled data.
        image: image checks and write-time transforms.
        label_offset: added to class ids (image/class/label, image/object/class/label).
        keys: where the image and label go (ours, or a `--schema` preset's names).
        phash: make each image's perceptual hash (for near-duplicate groups; not in the records).
    """

    base: str
    class_names: list[str] | None
    image: images.ImageOptions
    label_offset: int = 0
    keys: schema.Schema = field(default_factory=schema.Schema)
    phash: bool = True

    @classmethod
    def of(cls, discovery: Discovery, options: ConvertOptions) -> EncodingSpec:
        """The spec of a conversion: the source's base and classes with the options' image settings."""
        return cls(
            discovery.base,
            discovery.class_names,
            options.image,
            options.label_base(discovery.task),
            options.keys,
            phash=options.near_radius is not None,
        )


@dataclass(frozen=True)
class EncodedRecord:
    """A record ready to be framed into a shard, with what the manifest and report need."""

    key: str
    data: bytes
    label: int
    source_sha256: str
    conversion: str | None
    warning: str | None
    image_format: str = ""  # 'JPEG', 'PNG', 'RAW', ... as stored
    max_side: int = 0  # the stored image's longer side, in pixels
    short_side: int = 0  # and its shorter side
    listed: tuple[int, int] = (0, 0)  # the source file's size and mtime_ns when listed (Item)
    phash: str | None = None  # the source image's perceptual hash (write/perceptual_hash.py)
    classes: tuple[int, ...] = ()  # the classes a mask, a multi-label list or the objects show
    skipped_annotations: tuple[tuple[int, str], ...] = ()  # (annotation id, reason): not written
    clipped_boxes: tuple[tuple[int, str], ...] = ()  # (annotation id, how far out): written clipped to the image
    objects: tuple[tuple[int, str], ...] | None = None  # detection: (class, COCO size) of each object written
    annotations: str | None = None  # items.annotation_digest of what the record holds beyond the image


@dataclass(frozen=True)
class SkippedItem:
    """An input that could not be used, with the reason for the report."""

    key: str
    reason: str


def read_source_bytes(item: Item, location: str, image: images.ImageOptions) -> bytes:
    """The raw bytes of an item (for arrays, the pixel bytes with the shape).

    Raises:
        OSError: unreadable; `fileio.UnusableFileError` for a file that must not be read
            (not a regular file, or larger than any image within `image.max_pixels` can be).
    """
    if item.array_key is not None:
        array = load_array(location, item.array_key[0])[item.array_key[1]]
        return f"{array.shape}".encode() + array.tobytes()
    if item.span is not None:
        _, offset, size = item.span
        return fileio.read_range(location, offset, size, image_limits.max_file_bytes(image.max_pixels))
    return fileio.read_regular(location, image_limits.max_file_bytes(image.max_pixels))


class Unhashed(NamedTuple):
    """A record but for its perceptual hash (`encode_unhashed`), and what the hash is made from:
    hashes are made a batch at a time, after the batch's images (`perceptual_hash.of_sources`)."""

    record: EncodedRecord  # with phash None
    source: perceptual_hash.Source | None

    def hashed(self, phash: str | None) -> EncodedRecord:
        """The record with its hash (made from `source`)."""
        return dataclasses.replace(self.record, phash=phash)


def encode_item(item: Item, spec: EncodingSpec) -> EncodedRecord | SkippedItem:
    """Reads, checks and (if asked) transforms one input, and serializes its record.

    Never raises for bad input: unreadable or broken images come back as SkippedItem.
    """
    return encode_items([item], spec)[0]


def encode_items(items: list[Item], spec: EncodingSpec) -> list[EncodedRecord | SkippedItem]:
    """`encode_item` over a chunk (the unit of work sent to a worker process), whose perceptual
    hashes are made after all its images."""
    encoded = list(encode_unhashed(items, spec))
    hashes = iter(perceptual_hash.of_sources([e.source for e in encoded if isinstance(e, Unhashed) and e.source]))
    return [
        e if isinstance(e, SkippedItem) else e.record if e.source is None else e.hashed(next(hashes)) for e in encoded
    ]


def encode_unhashed(items: Iterable[Item], spec: EncodingSpec) -> Iterator[Unhashed | SkippedItem]:
    """`encode_item` of each item but for the perceptual hash (`Unhashed`), in order; READ_AHEAD
    images are read and checked before their records are made: decoding churns the CPU's caches,
    and the records' Python work (annotations, serialising) runs faster done together than each
    after its decode (~20 us a COCO record, docs/benchmarks/convert.md)."""
    group: list[tuple[Item, ReadImage | SkippedItem]] = []
    held = 0  # bytes of the group's images: a few large images make a group of their own
    for item in items:
        image = read_image(item, spec)
        group.append((item, image))
        held += len(image.raw_data or b"") if isinstance(image, ReadImage) else 0
        if len(group) == READ_AHEAD or held >= READ_AHEAD_BYTES:
            yield from _records(group, spec)
            group, held = [], 0
    yield from _records(group, spec)


def _records(group: list[tuple[Item, ReadImage | SkippedItem]], spec: EncodingSpec) -> Iterator[Unhashed | SkippedItem]:
    """The records of a group of items whose images were read (`encode_unhashed`)."""
    for item, image in group:
        yield image if isinstance(image, SkippedItem) else encode_read(item, spec, image)


class ReadImage(NamedTuple):
    """An item's image read and checked (`read_image`): its source bytes (None for an array),
    their SHA-256, and the image as it is stored."""

    raw_data: bytes | None
    source_sha: str
    prepared: images.PreparedImage


def read_image(item: Item, spec: EncodingSpec) -> ReadImage | SkippedItem:
    """Reads an item's image, checks it and transforms it as asked (write/images/), or says why it
    cannot be used."""
    raw_data: bytes | None = None
    location = locate(spec.base, item)
    try:
        if item.array_key is not None:
            array = load_array(location, item.array_key[0])[item.array_key[1]]
            source_sha = hashlib.sha256(f"{array.shape}".encode() + array.tobytes()).hexdigest()
            prepared = images.prepare_array_image(array, spec.image, phash=spec.phash)
        else:
            try:
                raw_data = read_source_bytes(item, location, spec.image)
            except fileio.UnusableFileError as e:
                return SkippedItem(item.key, str(e))
            except OSError as e:
                return SkippedItem(item.key, f"unreadable file: {e.strerror or e}")
            if item.size and len(raw_data) != item.size:  # being written to, or replaced, right now
                return SkippedItem(
                    item.key,
                    f"changed during the conversion ({item.size:,} bytes when listed, {len(raw_data):,} when read)",
                )
            source_sha = hashlib.sha256(raw_data).hexdigest()
            prepared = images.prepare_file_image(raw_data, item.key, spec.image, phash=spec.phash)
    except images.BadImageError as e:
        return SkippedItem(item.key, str(e))
    return ReadImage(raw_data, source_sha, prepared)


def encode_read(item: Item, spec: EncodingSpec, image: ReadImage) -> Unhashed | SkippedItem:
    """The record of an item whose image `read_image` read: the image's features, its labels,
    objects or mask, serialized."""
    raw_data, source_sha, prepared = image
    features: dict[str, FeatureValue] = {
        spec.keys.image_key: prepared.data,
        schema.FORMAT: prepared.format,
        schema.HEIGHT: prepared.height,
        schema.WIDTH: prepared.width,
        schema.CHANNELS: prepared.channels,
        schema.COLORSPACE: "Grayscale" if prepared.channels == 1 else "RGB",
        schema.FILENAME: item.key,
        schema.SHA256: source_sha if prepared.data is raw_data else hashlib.sha256(prepared.data).hexdigest(),
    }
    if item.label >= 0 and spec.class_names is not None:
        features[spec.keys.label_key or schema.LABEL] = item.label + spec.label_offset
        features[schema.TEXT] = spec.class_names[item.label]
        features[schema.SYNSET] = spec.class_names[item.label]
    if item.labels and spec.class_names is not None:  # multi-label: every class of the image
        features[spec.keys.label_key or schema.LABEL] = [c + spec.label_offset for c in item.labels]
        features[schema.TEXT] = [spec.class_names[c].encode() for c in item.labels]
    placed = None
    if item.objects is not None and raw_data is not None:
        placed = place_objects(item.objects, spec, raw_data, prepared)
        features |= placed.features
    mask: masks.StoredMask | None = None
    if item.mask_key is not None and raw_data is not None:
        made = _segmentation(item, item.mask_key, spec, raw_data, prepared)
        if isinstance(made, SkippedItem):
            return made
        mask = made
        features |= {schema.SEGMENTATION_MASK: mask.data, schema.SEGMENTATION_FORMAT: "png"}
    data = serialize_example(features)
    record = EncodedRecord(
        item.key,
        data,
        item.label,
        source_sha,
        prepared.conversion,
        prepared.warning,
        prepared.format,
        max(prepared.height, prepared.width),
        min(prepared.height, prepared.width),
        (item.size, item.mtime_ns),
        classes=mask.classes if mask is not None else placed.classes if placed is not None else item.labels,
        skipped_annotations=placed.skipped if placed is not None else (),
        clipped_boxes=placed.clipped if placed is not None else (),
        objects=placed.written if placed is not None else None,
        annotations=mask.digest if mask is not None else annotation_digest(item),
    )
    return Unhashed(record, prepared.hash_source)


class PlacedObjects(NamedTuple):
    """An image's objects as written: their features, the classes they show, what was skipped."""

    features: dict[str, FeatureValue]
    classes: tuple[int, ...]
    skipped: tuple[tuple[int, str], ...]
    clipped: tuple[tuple[int, str], ...]  # (annotation id, how far out) of each box written clipped
    written: tuple[tuple[int, str], ...]  # (class, COCO size) of each object written


def place_objects(
    objects: SourceObjects, spec: EncodingSpec, image_data: bytes, prepared: images.PreparedImage
) -> PlacedObjects:
    """An image's annotations moved as its pixels were (turned upright by EXIF when it was
    re-encoded, resized and cropped: write/images/transforms.py), then checked against the
    stored image (format/annotations.py)."""
    size, orientation = images.source_frame(image_data, prepared)
    if orientation == 1 and not spec.image.transforms:  # the boxes stay where the source puts them
        clean = clean_object_features(
            objects,
            width=prepared.width,
            height=prepared.height,
            class_names=spec.class_names or [],
            label_offset=spec.label_offset,
        )
        if clean is not None:  # every annotation written as it is (most images)
            return _placed(clean, [int(c) for c in objects.classes], clean[schema.OBJECT_AREA], (), ())
    boxes: Any = objects.boxes  # as the source gives them: pixels of the file's image as it is
    area_scale = 1.0
    if objects.normalised or orientation != 1 or spec.image.transforms:
        boxes = np.array(boxes, np.float64).reshape(-1, 4)
        upright = (size[1], size[0]) if orientation >= 5 else size
        if objects.normalised:  # fractions of the upright image
            boxes = boxes * [upright[0], upright[1], upright[0], upright[1]]
        elif orientation != 1:
            boxes = turned_boxes(boxes, size, orientation)
        size = upright
        if spec.image.transforms:
            out, region = spec.image.geometry.region(size)
            out = out if region is not None else (prepared.width, prepared.height)
            boxes = moved_boxes(boxes, size, region, out)
            seen = (region[2] - region[0], region[3] - region[1]) if region is not None else size
            area_scale = out[0] / seen[0] * out[1] / seen[1]
        boxes = boxes.tolist()
    checked = check_objects(
        boxes,
        objects.classes,
        width=prepared.width,
        height=prepared.height,
        num_classes=len(spec.class_names or []),
        is_crowd=objects.is_crowd,
        areas=objects.areas
        if area_scale == 1.0
        else [a * area_scale if a is not None else None for a in objects.areas],
        masks=masks.instance_masks(objects.segmentations, image_data, prepared, spec.image)
        if objects.segmentations is not None
        else None,
        attributes=dict(objects.attributes),
    )
    features = object_features(
        checked.objects,
        width=prepared.width,
        height=prepared.height,
        class_names=spec.class_names or [],
        label_offset=spec.label_offset,
        source_id=objects.source_id,
    )
    skipped = tuple((objects.ids[s.index], s.reason) for s in checked.skipped)
    clipped = tuple((objects.ids[index], how) for index, how in checked.clipped)
    kept = checked.objects
    return _placed(features, kept.classes.tolist(), kept.areas.tolist(), skipped, clipped)


def _placed(
    features: dict[str, FeatureValue],
    classes: list[int],
    areas: Any,
    skipped: tuple[tuple[int, str], ...],
    clipped: tuple[tuple[int, str], ...],
) -> PlacedObjects:
    """`PlacedObjects` of the objects written with `features` (their `classes` and `areas`)."""
    written = tuple((c, size_name(a)) for c, a in zip(classes, areas, strict=True))
    return PlacedObjects(features, tuple(sorted(set(classes))), skipped, clipped, written)


def _segmentation(
    item: Item, mask_key: str, spec: EncodingSpec, image_data: bytes, prepared: images.PreparedImage
) -> masks.StoredMask | SkippedItem:
    """An image's segmentation mask as stored (write/images/masks.py), or why the image is not
    converted: a mask that cannot be used leaves its image without ground truth."""
    try:
        data = fileio.read_regular(fileio.join(spec.base, mask_key), image_limits.max_file_bytes(spec.image.max_pixels))
        mask = masks.prepare_mask(data, mask_key, image_data, prepared, spec.image, len(spec.class_names or []))
        mask = mask._replace(digest=annotation_digest(item, data))
    except fileio.UnusableFileError as e:
        return SkippedItem(item.key, f"mask {mask_key}: {e}")
    except OSError as e:
        return SkippedItem(item.key, f"unreadable mask {mask_key}: {e.strerror or e}")
    except images.BadImageError as e:
        return SkippedItem(item.key, str(e))
    return mask


def hash_items(items: list[Item], spec: EncodingSpec) -> list[str | None]:
    """SHA-256 of each item's source bytes (None if unreadable), for duplicate removal."""
    out: list[str | None] = []
    for item in items:
        try:
            out.append(hashlib.sha256(read_source_bytes(item, locate(spec.base, item), spec.image)).hexdigest())
        except OSError:
            out.append(None)
    return out


def phash_items(items: list[Item], spec: EncodingSpec) -> list[str | None]:
    """Each item's perceptual hash as its conversion will make it (None: unusable or flat), for
    near-duplicate groups decided before the split (`dedupe.near_groups`)."""
    return [r.phash if isinstance(r, EncodedRecord) else None for r in encode_items(items, spec)]
