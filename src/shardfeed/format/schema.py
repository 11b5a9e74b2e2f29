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

import dataclasses
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from shardfeed.errors import ManifestError, OptionError, SourceError
from shardfeed.format.image_format import sniff_format

if TYPE_CHECKING:
    from shardfeed.format.tasks import TaskSpec

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

# Beyond one label: the keys the TF Model Garden's decoders and the Object Detection API read
# (official/vision/dataloaders/tf_example_decoder.py and segmentation_input.py; research/
# object_detection/data_decoders/tf_example_decoder.py). Boxes are normalised to [0, 1].
SOURCE_ID = "image/source_id"  # a numeric string: the image's id in its folder (COCO evaluation)
BOX_XMIN = "image/object/bbox/xmin"
BOX_YMIN = "image/object/bbox/ymin"
BOX_XMAX = "image/object/bbox/xmax"
BOX_YMAX = "image/object/bbox/ymax"
BOX_KEYS = (BOX_XMIN, BOX_YMIN, BOX_XMAX, BOX_YMAX)  # in the order of a box's coordinates
OBJECT_LABEL = "image/object/class/label"
OBJECT_TEXT = "image/object/class/text"
OBJECT_AREA = "image/object/area"  # pixels of the stored image
OBJECT_IS_CROWD = "image/object/is_crowd"
OBJECT_MASK = "image/object/mask"  # one PNG (0/1, the image's size) per object
OBJECT_ATTRIBUTE = "image/object/{name}"  # VOC's difficult/truncated, 0/1 per object
SEGMENTATION_MASK = "image/segmentation/class/encoded"  # a PNG of class ids, the image's size
SEGMENTATION_FORMAT = "image/segmentation/class/format"
IGNORED_LABEL = 255  # a mask pixel of no class: not trained on or scored; letterbox padding (Model Garden's)
OBJECT_TYPES = {
    SOURCE_ID: "bytes",
    BOX_XMIN: "float",
    BOX_YMIN: "float",
    BOX_XMAX: "float",
    BOX_YMAX: "float",
    OBJECT_LABEL: "int64",
    OBJECT_TEXT: "bytes",
    OBJECT_AREA: "float",
    OBJECT_IS_CROWD: "int64",
}
MASK_TYPES = {OBJECT_MASK: "bytes"}


def object_attribute(name: str) -> tuple[str, str]:
    """A per-object 0/1 flag's record key and type (VOC's difficult: image/object/difficult)."""
    return OBJECT_ATTRIBUTE.format(name=name), "int64"


SEGMENTATION_TYPES = {SEGMENTATION_MASK: "bytes", SEGMENTATION_FORMAT: "bytes"}
FEATURE_KEYS = (*IMAGE_TYPES, *LABEL_TYPES, *OBJECT_TYPES, *MASK_TYPES, *SEGMENTATION_TYPES)

# What other recipes call the dimensions (the Keras/Estimator MNIST examples, TF-slim's 'depth').
FOREIGN_DIMENSIONS = {HEIGHT: ("height",), WIDTH: ("width",), CHANNELS: ("channels", "depth")}


# What a folder's records hold beside the image (the manifest's `task`; absent: classification);
# each task's facts: format/tasks.py.
CLASSIFICATION, SEGMENTATION, MULTI_LABEL, DETECTION = "classification", "segmentation", "multi_label", "detection"


def class_text(example: Mapping[str, Any], labels: list[str], offset: int) -> str:
    """The class name(s) of a parsed record whose single values are unwrapped: one class id, or
    a multi-label record's list, as 'cat, dog'."""
    ids = example[LABEL]
    return ", ".join(labels[int(i) - offset] for i in (ids if isinstance(ids, list) else [ids]))


