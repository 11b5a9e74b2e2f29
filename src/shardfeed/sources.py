"""Input layouts: find every input image, its stable key, its label and any pre-made split.

Each source lists files in sorted order and returns a `Discovery`: the items to convert, the
class names (sorted; index = label id), and the files it could not use with the reason, so that
nothing is dropped silently.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardfeed import fileio

# Top-level folder names that mark an already split class-per-folder tree.
SPLIT_FOLDER_NAMES = frozenset({"train", "training", "validation", "valid", "val", "test", "testing", "eval", "dev"})
# "text before the first dot", with at least one more dot before the extension: cat.123.jpg
DEFAULT_FILENAME_PATTERN = r"^([^.]+)\..+\.[^.]+$"


class SourceError(ValueError):
    """The input cannot be read as the layout asked for; the message says how to fix it."""


@dataclass(frozen=True, slots=True)
class Item:
    """One input image (slotted and path-free: a 1.3M-image source keeps 1.3M of these).

    Attributes:
        key: stable, unique id: the path relative to the source's base folder, '/'-separated
            (for arrays 'file.npz:key[index]'). Stored as image/filename; seeds the ordering.
        label: class id, or -1 for unlabeled data.
        split: the split a pre-split layout put it in, else None.
        size: bytes on disk (for arrays, raw pixel bytes), used to plan shard counts.
        array_key: for array items, the array name inside the file and the row index.
    """

    key: str
    label: int
    split: str | None
    size: int
    array_key: tuple[str, int] | None = None


@dataclass
class Discovery:
    """What a source found."""

    kind: str
    root: str
    items: list[Item]
    base: str  # what item keys are relative to: a folder, or the array file
    class_names: list[str] | None
    skipped: list[tuple[str, str]] = field(default_factory=list)
    presplit: bool = False

    def fingerprint(self) -> str:
        """A hash of every item's key, size, label and split: equal inputs, equal fingerprint."""
        digest = hashlib.sha256()
        for item in self.items:
            digest.update(f"{item.key}\0{item.size}\0{item.label}\0{item.split}\n".encode())
        for path, reason in self.skipped:
            digest.update(f"skip\0{path}\0{reason}\n".encode())
        return digest.hexdigest()


def locate(base: str, item: Item) -> str:
    """Where an item's bytes are: its file below `base`, or for array items the array file."""
    return base if item.array_key is not None else fileio.join(base, item.key)


def _sorted_labels(names: set[str]) -> list[str]:
    """Class names in id order: numeric when all are integers, else lexicographic."""
    if names and all(re.fullmatch(r"-?\d+", n) for n in names):
        return sorted(names, key=int)
    return sorted(names)


def _stat_size(path: str) -> int:
    try:
        return fileio.size(path)
    except OSError:
        return 0


class FolderSource:
    """Class-per-folder tree: root/<class>/**/<image>, or root/<split>/<class>/**/<image>."""

    kind = "folder"

    def __init__(self, root: str) -> None:
        self.root = root

    def discover(self) -> Discovery:
        if not fileio.isdir(self.root):
            raise SourceError(f"source folder {self.root!r} does not exist or is not a folder")
        files = fileio.walk_files(self.root)
        top = {f.split("/")[0] for f in files if "/" in f}
        presplit = bool(top) and top <= SPLIT_FOLDER_NAMES
        depth = 2 if presplit else 1
        # Two passes over the listing (class names, then items) instead of a list of tuples:
        # at a million files the intermediate list would be the peak of the whole conversion.
        in_class = [len(rel.split("/", depth)) > depth for rel in files]
        class_names = _sorted_labels({rel.split("/")[depth - 1] for rel, ok in zip(files, in_class, strict=True) if ok})
        ids = {name: i for i, name in enumerate(class_names)}
        skipped: list[tuple[str, str]] = []
        items: list[Item] = []
        for rel, ok in zip(files, in_class, strict=True):
            parts = rel.split("/", depth)
            if not ok:
                where = "split folder" if presplit and len(parts) == 2 else "source folder"
                skipped.append((rel, f"not inside a class folder (file directly in the {where})"))
                continue
            split = parts[0] if presplit else None
            items.append(Item(rel, ids[parts[depth - 1]], split, _stat_size(fileio.join(self.root, rel))))
        return Discovery(self.kind, self.root, items, self.root, class_names, skipped, presplit)


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
        skipped: list[tuple[str, str]] = []
        for rel in fileio.walk_files(self.root):
            match = self._regex.search(rel.rsplit("/", 1)[-1])
            if match and match.group(1):
                labelled.append((rel, match.group(1)))
            else:
                skipped.append((rel, f"file name does not match label pattern {self.pattern!r}"))
        class_names = _sorted_labels({label for _, label in labelled})
        ids = {name: i for i, name in enumerate(class_names)}
        items = [
            Item(
                rel,
                ids[label],
                None,
                _stat_size(fileio.join(self.root, rel)),
            )
            for rel, label in labelled
        ]
        return Discovery(self.kind, self.root, items, self.root, class_names, skipped)


