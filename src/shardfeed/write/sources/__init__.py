"""Input layouts: find every input image, its stable key, its label and any pre-made split.

One module per layout, each a class that satisfies `Source`: `discover()` lists the inputs in
sorted order and returns a `Discovery` (write/items.py): the items to convert, the class names
(sorted; index = label id), and the files it could not use with the reason, so that nothing is
dropped silently.

    folders.py      a class per folder, labels in file names, or no labels
    csv_list.py     a CSV/TSV list of files with labels
    arrays.py       NumPy .npz/.npy arrays
    tables.py       Hugging Face Parquet/Arrow tables (table_objects.py: their detection `objects`)
    webdataset.py   WebDataset tars
    segmentation.py images/ with a mask of class ids each in masks/, and classes.txt
    coco.py         COCO object detection annotations (a .json) and their images folder
    coco_root.py    a COCO root: annotations/instances_<split>*.json (or Roboflow's split folders)
    voc.py          Pascal VOC: Annotations/*.xml and JPEGImages/ (voc_layout.py: where they are)
    yolo.py         YOLO: images/ and labels/*.txt, with data.yaml or classes.txt
    staging.py      container images (tables, tars) extracted once into a folder
    layouts.py      which of these layouts a folder is in, by the evidence it holds
    resemblance.py  a folder that only resembles an annotated layout: refused, not class folders

A new layout is a new module here with a class like these, its test and evidence in
layouts.DETECTORS, and its branch in `resolve_source`.
A source that stages files may also have `finished()`, called when the conversion no longer
needs them; one with a `root` folder is checked not to hold the output folder.
"""

from __future__ import annotations

import gc
from typing import Any, Protocol

from shardfeed.errors import SourceError
from shardfeed.write.items import Discovery
from shardfeed.write.sources.arrays import ArraySource
from shardfeed.write.sources.coco import CocoSource, looks_like_coco
from shardfeed.write.sources.coco_root import CocoRootSource
from shardfeed.write.sources.csv_list import CsvSource
from shardfeed.write.sources.folders import (
    DEFAULT_FILENAME_PATTERN,
    FilenameSource,
    FolderSource,
    UnlabeledSource,
    empty_source_hint,
)
from shardfeed.write.sources.layouts import recognise
from shardfeed.write.sources.segmentation import SegmentationSource
from shardfeed.write.sources.tables import TableSource
from shardfeed.write.sources.voc import VocSource
from shardfeed.write.sources.webdataset import WebDatasetSource
from shardfeed.write.sources.yolo import YoloSource

__all__ = [
    "DEFAULT_FILENAME_PATTERN",
    "LABELS_FROM",
    "ArraySource",
    "CocoRootSource",
    "CocoSource",
    "CsvSource",
    "FilenameSource",
    "FolderSource",
    "SegmentationSource",
    "Source",
    "TableSource",
    "UnlabeledSource",
    "VocSource",
    "WebDatasetSource",
    "YoloSource",
    "empty_source_hint",
    "resolve_source",
]


class Source(Protocol):
    """What a conversion needs of an input layout."""

    @property
    def kind(self) -> str:
        """The layout's name, as the manifest records it ('folder', 'csv', 'parquet', ...)."""
        ...

    def discover(self) -> Discovery:
        """Every input, in sorted order, with the classes and the files it could not use."""
        ...


LABELS_FROM = ("folders", "filenames", "none")


def resolve_source(
    source: str | Source,
    *,
    labels_from: str = "folders",
    label_pattern: str | None = None,
    container_options: dict[str, Any] | None = None,
    **csv_or_array_options: Any,
) -> Source:
    """A source object from a path: folder, .csv/.tsv list, .npz/.npy arrays, Hugging Face
    Parquet/Arrow tables (tables.py), WebDataset tars (webdataset.py) or a segmentation folder
    (segmentation.py: images/, masks/ and classes.txt), COCO annotations (coco.py: a .json,
    its images in `container_options['images']`, default the .json's folder), a Pascal VOC
    folder (voc.py: Annotations/ and JPEGImages/) or a YOLO folder (yolo.py: images/, labels/
    and data.yaml or classes.txt).

    Args:
        source: a path, or an already built source object (returned as is).
        labels_from: for folders: 'folders' (class per folder), 'filenames', or 'none'.
        label_pattern: regex with one group, for labels_from='filenames'.
        container_options: image_column/label_column for tables; image_exts, label_ext, label_field,
            class_names for WebDataset tars (None values are left out); images and masks for COCO;
            outside_files for tables, COCO, VOC, YOLO and segmentation folders (files that paths
            or links place outside the dataset's folder are read: off by default).
        csv_or_array_options: column names for CSV, array names for NumPy inputs.
    """
    container_options = container_options or {}
    if not isinstance(source, str):
        return source
    lower = source.lower()
    if lower.endswith((".csv", ".tsv")):
        return CsvSource(source, **csv_or_array_options)
    if lower.endswith((".npz", ".npy")):
        return ArraySource(source, **csv_or_array_options)
    outside = bool(container_options.get("outside_files"))
    if looks_like_coco(source):
        masks = bool(container_options.get("masks"))
        return CocoSource(source, images=container_options.get("images"), masks=masks, outside_files=outside)
    if labels_from not in LABELS_FROM:
        raise SourceError(f"labels_from must be one of {list(LABELS_FROM)}, got {labels_from!r}")
    table_keys = ("image_column", "label_column", "outside_files")
    table = {k: v for k, v in container_options.items() if k in table_keys and v is not None}
    wds = {k: v for k, v in container_options.items() if k not in (*table_keys, "images", "masks") and v is not None}
    found = recognise(source) if labels_from == "folders" else None  # layouts.py: the most evidence wins
    layout = found.layout if found is not None else None
    if layout == "webdataset":
        return WebDatasetSource(source, **wds)
    if layout == "table":
        return TableSource(source, **table)
    if layout == "coco":
        return CocoRootSource(source, masks=bool(container_options.get("masks")), outside_files=outside)
    if layout == "masks":
        return SegmentationSource(source, outside_files=outside)
    if layout == "voc":
        return VocSource(source, outside_files=outside)
    if layout == "yolo":
        return YoloSource(source, outside_files=outside)
    if labels_from == "filenames":
        return FilenameSource(source, label_pattern)
    if labels_from == "none":
        return UnlabeledSource(source)
    return FolderSource(source)


def listed(source: Source) -> Discovery:
    """`source.discover()` with Python's cycle collector paused (as it was, after). A listing
    builds objects that live on, one or more an image (a COCO file's dicts, each image's
    annotations) and no cycles, and every collection on the way walks all of them again: ~15 ms
    of the ~50 ms a 2,000-image COCO file took to list (docs/benchmarks/convert.md)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return source.discover()
    finally:
        if enabled:
            gc.enable()
