"""YOLO object detection (Darknet's and Ultralytics' layout) as a source: a text file of boxes per image.

    root/images/<path>.<ext>    the images; a first level named train/val/test/... is the split
                                (Ultralytics' images/train, images/val); or, as Roboflow's and
                                Ultralytics' exports lay them out, root/<split>/images and
                                root/<split>/labels for each split (train/, valid/, test/)
    root/labels/<path>.txt      each image's objects, one a line: `class cx cy w h`, the box's
                                centre and size as fractions of the image's width and height
                                (a longer line is a polygon `class x1 y1 x2 y2 ...`: its box is
                                the polygon's extent, as Ultralytics takes it)
    root/data.yaml              the class names (Ultralytics: `names:` a list, or {id: name}),
    or root/classes.txt         or one name a line, line i naming class id i (Darknet's and
    or root/obj.names           CVAT's "YOLO 1.1" obj.names alike)
    root/obj_<split>_data/      Darknet's layout instead of images/ + labels/: each image's .txt
                                beside it (obj_train_data/ is the train split; train.txt's list
                                of the same files is not needed)

An image without a label file has no objects (kept and counted, as Ultralytics keeps
backgrounds); a label file without an image, and a line that is not numbers, are reported with
the reason. Boxes are fractions of the upright image (Ultralytics reads images with the EXIF
turn applied), so they are placed after the turn (`SourceObjects.normalised`). `image/source_id`
is a number made from the image's key (`annotations.key_number`); the report names a skipped box
by its line. An image or label file reached through a link that leaves the folder is reported,
not read, unless `outside_files` (`--outside-files`).
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from typing import Any

from shardfeed.errors import SourceError
from shardfeed.format import fileio
from shardfeed.format.annotations import SourceObjects, key_number
from shardfeed.format.confinement import MAX_YAML_BYTES, text_refusal
from shardfeed.format.schema import DETECTION
from shardfeed.write.items import (
    SPLIT_FOLDER_NAMES,
    Discovery,
    Item,
    file_item,
    linked_out,
    read_class_names,
    read_text_inside,
)
from shardfeed.write.sources.segmentation import CLASSES_FILE, IMAGES_DIR

LABELS_DIR, DATA_YAML, DARKNET_NAMES = "labels", "data.yaml", "obj.names"
DARKNET_FOLDER = re.compile(r"^obj_([A-Za-z]+)_data$")  # obj_train_data/: images and their .txt side by side
MAX_LABEL_BYTES = 16 << 20


def looks_like_yolo(path: str) -> bool:
    """A folder with images/ and labels/ (or, as Ultralytics' and Roboflow's exports lay them out,
    split folders each with images/ and labels/), and data.yaml or classes.txt."""
    names = (DATA_YAML, CLASSES_FILE, DARKNET_NAMES)
    return bool(_image_folders(path)) and any(fileio.exists(fileio.join(path, n)) for n in names)


def _image_folders(root: str) -> list[tuple[str, str, str | None]]:
    """(images folder, labels folder, split) below `root`: images/ and labels/ at the top (a
    split per first-level folder below them, told later), else <split>/images and <split>/labels
    for each split folder that has both (Roboflow's train/, valid/, test/)."""
    if fileio.isdir(fileio.join(root, IMAGES_DIR)) and fileio.isdir(fileio.join(root, LABELS_DIR)):
        return [(IMAGES_DIR, LABELS_DIR, None)]
    if not fileio.isdir(root):
        return []
    entries = fileio.listdir(root)
    exported: list[tuple[str, str, str | None]] = [
        (f"{split}/{IMAGES_DIR}", f"{split}/{LABELS_DIR}", split)
        for split in entries
        if split.lower() in SPLIT_FOLDER_NAMES
        and fileio.isdir(fileio.join(root, split, IMAGES_DIR))
        and fileio.isdir(fileio.join(root, split, LABELS_DIR))
    ]
    darknet: list[tuple[str, str, str | None]] = [
        (name, name, str(found.group(1)))
        for name in entries
        if (found := DARKNET_FOLDER.match(name)) and fileio.isdir(fileio.join(root, name))
    ]
    return exported or darknet


class YoloSource:
    """A YOLO folder (module docstring)."""

    kind = "yolo"

    def __init__(self, root: str, *, outside_files: bool = False) -> None:
        self.root = root
        self.outside_files = outside_files  # read files that links place outside the folder
        self._outside = linked_out(root, outside_files)

    def discover(self) -> Discovery:
        if not looks_like_yolo(self.root):
            raise SourceError(
                f"{self.root!r} is not a YOLO folder: it needs images/, labels/ (or <split>/images, <split>/labels) "
                "and data.yaml or classes.txt"
            )
        names = self._class_names()
        items: list[Item] = []
        skipped: list[tuple[str, str]] = []
        presplit = False
        for images_dir, labels_dir, split in _image_folders(self.root):
            found, split_below = self._pairs(images_dir, labels_dir, split, skipped)
            items += found
            presplit = presplit or split is not None or split_below
        return Discovery(self.kind, self.root, items, self.root, names, skipped, presplit, task=DETECTION)

    def _pairs(
        self, images_dir: str, labels_dir: str, split: str | None, skipped: list[tuple[str, str]]
    ) -> tuple[list[Item], bool]:
        """The items of the images below `images_dir`, each with the boxes of its label file below
        `labels_dir` (none: no objects), in `split` or the split its first-level folder is; what
        cannot be used added to `skipped`. Also whether the splits came from those folders."""
        images, refused = fileio.walk_files(fileio.join(self.root, images_dir))
        skipped += [(posixpath.join(images_dir, k), why) for k, why in refused]
        if labels_dir == images_dir:  # Darknet's obj_train_data/: each image's .txt beside it
            labels, images = [r for r in images if r.endswith(".txt")], [r for r in images if not r.endswith(".txt")]
        else:
            labels, refused_labels = fileio.walk_files(fileio.join(self.root, labels_dir))
            skipped += [(posixpath.join(labels_dir, k), why) for k, why in refused_labels]
        by_stem = {posixpath.splitext(rel)[0]: rel for rel in labels if rel.endswith(".txt")}
        top = {rel.split("/")[0] for rel in images if "/" in rel}
        split_below = split is None and bool(top) and top <= SPLIT_FOLDER_NAMES
        items: list[Item] = []
        for rel in images:
            label = by_stem.pop(posixpath.splitext(rel)[0], None)
            key = posixpath.join(images_dir, rel)
            lines: list[tuple[int, str]] = []
            if refusal := self._outside(key):
                skipped.append((key, refusal))
                continue
            if label is not None:
                where = posixpath.join(labels_dir, label)
                if refusal := self._outside(where):
                    skipped.append((key, f"its labels {where}: {refusal}"))
                    continue
                try:
                    lines = _lines(fileio.read_regular(fileio.join(self.root, where), MAX_LABEL_BYTES))
                except (fileio.UnusableFileError, UnicodeDecodeError) as e:
                    skipped.append((key, f"its labels {where}: {e}"))
                    continue
            objects, refusals = _objects(lines, key_number(key))
            skipped += [(f"{labels_dir}/{label}: line {line}", why) for line, why in refusals]
            item_split = split if split is not None else rel.split("/")[0] if split_below else None
            items.append(dataclasses.replace(file_item(self.root, key, -1, item_split), objects=objects))
        skipped += [
            (posixpath.join(labels_dir, rel), "a label file without an image") for rel in sorted(by_stem.values())
        ]
        skipped += [
            (posixpath.join(labels_dir, rel), "not a .txt label file") for rel in labels if not rel.endswith(".txt")
        ]
        return items, split_below

    def _class_names(self) -> list[str]:
        """The names from data.yaml's `names` (a list, or a mapping of ids 0..K-1), else classes.txt.

        Raises:
            SourceError: data.yaml unreadable or without usable names.
        """
        path = fileio.join(self.root, DATA_YAML)
        if not fileio.exists(path):
            listed = CLASSES_FILE if fileio.exists(fileio.join(self.root, CLASSES_FILE)) else DARKNET_NAMES
            return read_class_names(fileio.join(self.root, listed), self.root)
        import yaml  # PyYAML, a dependency: only YOLO folders need it

        text = read_text_inside(self.root, path, MAX_YAML_BYTES, "a data.yaml")
        try:
            # aliases refused before anything is built: 486 bytes of nested aliases took 90 s and 3.5 GB
            if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.SafeLoader)):
                raise SourceError(f"{path}: YAML aliases (*name) are not read in a data.yaml; write the values out")
            data: Any = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise SourceError(f"{path}: not readable YAML: {e}") from None
        names = data.get("names") if isinstance(data, dict) else None
        if isinstance(names, dict) and all(type(k) is int for k in names) and sorted(names) == list(range(len(names))):
            names = [names[i] for i in range(len(names))]
        # a name is text, or a whole number YAML read from an unquoted digit name ('0' for digits)
        if (
            not isinstance(names, list)
            or not names
            or not all(isinstance(n, str) or type(n) is int for n in names)
            or len({str(n) for n in names}) != len(names)
        ):
            shown = repr(names)[:200]
            raise SourceError(
                f"{path}: `names` must list each class once, as text (or map ids 0..K-1 to names), got {shown}"
            )
        for name in names:
            if refusal := text_refusal(str(name)):
                raise SourceError(f"{path}: {refusal}")
        return [str(n) for n in names]