class CsvSource:
    """A CSV/TSV list `path,label[,split]` with paths relative to the CSV file."""

    kind = "csv"

    def __init__(
        self,
        csv_path: str,
        *,
        path_column: str = "path",
        label_column: str = "label",
        split_column: str | None = None,
    ) -> None:
        self.csv_path = csv_path
        self.path_column = path_column
        self.label_column = label_column
        self.split_column = split_column

    def discover(self) -> Discovery:
        if not fileio.exists(self.csv_path):
            raise SourceError(f"CSV file {self.csv_path!r} does not exist")
        text = fileio.read_bytes(self.csv_path).decode("utf-8-sig")
        delimiter = "\t" if self.csv_path.lower().endswith(".tsv") else ","
        rows = csv.reader(io.StringIO(text), delimiter=delimiter)
        header = next(rows, None)
        name = os.path.basename(self.csv_path)
        if header is None:
            raise SourceError(f"CSV file {self.csv_path!r} is empty; expected a header line")
        header = [h.strip() for h in header]
        path_i = self._column(header, self.path_column, "--path-column", name)
        label_i = self._column(header, self.label_column, "--label-column", name)
        split_name = self.split_column or "split"
        split_i: int | None = None
        if split_name in header:
            split_i = header.index(split_name)
        elif self.split_column is not None:
            self._column(header, self.split_column, "--split-column", name)
        base = os.path.dirname(self.csv_path)
        seen: set[str] = set()
        rows_ok: list[tuple[str, str, str | None]] = []
        skipped: list[tuple[str, str]] = []
        for line_no, row in enumerate(rows, start=2):
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) < len(header):
                skipped.append(
                    (
                        f"{name}:{line_no}",
                        f"line {line_no} has {len(row)} columns, header has {len(header)}",
                    )
                )
                continue
            rel, label = row[path_i].strip(), row[label_i].strip()
            split = row[split_i].strip() if split_i is not None else None
            if rel in seen:
                skipped.append((rel, f"listed twice in {name} (again on line {line_no})"))
            elif not label:
                skipped.append((rel, f"empty label on line {line_no} of {name}"))
            elif not fileio.exists(fileio.join(base, rel)):
                skipped.append((rel, f"listed on line {line_no} of {name} but the file does not exist"))
            else:
                seen.add(rel)
                rows_ok.append((rel, label, split or None))
        class_names = _sorted_labels({label for _, label, _ in rows_ok})
        ids = {n: i for i, n in enumerate(class_names)}
        items = [
            Item(rel, ids[label], split, _stat_size(fileio.join(base, rel))) for rel, label, split in sorted(rows_ok)
        ]
        presplit = split_i is not None
        if presplit and any(item.split is None for item in items):
            missing = next(item.key for item in items if item.split is None)
            raise SourceError(
                f"{name}: split column {split_name!r} is empty for {missing!r}; "
                "fill it for every row or drop the column"
            )
        return Discovery(self.kind, self.csv_path, items, base, class_names, skipped, presplit)

    @staticmethod
    def _column(header: list[str], column: str, flag: str, name: str) -> int:
        if column not in header:
            raise SourceError(f"column {column!r} not in CSV header {header} (line 1 of {name}); pass {flag}")
        return header.index(column)


