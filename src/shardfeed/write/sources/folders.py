"""Folders of image files: a class per folder, labels in the file names, or no labels."""

from __future__ import annotations

import re

from shardfeed.errors import SourceError
from shardfeed.format import fileio
from shardfeed.write.items import SPLIT_FOLDER_NAMES, Discovery, Item, file_item, sorted_labels
from shardfeed.write.sources import resemblance

# "text before the first dot", with at least one more dot before the extension: cat.123.jpg
DEFAULT_FILENAME_PATTERN = r"^([^.]+)\..+\.[^.]+$"


class FolderSource:
    """Class-per-folder tree: root/<class>/**/<image>, or root/<split>/<class>/**/<image>."""

    kind = "folder"

    def __init__(self, root: str) -> None:
        self.root = root

    def discover(self) -> Discovery:
        if not fileio.isdir(self.root):
            raise SourceError(f"source folder {self.root!r} does not exist or is not a folder")
        files, refused = fileio.walk_files(self.root)
        top = {f.split("/")[0] for f in files if "/" in f}
        presplit = bool(top) and top <= SPLIT_FOLDER_NAMES
        depth = 2 if presplit else 1
        # Two passes over the listing (class names, then items) instead of a list of tuples:
        # at a million files the intermediate list would be the peak of the whole conversion.
        in_class = [len(rel.split("/", depth)) > depth for rel in files]
        class_names = sorted_labels({rel.split("/")[depth - 1] for rel, ok in zip(files, in_class, strict=True) if ok})
        if why := resemblance.refusal(self.root, class_names, files):  # never annotations read as classes
            raise SourceError(why)
        ids = {name: i for i, name in enumerate(class_names)}
        skipped: list[tuple[str, str]] = list(refused)
        items: list[Item] = []
        for rel, ok in zip(files, in_class, strict=True):
            parts = rel.split("/", depth)
            if not ok:
                where = "split folder" if presplit and len(parts) == 2 else "source folder"
                skipped.append((rel, f"not inside a class folder (file directly in the {where})"))
                continue
            split = parts[0] if presplit else None
            items.append(file_item(self.root, rel, ids[parts[depth - 1]], split))
        return Discovery(self.kind, self.root, items, self.root, class_names, skipped, presplit)


def empty_source_hint(discovery: Discovery) -> str:
    """What to try when a source yielded no images: a flat folder of `cat.1.jpg`-style names
    read as a class tree suggests --labels-from filenames."""
    flat = [key for key, reason in discovery.skipped if reason.startswith("not inside a class folder")]
    named = [key for key in flat if re.search(DEFAULT_FILENAME_PATTERN, key.rsplit("/", 1)[-1])]
    if discovery.kind == "folder" and named and len(named) >= len(discovery.skipped) / 2:
        return (
            f"; the files sit directly in the folder and their names look like labels ({named[0]}): pass "
            "--labels-from filenames (FilenameSource) to take the label from the name"
        )
    if discovery.skipped:
        return f"; e.g. {discovery.skipped[0][0]}: {discovery.skipped[0][1]}"
    return ""


class FilenameSource:
    """Flat or nested folder whose file names carry the label (`cat.123.jpg` -> 'cat')."""

    kind = "filenames"

    def __init__(self, root: str, pattern: str | None = None) -> None:
        self.root = root
        self.pattern = pattern or DEFAULT_FILENAME_PATTERN
        try:
            self._regex = re.compile(self.pattern)
        except re.error as e:
            raise SourceError(f"label pattern {self.pattern!r} is not a valid regex: {e}") from e
        if self._regex.groups != 1:
            raise SourceError(
                f"label pattern {self.pattern!r} must have exactly one group (the label), "
                f"it has {self._regex.groups}; e.g. r'^([a-z]+)_\\d+\\.jpg$'"
            )

    def discover(self) -> Discovery:
        if not fileio.isdir(self.root):
            raise SourceError(f"source folder {self.root!r} does not exist or is not a folder")
        labelled: list[tuple[str, str]] = []
        files, skipped = fileio.walk_files(self.root)
        for rel in files:
            match = self._regex.search(rel.rsplit("/", 1)[-1])
            if match and match.group(1):
                labelled.append((rel, match.group(1)))
            else:
                skipped.append((rel, f"file name does not match label pattern {self.pattern!r}"))
        class_names = sorted_labels({label for _, label in labelled})
        ids = {name: i for i, name in enumerate(class_names)}
        items = [file_item(self.root, rel, ids[label], None) for rel, label in labelled]
        return Discovery(self.kind, self.root, items, self.root, class_names, skipped)


class UnlabeledSource:
    """A folder of images without labels (a test set for prediction)."""

    kind = "unlabeled"

    def __init__(self, root: str) -> None:
        self.root = root

    def discover(self) -> Discovery:
        if not fileio.isdir(self.root):
            raise SourceError(f"source folder {self.root!r} does not exist or is not a folder")
        files, skipped = fileio.walk_files(self.root)
        items = [file_item(self.root, rel, -1, None) for rel in files]
        return Discovery(self.kind, self.root, items, self.root, None, skipped)
