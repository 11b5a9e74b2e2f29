"""Encode one example: an input item -> serialized `tf.train.Example` bytes, or a skip reason.

The record schema is the ImageNet one used by Inception, TF-slim and the TF Model Garden, so
their readers work on our shards unchanged:

    image/encoded      bytes   the image (JPEG/PNG as stored, or raw uint8 pixels)
    image/format       bytes   'JPEG', 'PNG' or 'RAW' (from the content, not the extension)
    image/height       int64
    image/width        int64
    image/channels     int64   1 or 3
    image/colorspace   bytes   'RGB' or 'Grayscale'
    image/filename     bytes   the item's key (path relative to the source root)
    image/key/sha256   bytes   hex SHA-256 of image/encoded
    image/class/label  int64   class id + label_offset (labelled data only)
    image/class/text   bytes   class name (labelled data only)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from shardfeed import fileio, images
from shardfeed.example_proto import FeatureValue, serialize_example
from shardfeed.sources import Item, load_array, locate

FEATURE_KEYS = (
    "image/encoded",
    "image/format",
    "image/height",
    "image/width",
    "image/channels",
    "image/colorspace",
    "image/filename",
    "image/key/sha256",
    "image/class/label",
    "image/class/text",
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


@dataclass(frozen=True)
class SkippedItem:
    """An input that could not be used, with the reason for the report."""

    key: str
    reason: str


def read_source_bytes(item: Item, location: str) -> bytes:
    """The raw bytes of an item (for arrays, the pixel bytes with the shape)."""
    if item.array_key is not None:
        array = load_array(location, item.array_key[0])[item.array_key[1]]
        return f"{array.shape}".encode() + array.tobytes()
    return fileio.read_bytes(location)


def encode_item(
    item: Item,
    location: str,
    class_names: list[str] | None,
    options: images.ImageOptions,
    label_offset: int = 0,
) -> EncodedRecord | SkippedItem:
    """Reads, checks and (if asked) transforms one input, and serializes its record.

    `location` is where the item's bytes are (`sources.locate`).
    Never raises for bad input: unreadable or broken images come back as SkippedItem.
    """
    raw_data: bytes | None = None
    try:
        if item.array_key is not None:
            array = load_array(location, item.array_key[0])[item.array_key[1]]
            source_sha = hashlib.sha256(f"{array.shape}".encode() + array.tobytes()).hexdigest()
            prepared = images.prepare_array_image(array, options)
        else:
            try:
                raw_data = fileio.read_bytes(location)
            except OSError as e:
                return SkippedItem(item.key, f"unreadable file: {e.strerror or e}")
            source_sha = hashlib.sha256(raw_data).hexdigest()
            prepared = images.prepare_file_image(raw_data, item.key, options)
    except images.BadImageError as e:
        return SkippedItem(item.key, str(e))
    features: dict[str, FeatureValue] = {
        "image/encoded": prepared.data,
        "image/format": prepared.format,
        "image/height": prepared.height,
        "image/width": prepared.width,
        "image/channels": prepared.channels,
        "image/colorspace": "Grayscale" if prepared.channels == 1 else "RGB",
        "image/filename": item.key,
        "image/key/sha256": source_sha if prepared.data is raw_data else hashlib.sha256(prepared.data).hexdigest(),
    }
    if item.label >= 0 and class_names is not None:
        features["image/class/label"] = item.label + label_offset
        features["image/class/text"] = class_names[item.label]
    data = serialize_example(features)
    return EncodedRecord(item.key, data, item.label, source_sha, prepared.conversion, prepared.warning)


def encode_items(
    items: list[Item],
    base: str,
    class_names: list[str] | None,
    options: images.ImageOptions,
    label_offset: int,
) -> list[EncodedRecord | SkippedItem]:
    """`encode_item` over a chunk (the unit of work sent to a worker process)."""
    return [encode_item(item, locate(base, item), class_names, options, label_offset) for item in items]


def hash_items(items: list[Item], base: str) -> list[str | None]:
    """SHA-256 of each item's source bytes (None if unreadable), for duplicate removal."""
    out: list[str | None] = []
    for item in items:
        try:
            out.append(hashlib.sha256(read_source_bytes(item, locate(base, item))).hexdigest())
        except OSError:
            out.append(None)
    return out
