"""Semantic segmentation as a source: images, a mask of class ids for each, and the class names.

    root/classes.txt                one class name a line; line i names class id i (without
                                    it: class_0 .. class_N, N the largest id the masks hold,
                                    with a warning)
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

import contextlib
import dataclasses
import posixpath
import warnings

from shardfeed.errors import SourceError
from shardfeed.format import fileio
from shardfeed.format.schema import SEGMENTATION
from shardfeed.write.images.masks import class_ids
from shardfeed.write.images.prepare import BadImageError
from shardfeed.write.items import SPLIT_FOLDER_NAMES, Discovery, Item, file_item, linked_out, read_class_names

CLASSES_FILE = "classes.txt"
IMAGES_DIR, MASKS_DIR = "images", "masks"
MASK_SUFFIX = ".png"


def looks_like_segmentation(path: str) -> bool:
    """A folder with images/ and masks/, and classes.txt or a mask at an image's path (a
    class-per-folder tree of photos has neither beside two such class folders)."""
    if not (fileio.isdir(fileio.join(path, IMAGES_DIR)) and fileio.isdir(fileio.join(path, MASKS_DIR))):
        return False
    if fileio.exists(fileio.join(path, CLASSES_FILE)):
        return True
    masks, _ = fileio.walk_files(fileio.join(path, MASKS_DIR))
    stems = {posixpath.splitext(m)[0] for m in masks if m.lower().endswith(MASK_SUFFIX)}
    images, _ = fileio.walk_files(fileio.join(path, IMAGES_DIR))
    return any(posixpath.splitext(rel)[0] in stems for rel in images)


class SegmentationSource:
    """Images with a mask of class ids each (module docstring)."""

    kind = "segmentation"

    def __init__(self, root: str, *, outside_files: bool = False) -> None:
        self.root = root
        self.outside_files = outside_files  # read files that links place outside the folder
        self._outside = linked_out(root, outside_files)

    def discover(self) -> Discovery:
        if not looks_like_segmentation(self.root):
            raise SourceError(
                f"{self.root!r} is not a segmentation folder: it needs images/ and masks/ (each image's mask at its "
                "path, .png) and classes.txt"
            )
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
        class_names = self._class_names(items)
        return Discovery(self.kind, self.root, items, self.root, class_names, skipped, presplit, task=SEGMENTATION)

    def _refusal(self, key: str, mask_key: str) -> str | None:
        """Why the image `key` and its mask may not be read (`linked_out`), or None."""
        if refusal := self._outside(key):
            return refusal
        return f"its mask {mask_key}: {refusal}" if (refusal := self._outside(mask_key)) else None

    def _class_names(self, items: list[Item]) -> list[str]:
        """classes.txt's names, in id order (`read_class_names`); without classes.txt, class_0 ..
        class_N for the ids the masks of `items` hold, said in a warning.

        Raises:
            SourceError: over 255 classes (mask pixels are 8-bit, 255 meaning ignored).
        """
        path = fileio.join(self.root, CLASSES_FILE)
        if not fileio.exists(path):
            return self._numbered_classes(items)
        names = read_class_names(path, self.root)
        if len(names) > 255:
            raise SourceError(f"{path} names {len(names)} classes; masks of 8-bit ids hold at most 255 (255: ignored)")
        return names

    def _numbered_classes(self, items: list[Item]) -> list[str]:
        """class_0 .. class_N, N the largest id any mask holds (each mask decoded once, here: a
        mask that cannot be read is reported when its image is converted), as Datumaro names
        the classes of masks without their names; said in one warning."""
        found: set[int] = {0}
        for item in items:
            with contextlib.suppress(BadImageError, OSError):
                found |= class_ids(fileio.read_bytes(fileio.join(self.root, str(item.mask_key))), str(item.mask_key))
        last = max(found)
        warnings.warn(
            f"{self.root} has no {CLASSES_FILE}: its {len(items)} masks hold class ids up to {last}, named class_0 .. "
            f"class_{last}; add {CLASSES_FILE} (line i names class id i) to name them",
            stacklevel=2,
        )
        return [f"class_{i}" for i in range(last + 1)]