class ArraySource:
    """NumPy arrays of uint8 images (N,H,W) or (N,H,W,C) with integer labels (MNIST-like).

    Accepts an `.npz` holding `x_<split>`/`y_<split>` pairs (as keras' mnist.npz), or
    `images`/`labels`, or names given explicitly; or an images `.npy` with a labels `.npy`.
    """

    kind = "arrays"

    def __init__(
        self,
        path: str,
        *,
        labels_path: str | None = None,
        images_key: str | None = None,
        labels_key: str | None = None,
        class_names: list[str] | None = None,
    ) -> None:
        self.path = path
        self.labels_path = labels_path
        self.images_key = images_key
        self.labels_key = labels_key
        self.class_names = class_names

    def discover(self) -> Discovery:
        if not fileio.exists(self.path):
            raise SourceError(f"array file {self.path!r} does not exist")
        pairs = self._pairs()
        items: list[Item] = []
        max_label = -1
        name = os.path.basename(self.path)
        for split, images_key, labels, shape in pairs:
            if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
                raise SourceError(
                    f"{name}: labels for {images_key!r} must be a 1-D integer array, got {labels.dtype} {labels.shape}"
                )
            if len(labels) != shape[0]:
                raise SourceError(f"{name}: {shape[0]} images in {images_key!r} but {len(labels)} labels")
            if len(labels) and labels.min() < 0:
                raise SourceError(f"{name}: labels for {images_key!r} must be >= 0, found {labels.min()}")
            per_image = int(np.prod(shape[1:]))
            max_label = max(max_label, int(labels.max()) if len(labels) else -1)
            width = len(str(max(shape[0] - 1, 0)))
            items.extend(
                Item(
                    f"{name}:{images_key}[{i:0{width}d}]",
                    int(labels[i]),
                    split,
                    per_image,
                    (images_key, i),
                )
                for i in range(shape[0])
            )
        if self.class_names is not None:
            if len(self.class_names) <= max_label:
                raise SourceError(f"{len(self.class_names)} class names given but labels go up to {max_label}")
            class_names = list(self.class_names)
        else:
            class_names = [str(i) for i in range(max_label + 1)]
        presplit = any(split is not None for split, *_ in pairs)
        return Discovery(self.kind, self.path, items, self.path, class_names, [], presplit)

    def _pairs(self) -> list[tuple[str | None, str, np.ndarray, tuple[int, ...]]]:
        """(split, images key, labels, images shape) for each image array in the input."""
        name = os.path.basename(self.path)
        if self.path.endswith(".npy"):
            if not self.labels_path:
                raise SourceError(f"{name} holds images only; pass the labels .npy too (--labels-file)")
            images = load_array(self.path, "")
            labels = _np_load(self.labels_path)
            _check_image_array(images, name)
            return [(None, "", labels, images.shape)]
        archive = _np_load(self.path)
        keys = sorted(archive.files)
        if self.images_key or self.labels_key:
            chosen = [(None, self.images_key or "images", self.labels_key or "labels")]
        elif any(k.startswith("x_") for k in keys):
            chosen = [(k[2:], k, "y_" + k[2:]) for k in keys if k.startswith("x_")]
        else:
            chosen = [(None, "images", "labels")]
        pairs: list[tuple[str | None, str, np.ndarray, tuple[int, ...]]] = []
        for split, images_key, labels_key in chosen:
            for key in (images_key, labels_key):
                if key not in keys:
                    raise SourceError(
                        f"array {key!r} not in {name}, which holds {keys}; pass --images-key/--labels-key"
                    )
            images = archive[images_key]
            _check_image_array(images, f"{name}:{images_key}")
            pairs.append((split, images_key, archive[labels_key], images.shape))
        return pairs


def _check_image_array(images: np.ndarray, name: str) -> None:
    if images.dtype != np.uint8:
        raise SourceError(f"{name}: images must be uint8, got {images.dtype}; scale and cast first")
    if images.ndim not in (3, 4) or (images.ndim == 4 and images.shape[3] not in (1, 3)):
        raise SourceError(f"{name}: images must be (N,H,W) or (N,H,W,C) with C 1 or 3, got {images.shape}")


_ARRAY_CACHE: dict[tuple[str, str], Any] = {}


def _np_load(path: str, *, mmap: bool = False) -> Any:
    """np.load for local files (memory-mapped .npy when asked) and TensorFlow filesystem URLs."""
    if fileio.is_remote(path):
        return np.load(io.BytesIO(fileio.read_bytes(path)))
    return np.load(path, mmap_mode="r" if mmap and path.endswith(".npy") else None)


def load_array(path: str, key: str) -> Any:
    """An image array, memory-mapped for .npy, loaded once per process for .npz."""
    cache_key = (path, key)
    if cache_key not in _ARRAY_CACHE:
        _ARRAY_CACHE.clear()
        array = _np_load(path, mmap=True)
        _ARRAY_CACHE[cache_key] = array if path.endswith(".npy") else array[key]
    return _ARRAY_CACHE[cache_key]


class UnlabeledSource:
    """A folder of images without labels (a test set for prediction)."""

    kind = "unlabeled"

    def __init__(self, root: str) -> None:
        self.root = root

    def discover(self) -> Discovery:
        if not fileio.isdir(self.root):
            raise SourceError(f"source folder {self.root!r} does not exist or is not a folder")
        items = [Item(rel, -1, None, _stat_size(fileio.join(self.root, rel))) for rel in fileio.walk_files(self.root)]
        return Discovery(self.kind, self.root, items, self.root, None)


Source = FolderSource | FilenameSource | CsvSource | ArraySource | UnlabeledSource
LABELS_FROM = ("folders", "filenames", "none")


def resolve_source(
    source: str | Source,
    *,
    labels_from: str = "folders",
    label_pattern: str | None = None,
    **csv_or_array_options: Any,
) -> Source:
    """A source object from a path: folder, .csv/.tsv list or .npz/.npy arrays.

    Args:
        source: a path, or an already built source object (returned as is).
        labels_from: for folders: 'folders' (class per folder), 'filenames', or 'none'.
        label_pattern: regex with one group, for labels_from='filenames'.
        csv_or_array_options: column names for CSV, array names for NumPy inputs.
    """
    if not isinstance(source, str):
        return source
    lower = source.lower()
    if lower.endswith((".csv", ".tsv")):
        return CsvSource(source, **csv_or_array_options)
    if lower.endswith((".npz", ".npy")):
        return ArraySource(source, **csv_or_array_options)
    if labels_from not in LABELS_FROM:
        raise SourceError(f"labels_from must be one of {list(LABELS_FROM)}, got {labels_from!r}")
    if labels_from == "filenames":
        return FilenameSource(source, label_pattern)
    if labels_from == "none":
        return UnlabeledSource(source)
    return FolderSource(source)
