"""Input layouts: find every input image, its stable key, its label and any pre-made split.

Each source lists files in sorted order and returns a `Discovery`: the items to convert, the
class names (sorted; index = label id), and the files it could not use with the reason, so that
nothing is dropped silently.
"""

from __future__ import annotations

import csv
import io
import os
import re
from typing import Any

from shardfeed.errors import SourceError
from shardfeed.format import fileio
from shardfeed.write.array_source import ArraySource
from shardfeed.write.items import SPLIT_FOLDER_NAMES, Discovery, Item, file_item, sorted_labels
from shardfeed.write.table_source import TableSource, looks_like_table
from shardfeed.write.webdataset_source import WebDatasetSource, looks_like_webdataset

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


class CsvSource:
    """A CSV/TSV list `path,label[,split]` with paths relative to the CSV file.

    The delimiter is ',' (tab for .tsv); a header that only splits into the path column on ';',
    tab or '|' (a spreadsheet export in a ';' locale) is read with that one.
    """

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

    def _delimiter(self, text: str) -> str:
        default = "\t" if self.csv_path.lower().endswith(".tsv") else ","
        header = text.split("\n", 1)[0]
        for delimiter in (default, ";", "\t", "|"):
            if self.path_column in (cell.strip() for cell in header.split(delimiter)):
                return delimiter
        return default

    def discover(self) -> Discovery:
        if not fileio.exists(self.csv_path):
            raise SourceError(f"CSV file {self.csv_path!r} does not exist")
        text = fileio.read_bytes(self.csv_path).decode("utf-8-sig")
        rows = csv.reader(io.StringIO(text), delimiter=self._delimiter(text))
        header = next(rows, None)
        name = os.path.basename(self.csv_path)
        if header is None:
            raise SourceError(f"CSV file {self.csv_path!r} is empty; expected a header line")
        header = [h.strip() for h in header]
        path_i = self._column(header, self.path_column, "path_column", name)
        label_i = self._column(header, self.label_column, "label_column", name)
        split_name = self.split_column or "split"
        split_i: int | None = None
        if split_name in header:
            split_i = header.index(split_name)
        elif self.split_column is not None:
            self._column(header, self.split_column, "split_column", name)
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
        class_names = sorted_labels({label for _, label, _ in rows_ok})
        ids = {n: i for i, n in enumerate(class_names)}
        items = [file_item(base, rel, ids[label], split) for rel, label, split in sorted(rows_ok)]
        presplit = split_i is not None
        if presplit and any(item.split is None for item in items):
            missing = next(item.key for item in items if item.split is None)
            raise SourceError(
                f"{name}: split column {split_name!r} is empty for {missing!r}; "
                "fill it for every row or drop the column"
            )
        return Discovery(self.kind, self.csv_path, items, base, class_names, skipped, presplit)

    @staticmethod
    def _column(header: list[str], column: str, option: str, name: str) -> int:
        if column not in header:
            flag = "--" + option.replace("_", "-")
            raise SourceError(
                f"column {column!r} not in CSV header {header} (line 1 of {name}); pass {option}= ({flag})"
            )
        return header.index(column)


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


Source = FolderSource | FilenameSource | CsvSource | ArraySource | UnlabeledSource | TableSource | WebDatasetSource
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
    Parquet/Arrow tables (write/table_source.py) or WebDataset tars (write/webdataset_source.py).

    Args:
        source: a path, or an already built source object (returned as is).
        labels_from: for folders: 'folders' (class per folder), 'filenames', or 'none'.
        label_pattern: regex with one group, for labels_from='filenames'.
        container_options: image_column/label_column/outside_images for tables; image_exts, label_ext,
            label_field, class_names for WebDataset tars (None values are left out).
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
    if labels_from not in LABELS_FROM:
        raise SourceError(f"labels_from must be one of {list(LABELS_FROM)}, got {labels_from!r}")
    table_keys = ("image_column", "label_column", "outside_images")
    table = {k: v for k, v in container_options.items() if k in table_keys and v is not None}
    wds = {k: v for k, v in container_options.items() if k not in table_keys and v is not None}
    if labels_from == "folders" and looks_like_webdataset(source):  # first: img2dataset puts Parquet beside tars
        return WebDatasetSource(source, **wds)
    if labels_from == "folders" and looks_like_table(source):
        return TableSource(source, **table)
    if labels_from == "filenames":
        return FilenameSource(source, label_pattern)
    if labels_from == "none":
        return UnlabeledSource(source)
    return FolderSource(source)
