"""The record's feature keys, in one place: what the writer stores and every reader looks up.

The keys are the ImageNet ones used by Inception, TF-slim and the TF Model Garden, so their
readers work on our shards unchanged:

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
    image/class/synset bytes   class name again, under the key the Inception/ImageNet builder
                               uses for the WordNet id (its readers require it)

`Schema` says which features a reader takes the image and label from: ours by default, or those
found in other people's TFRecords (`foreign_schema`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shardfeed.errors import SourceError

ENCODED = "image/encoded"
FORMAT = "image/format"
HEIGHT = "image/height"
WIDTH = "image/width"
CHANNELS = "image/channels"
COLORSPACE = "image/colorspace"
FILENAME = "image/filename"
SHA256 = "image/key/sha256"
LABEL = "image/class/label"
TEXT = "image/class/text"
SYNSET = "image/class/synset"

IMAGE_TYPES = {
    ENCODED: "bytes",
    FORMAT: "bytes",
    HEIGHT: "int64",
    WIDTH: "int64",
    CHANNELS: "int64",
    COLORSPACE: "bytes",
    FILENAME: "bytes",
    SHA256: "bytes",
}
LABEL_TYPES = {LABEL: "int64", TEXT: "bytes", SYNSET: "bytes"}
FEATURE_KEYS = (*IMAGE_TYPES, *LABEL_TYPES)

# What other recipes call the dimensions (the Keras/Estimator MNIST examples, TF-slim's 'depth').
FOREIGN_DIMENSIONS = {HEIGHT: ("height",), WIDTH: ("width",), CHANNELS: ("channels", "depth")}


def feature_types(labelled: bool) -> dict[str, str]:
    """The manifest's `features` entry: record key -> type."""
    return {**IMAGE_TYPES, **(LABEL_TYPES if labelled else {})}


@dataclass(frozen=True)
class Schema:
    """Which features hold the image and the label (ours by default: the ImageNet keys)."""

    image_key: str = ENCODED
    label_key: str | None = LABEL
    height_key: str | None = HEIGHT
    width_key: str | None = WIDTH
    channels_key: str | None = CHANNELS
    pixels_as_floats: bool = False  # image_key is a float list of pixels, not encoded bytes
    filename_key: str | None = None  # also return this feature (image/filename) with each batch
    label_offset: int = 0  # subtracted from stored labels, so the model sees 0..K-1
    all_jpeg: bool = False  # every image is a JPEG (the manifest counts formats): no sniffing, no dimensions
    max_side: int | None = None  # the longest image side, when the manifest knows it
    short_sides: tuple[tuple[int, int], ...] | None = None  # (side bucket, images), ditto


def foreign_schema(record: Mapping[str, Any], source: str, image_key: str | None, label_key: str | None) -> Schema:
    """The schema of other people's TFRecords, from one parsed record ({key: values}).

    `label_key=''` means unlabeled. Raises ValueError naming the keys present when a named
    feature is missing.
    """
    image_key = image_key or ENCODED
    label_key = LABEL if label_key is None else label_key
    for key, option in ((image_key, "image_key"), (label_key, "label_key")):
        if key and key not in record:
            raise SourceError(
                f"feature {key!r} not in the records of {source}; they have {sorted(record)}; "
                f"pass {option}= in ReadOptions"
            )
    values = record[image_key]
    pixels = bool(values) and isinstance(values[0], float)

    def present(ours: str) -> str | None:
        return next((n for n in (ours, *FOREIGN_DIMENSIONS[ours]) if n in record), None)

    return Schema(
        image_key=image_key,
        label_key=label_key or None,
        height_key=present(HEIGHT),
        width_key=present(WIDTH),
        channels_key=present(CHANNELS),
        pixels_as_floats=pixels,
    )
