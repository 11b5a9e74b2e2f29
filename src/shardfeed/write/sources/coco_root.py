"""A COCO root as the field ships one: several annotation files, one per split, and their images.

    COCO 2017                              Roboflow's COCO export
    root/annotations/instances_train2017.json   root/train/_annotations.coco.json + its images
    root/annotations/instances_val2017.json     root/valid/_annotations.coco.json + its images
    root/train2017/, root/val2017/              root/test/_annotations.coco.json + its images
    (or root/images/train2017/, images/train/)

Each annotation file is read as `CocoSource` reads one, its images in its split's folder, and
becomes the split its name says (`items.split_in_name`: `instances_val2017.json` is `val`).
Item keys are relative to the root (`val2017/000000000139.jpg`). The files must name the same
categories (the classes of one folder); keypoint and caption files beside the instances files
(`person_keypoints_*.json`, `captions_*.json`) are not read. Without this, a COCO root was
converted as class folders named `annotations`, `train2017`, `val2017`.
"""

from __future__ import annotations

import dataclasses
import posixpath

from shardfeed.errors import SourceError
from shardfeed.format import fileio
from shardfeed.write.items import SPLIT_FOLDER_NAMES, Discovery, split_in_name
from shardfeed.write.sources.coco import CocoSource

ANNOTATIONS_DIR = "annotations"
INSTANCES_PREFIX = "instances_"  # COCO's detection files; person_keypoints_*, captions_* are others
ROBOFLOW_FILE = "_annotations.coco.json"


def annotation_files(root: str) -> list[tuple[str, str, str]]:
    """(annotation file, its split, its images folder) of each split of the COCO root `root`,
    sorted by split; empty when `root` is not one."""
    found = []
    annotations = fileio.join(root, ANNOTATIONS_DIR)
    if fileio.isdir(annotations):
        for name in fileio.listdir(annotations):
            split = split_in_name(name)
            if name.startswith(INSTANCES_PREFIX) and name.endswith(".json") and split is not None:
                stem = name[len(INSTANCES_PREFIX) : -len(".json")]  # val2017
                images = _images_folder(root, stem, split)
                found.append((fileio.join(annotations, name), split, images))
    for folder in fileio.listdir(root):  # Roboflow's: a split folder holding its annotations file
        if folder.lower() in SPLIT_FOLDER_NAMES and fileio.exists(path := fileio.join(root, folder, ROBOFLOW_FILE)):
            found.append((path, folder.lower(), fileio.join(root, folder)))
    return sorted(found, key=lambda entry: entry[1])


def looks_like_coco_root(path: str) -> bool:
    """A folder holding COCO annotation files named for their splits (see the module docstring)."""
    return fileio.isdir(path) and bool(annotation_files(path))


def _images_folder(root: str, stem: str, split: str) -> str:
    """Where a split's images are: root/<stem> (val2017), root/images/<stem>, root/images/<split>,
    root/<split>; the first that exists (else the first, for the report to name)."""
    candidates = [fileio.join(root, stem), fileio.join(root, "images", stem), fileio.join(root, "images", split)]
    candidates.append(fileio.join(root, split))
    return next((c for c in candidates if fileio.isdir(c)), candidates[0])


class CocoRootSource:
    """The splits of a COCO root (module docstring), as one folder's."""

    kind = "coco"

    def __init__(self, root: str, *, masks: bool = False, outside_files: bool = False) -> None:
        self.root = root.rstrip("/")
        self.masks = masks
        self.outside_files = outside_files

    def discover(self) -> Discovery:
        files = annotation_files(self.root)
        if not files:
            raise SourceError(f"{self.root!r} holds no COCO annotation files named for their splits")
        twice = sorted({split for _, split, _ in files if sum(s == split for _, s, _ in files) > 1})
        if twice:
            raise SourceError(f"{self.root}: more than one annotation file for split {twice[0]!r}: {files}")
        merged: Discovery | None = None
        for path, split, images in files:
            found = CocoSource(path, images, self.masks, outside_files=self.outside_files).discover()
            prefix = images[len(self.root) + 1 :]  # the split's images folder, below the root
            items = [dataclasses.replace(i, key=posixpath.join(prefix, i.key), split=split) for i in found.items]
            # an image's key is below its folder; what names its .json ('x.json: image 7') is left as it is
            skipped = [(k if ": " in k else posixpath.join(prefix, k), why) for k, why in found.skipped]
            if merged is None:
                merged = dataclasses.replace(
                    found, root=self.root, base=self.root, items=items, skipped=skipped, presplit=True
                )
            elif found.class_names != merged.class_names:
                raise SourceError(
                    f"{path} names the categories {found.class_names}, {files[0][0]} {merged.class_names}: the splits "
                    "of one folder share their classes"
                )
            else:
                merged.items.extend(items)
                merged.skipped.extend(skipped)
        assert merged is not None
        return merged