def _lines(data: bytes) -> list[tuple[int, str]]:
    """A label file's non-blank lines with their 1-based numbers."""
    return [(n, line) for n, line in enumerate(data.decode("utf-8-sig").splitlines(), start=1) if line.strip()]


def _objects(lines: list[tuple[int, str]], number: int) -> tuple[SourceObjects, list[tuple[int, str]]]:
    """An image's boxes as (xmin, ymin, xmax, ymax) fractions, and the lines that are not boxes."""
    boxes: list[tuple[float, float, float, float]] = []
    classes: list[int] = []
    ids: list[int] = []
    refusals: list[tuple[int, str]] = []
    for line_number, line in lines:
        fields = line.split()
        try:
            label, values = int(fields[0]), [float(v) for v in fields[1:]]
        except ValueError:
            refusals.append((line_number, f"{line.strip()[:80]!r} is not `class cx cy w h` (numbers)"))
            continue
        if len(values) == 4:
            cx, cy, w, h = values
            boxes.append((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
        elif len(values) >= 6 and len(values) % 2 == 0:  # a polygon's points: its extent
            xs, ys = values[0::2], values[1::2]
            boxes.append((min(xs), min(ys), max(xs), max(ys)))
        else:
            refusals.append((line_number, f"{len(values)} numbers after the class: a box has 4, a polygon 6 or more"))
            continue
        classes.append(label)
        ids.append(line_number)
    objects = SourceObjects(
        boxes=tuple(boxes),
        classes=tuple(classes),
        is_crowd=tuple(False for _ in classes),
        areas=tuple(None for _ in classes),
        ids=tuple(ids),
        source_id=number,
        normalised=True,
    )
    return objects, refusals