@dataclass(frozen=True)
class ForeignKeys:
    """What a user says about TFRecords shardfeed did not write: which features hold the image
    and the label, and the labels' base. One object wherever such records are read:
    `ReadOptions(foreign=...)`, `AdoptOptions(foreign=...)`, `verify(foreign=...)`,
    `info(foreign=...)`; the CLI's `--image-key`, `--label-key` and `--label-offset`.

    Attributes:
        image_key: the feature holding the encoded image or float pixels (None: image/encoded).
        label_key: the integer class feature (None: image/class/label; '' for images without labels).
        label_offset: subtracted from stored labels so the model sees 0..K-1 (1 for labels written
            1..K, as Inception's build_image_data.py and keras_imagenet write them). None: what
            the folder's manifest says (0 for files without one).
    """

    image_key: str | None = None
    label_key: str | None = None
    label_offset: int | None = None

    def __post_init__(self) -> None:
        offset = self.label_offset
        if offset is not None and (not isinstance(offset, int) or isinstance(offset, bool) or offset < 0):
            raise OptionError(f"label_offset must be a non-negative integer, got {offset!r}")

    @classmethod
    def merged(cls, given: ForeignKeys | None, owner: str, *, stacklevel: int = 4, **flat: Any) -> ForeignKeys | None:
        """`given`, or the keys passed the old way, one keyword each (`image_key=`, ...), with a
        DeprecationWarning naming `owner`; None when neither.

        Raises:
            OptionError: both ways at once.
        """
        old = {name: value for name, value in flat.items() if value is not None}
        if not old:
            return given
        if given is not None:
            raise OptionError(f"{owner}: pass the keys once, as foreign=ForeignKeys(...), not also {sorted(old)}")
        warnings.warn(
            f"{owner}({', '.join(f'{n}=' for n in sorted(old))}) is deprecated; use foreign=ForeignKeys(...)",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
        return cls(**old)

    @classmethod
    def fold(cls, options: Any, owner: str) -> None:
        """In a frozen options object's `__post_init__`: its deprecated flat fields (`image_key`,
        `label_key`, `label_offset`) moved into its `foreign` field (`merged`), and cleared, so
        that `foreign` is the one place that holds them."""
        old = {name: getattr(options, name) for name in FOREIGN_KEY_NAMES}
        object.__setattr__(options, "foreign", cls.merged(options.foreign, owner, stacklevel=5, **old))
        for name in FOREIGN_KEY_NAMES:
            object.__setattr__(options, name, None)


FOREIGN_KEY_NAMES = tuple(f.name for f in dataclasses.fields(ForeignKeys))  # also the old flat keywords


@dataclass(frozen=True)
class Schema:
    """Which features hold the image and the label (ours by default: the ImageNet keys), and the
    reading hints a folder's manifest gives (its task, its classes, its images' formats). What a
    task's records hold beside the image is read/targets/' (`targets_of(schema.task)`)."""

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
    label_names: tuple[str, ...] | None = None  # label = index of image/class/text in these (a mixture's map)
    task: TaskSpec | None = None  # what the records hold beside the image (format/tasks.py); None: one class id
    num_classes: int | None = None  # the folder's classes (a multi-label record's k-hot length)

    @property
    def is_ours(self) -> bool:
        """Records written with shardfeed's own keys (ImageNet's)."""
        keys = self.record_keys()
        return {**keys, "label_key": keys["label_key"] or LABEL} == Schema().record_keys()

    def record_keys(self) -> dict[str, Any]:
        """The manifest's `schema` entry: which record features hold what (not reading hints)."""
        return {name: getattr(self, name) for name in RECORD_KEY_FIELDS}

    @classmethod
    def of_manifest(cls, entry: Mapping[str, Any] | None) -> Schema:
        """The schema a manifest's `schema` entry names (ours when it has none: every folder
        `convert` wrote before adopted folders existed).

        Raises:
            ManifestError: the entry names a field this version does not know.
        """
        if not entry:
            return cls()
        unknown = sorted(set(entry) - set(RECORD_KEY_FIELDS))
        if unknown:
            raise ManifestError(f"manifest.json's schema has fields this shardfeed does not know: {unknown}")
        return dataclasses.replace(cls(), **entry)


@dataclass(frozen=True)
class Preset:
    """A record layout other readers expect, chosen at convert time (`convert --schema NAME`):
    their keys, their label base, shard names they find, and JPEG when they decode only JPEG."""

    keys: Schema
    label_offset: int
    name_template: str | None  # None: ours, '{split}-{shard:05d}-of-{num_shards:05d}'
    jpeg: bool
    readers: str


PRESETS = {
    "inception": Preset(
        Schema(),
        1,
        None,
        True,
        "TF models' Inception build_image_data readers and keras_imagenet: labels 1..K, JPEG only",
    ),
    "tfds": Preset(
        Schema(image_key="image", label_key="label"),
        0,
        None,
        False,
        "TFDS's own feature names (image, label): code written against tfds.load reads the folder "
        "through tfds.builder_from_directory unchanged",
    ),
    "recipe": Preset(
        Schema(image_key="image", label_key="class"),
        0,
        "{split}{shard:02d}-{num_shards}.tfrec",
        True,
        "the Keras cats-vs-dogs TFRecord recipe: image and class keys, *.tfrec files, JPEG only",
    ),
}


RECORD_KEY_FIELDS = ("image_key", "label_key", "height_key", "width_key", "channels_key", "pixels_as_floats")
_TYPE_NAMES = {bytes: "bytes", int: "int64", float: "float"}


def foreign_schema(record: Mapping[str, Any], source: str, image_key: str | None, label_key: str | None) -> Schema:
    """The schema of other people's TFRecords, from one parsed record ({key: values}).

    `label_key=''` means unlabeled. Checked here, when the dataset is built, so a wrong key or
    type is one message naming the file, not a TensorFlow error at iteration time.

    Raises:
        SourceError: a named feature is missing (the message lists those present), or holds a
            type it cannot be read as (found type and the fix).
    """
    image_key = image_key or ENCODED
    label_key = LABEL if label_key is None else label_key
    for key, option in ((image_key, "image_key"), (label_key, "label_key")):
        if key and key not in record:
            raise SourceError(
                f"feature {key!r} not in the records of {source}; they have {sorted(record)}; "
                f"pass ForeignKeys({option}=...) (--{option.replace('_', '-')} on the command line)"
            )
    _check_image_type(record, image_key, source)
    if label_key:
        _check_label_type(record, label_key, source)
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


def type_name(value: Any) -> str:
    """The Example type of one parsed value: 'bytes', 'int64' or 'float' (the manifest's `features`)."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def describe(values: list[Any]) -> str:
    """How a feature's values are described in a type error: 'an int64 list of 784 values'."""
    if not values:
        return "empty"
    kind = type_name(values[0])
    return f"a{'n' if kind[0] in 'aeiou' else ''} {kind} list of {len(values)} value{'s' * (len(values) != 1)}"


def _check_image_type(record: Mapping[str, Any], key: str, source: str) -> None:
    """The image feature is one encoded image (bytes) or a float list of pixels."""
    values = record[key]
    if values and isinstance(values[0], float):
        return
    if len(values) == 1 and isinstance(values[0], bytes):
        data = values[0]
        if sniff_format(data) is not None or record.get(FORMAT) == [b"RAW"]:
            return
        raise SourceError(
            f"feature {key!r} in {source} (record 0) holds {len(data):,} bytes that are not an encoded image "
            f"(JPEG, PNG, GIF, BMP, WebP or TIFF; they start {data[:8]!r}): raw pixel bytes, such as a float32 "
            "array's tobytes(), carry no shape or type; write the pixels as a float_list feature or encode the "
            "images (PNG keeps them exactly), or pass ForeignKeys(image_key=...) naming the encoded image"
        )
    raise SourceError(
        f"feature {key!r} in {source} (record 0) is {describe(values)}, not one encoded image (bytes) or a float "
        "list of pixels; pass ForeignKeys(image_key=...) naming the image feature"
    )


def _check_label_type(record: Mapping[str, Any], key: str, source: str) -> None:
    """The label feature is one int64 class id."""
    values = record[key]
    if len(values) == 1 and isinstance(values[0], int):
        return
    raise SourceError(
        f"feature {key!r} in {source} (record 0) is {describe(values)}, not one int64 class id; pass "
        "ForeignKeys(label_key=...) naming the integer class feature, or label_key='' to read the images without labels"
    )


def canonical(features: dict[str, list[Any]], keys: Schema) -> dict[str, list[Any]]:
    """A parsed record ({key: values}) with its image, dimensions and label under our keys,
    whatever keys it was written with: the one place Python-side readers (previews, reports,
    verify, IndexedRecords) learn another writer's layout. A float list of pixels becomes a RAW
    uint8 image (0..1 floats scaled to 0..255); an encoded image without `image/format` gets the
    format its bytes show."""
    if keys.is_ours:
        return features
    out = dict(features)
    for ours, theirs in ((HEIGHT, keys.height_key), (WIDTH, keys.width_key), (CHANNELS, keys.channels_key)):
        if theirs and theirs in features:
            out[ours] = features[theirs]
    if keys.label_key and keys.label_key in features:
        out[LABEL] = features[keys.label_key]
    values = features.get(keys.image_key, [])
    if keys.pixels_as_floats:
        out.update(_raw_pixels(values, out))
    elif values:
        out[ENCODED] = values
        if FORMAT not in features:
            out[FORMAT] = [(sniff_format(values[0]) or "unknown").upper().encode()]
    return out


def _raw_pixels(values: list[float], dims: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Float pixels (0..1 or 0..255, dimensions given or a square guessed, as the tf.data reader
    does) as our RAW image features."""
    floats = np.asarray(values, np.float32)
    n = floats.size
    height = int(dims.get(HEIGHT, [0])[0]) or math.isqrt(n)
    width = int(dims.get(WIDTH, [0])[0]) or n // max(height, 1)
    channels = n // max(height * width, 1)
    if n and floats.max() <= 1.0:
        floats = floats * 255.0
    pixels = np.clip(np.round(floats), 0, 255).astype(np.uint8)
    return {ENCODED: [pixels.tobytes()], FORMAT: [b"RAW"], HEIGHT: [height], WIDTH: [width], CHANNELS: [channels]}
