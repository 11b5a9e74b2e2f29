"""Semantic segmentation as a source: images, a mask of class ids for each, and the class names.

    root/classes.txt                one class name a line; line i names class id i
    root/images/<path>.<ext>        the images (any layout below images/; a first level named
                                    train/validation/test/... is the split, as for folders)
    root/masks/<path>.png           each image's mask, the same path with .png: one channel
                                    (L, or P: a palette PNG's indices are the ids), the image's
                                    size, every pixel a class id or 255 (ignored, as Model
                                    Garden's ignore_label)

An image without a mask, and a mask without an image, are reported with the reason and not
converted, as is an image whose file or mask is reached through a link that leaves the folder
(unless `outside_files`, `--outside-files`). The masks are checked and stored when each image is
encoded (write/images/masks.py).
"""

from __future__ import annotations

import dataclasses
import posixpath

from shardfeed.errors import SourceError
from shardfeed.format import fileio
from shardfeed.format.schema import SEGMENTATION
from shardfeed.write.items import SPLIT_FOLDER_NAMES, Discovery, Item, file_item, linked_out, read_class_names

CLASSES_FILE = "classes.txt"
IMAGES_DIR, MASKS_DIR = "images", "masks"
MASK_SUFFIX = ".png"


def looks_like_segmentation(path: str) -> bool:
    """A folder with images/, masks/ and classes.txt (a class-per-folder tree has no classes.txt
    beside two such class folders)."""
    return (
        fileio.isdir(fileio.join(path, IMAGES_DIR))
        and fileio.isdir(fileio.join(path, MASKS_DIR))
        and fileio.exists(fileio.join(path, CLASSES_FILE))
    )


class SegmentationSource:
    """Images with a mask of class ids each (module docstring)."""

    kind = "segmentation"

    def __init__(self, root: str, *, outside_files: bool = False) -> None:
        self.root = root
        self.outside_files = outside_files  # read files that links place outside the folder
        self._outside = linked_out(root, outside_files)

    def discover(self) -> Discovery:
        if not looks_like_segmentation(self.root):
            raise SourceError(f"{self.root!r} is not a segmentation folder: it needs images/, masks/ and classes.txt")
        class_names = self._class_names()
        images, refused = fileio.walk_files(fileio.join(self.root, IMAGES_DIR))
        masks, refused_masks = fileio.walk_files(fileio.join(self.root, MASKS_DIR))
        skipped = [(posixpath.join(IMAGES_DIR, k), why) for k, why in refused]
        skipped += [(posixpath.join(MASKS_DIR, k), why) for k, why in refused_masks]
        by_stem = {posixpath.splitext(m)[0]: m for m in masks if m.lower().endswith(MASK_SUFFIX)}
        paired = set(by_stem.values())  # a set: looked up once per mask file
        skipped += [(posixpath.join(MASKS_DIR, m), "not a .png mask") for m in masks if m not in paired]
        top = {rel.split("/")[0] for rel in images if "/" in rel}
        presplit = bool(top) and top <= SPLIT_FOLDER_NAMES
        items: list[Item] = []
        for rel in images:
            mask = by_stem.pop(posixpath.splitext(rel)[0], None)
            key = posixpath.join(IMAGES_DIR, rel)
            if mask is None:
                skipped.append((key, f"no mask: {MASKS_DIR}/{posixpath.splitext(rel)[0]}{MASK_SUFFIX} does not exist"))
                continue
            if refusal := self._refusal(key, f"{MASKS_DIR}/{mask}"):
                skipped.append((key, refusal))
                continue
            split = rel.split("/")[0] if presplit else None
            items.append(dataclasses.replace(file_item(self.root, key, -1, split), mask_key=f"{MASKS_DIR}/{mask}"))
        skipped += [(posixpath.join(MASKS_DIR, m), "a mask without an image") for m in sorted(by_stem.values())]
        return Discovery(self.kind, self.root, items, self.root, class_names, skipped, presplit, task=SEGMENTATION)

    def _refusal(self, key: str, mask_key: str) -> str | None:
        """Why the image `key` and its mask may not be read (`linked_out`), or None."""
        if refusal := self._outside(key):
            return refusal
        return f"its mask {mask_key}: {refusal}" if (refusal := self._outside(mask_key)) else None

    def _class_names(self) -> list[str]:
        """classes.txt's names, in id order (`read_class_names`).

        Raises:
            SourceError: over 255 classes (mask pixels are 8-bit, 255 meaning ignored).
        """
        path = fileio.join(self.root, CLASSES_FILE)
        names = read_class_names(path, self.root)
        if len(names) > 255:
            raise SourceError(f"{path} names {len(names)} classes; masks of 8-bit ids hold at most 255 (255: ignored)")
        return names
