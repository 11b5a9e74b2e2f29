"""Hugging Face datasets as sources: Parquet files as the Hub lays them out, and folders written by
`datasets`' `save_to_disk` (Arrow files per split).

    hub/data/train-00000-of-00002.parquet    the Hub's layout: split = the name before the first '-'
    hub/default/train/0000.parquet           the Hub's converted layout: split = the parent folder
    one.parquet                              one table: split by the conversion's fractions
    train-00000-of-00001.parquet             one Hub file alone: its split (divided by the fractions
                                             only when they are given)
    saved/dataset_dict.json + train/*.arrow  save_to_disk of a DatasetDict: its splits
    saved/state.json + data-*.arrow          save_to_disk of one Dataset

The image column and the label column come from `datasets`' feature metadata when it is there
(the `Image` feature; a `ClassLabel`, whose names become labels.txt in the same id order), else
from their names and types; `image_column` / `label_column` override. A table with an `objects`
column of boxes and categories (the Hub's detection layout) is a detection source instead
(write/sources/table_objects.py). An image is stored as its
bytes (`{bytes, path}`); one given by path only is read from that path, relative to the dataset.
Tables are read with pyarrow (`pip install 'shardfeed[hub]'`), a record batch at a time. Local
tables' images are read in place, from their spans in the file (write/sources/table_rows.py:
Arrow streams, and Parquet written as `datasets` writes it for the Hub, image pages uncompressed);
others (remote tables, snappy-compressed Parquet pages, images given by path) are extracted once
into a staging folder (write/sources/staging.py).
Each image's key (report.json, image/filename) is its table and row: `data/train-00000-of-00002.parquet/0000123.jpg`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from collections.abc import Iterable
from typing import Any

from shardfeed.deprecation import renamed
from shardfeed.errors import SourceError
from shardfeed.format import confinement, fileio, image_limits, storage
from shardfeed.format.annotations import SourceObjects, key_number
from shardfeed.format.image_format import sniff_format
from shardfeed.format.schema import DETECTION
from shardfeed.format.tasks import task_of
from shardfeed.write.items import Discovery
from shardfeed.write.sources import table_objects, table_rows
from shardfeed.write.sources.staging import Extracted, Staged, Writer, in_place_discovery

IMAGE_NAMES = ("image", "img", "picture", "photo", "jpg", "png", "image_bytes")
LABEL_NAMES = ("label", "labels", "class", "category", "target", "fine_label")
_HUB_FILE = re.compile(r"^(?P<split>[A-Za-z0-9_]+)-\d{5}-of-\d{5}\.parquet$")


SAVE_TO_DISK_FILES = ("dataset_dict.json", "state.json")  # a DatasetDict's, one Dataset's


def looks_like_table(path: str) -> bool:
    """A .parquet/.arrow file, or a folder holding Parquet files or a save_to_disk layout."""
    lower = path.lower().rstrip("/")
    if lower.endswith((".parquet", ".arrow")):
        return True
    if not fileio.isdir(path):
        return False
    return any(fileio.exists(fileio.join(path, n)) for n in SAVE_TO_DISK_FILES) or bool(_parquet_files(path))


def _parquet_files(folder: str) -> list[str]:
    """Parquet files up to three levels down (data/, config/split/), relative, sorted."""
    return sorted(
        rel for rel in fileio.walk_files(folder)[0] if rel.lower().endswith(".parquet") and rel.count("/") <= 2
    )


class TableSource:
    """Parquet or Arrow tables of images (see the module docstring)."""

    @renamed(outside_images="outside_files")
    def __init__(
        self,
        path: str,
        *,
        image_column: str | None = None,
        label_column: str | None = None,
        outside_files: bool = False,
    ) -> None:
        self.path = path.rstrip("/")
        self.image_column = image_column
        self.label_column = label_column
        self.outside_files = outside_files  # rows may name images outside the folder (paths, URLs)
        self.kind = "arrow" if self._arrow_layout() else "parquet"
        self.staged: Staged | None = None

    def _arrow_layout(self) -> bool:
        if self.path.lower().endswith(".arrow"):
            return True
        return fileio.isdir(self.path) and any(fileio.exists(fileio.join(self.path, n)) for n in SAVE_TO_DISK_FILES)

    def tables(self) -> list[tuple[str, str | None]]:
        """(table file, its split or None) in a fixed order."""
        if not fileio.isdir(self.path):
            if not fileio.exists(self.path):
                raise SourceError(f"{storage.redact(self.path)} does not exist")
            hub = _HUB_FILE.match(self.path.rsplit("/", 1)[-1])  # one of the Hub's files keeps its split
            return [(self.path, hub["split"] if hub else None)]
        if self.kind == "arrow":
            return self._arrow_tables()
        found = []
        for rel in _parquet_files(self.path):
            name, parent = rel.rsplit("/", 1)[-1], rel.rsplit("/", 2)[-2] if "/" in rel else ""
            hub = _HUB_FILE.match(name)
            split = hub["split"] if hub else (parent if parent and parent != "data" else None)
            found.append((fileio.join(self.path, rel), split))
        if len({s for _, s in found}) > 1 and any(s is None for _, s in found):
            raise SourceError(
                f"{storage.redact(self.path)}: some Parquet files name a split and some do not "
                f"({[rel for rel, s in found if s is None][:3]}); give one layout"
            )
        return found

    def _arrow_tables(self) -> list[tuple[str, str | None]]:
        dict_file = fileio.join(self.path, "dataset_dict.json")
        if fileio.exists(dict_file):
            splits = json.loads(fileio.read_bytes(dict_file))["splits"]
            for split in splits:  # each names a folder here, and a split of the output
                _refuse(dict_file, f"split {split!r}", confinement.split_refusal(split))
            folders = [(fileio.join(self.path, s), s) for s in splits]
        else:
            folders = [(self.path, None)]
        out = []
        for folder, split in folders:
            state_file = fileio.join(folder, "state.json")
            state = json.loads(fileio.read_bytes(state_file))
            for f in state["_data_files"]:
                _refuse(state_file, "_data_files", confinement.entry_refusal(f.get("filename")))
            out += [(fileio.join(folder, f["filename"]), split) for f in state["_data_files"]]
        return out

    def discover(self) -> Discovery:
        table_rows.pyarrow()
        tables = self.tables()
        if not tables:
            raise SourceError(f"{storage.redact(self.path)}: no Parquet or Arrow tables found")
        if not any(fileio.is_remote(t) for t, _ in tables):
            try:
                return in_place_discovery(self.kind, self.path, self._extract(tables, None))
            except table_rows.NotInPlace:
                pass  # staged instead
        self.staged = Staged([t for t, _ in tables])
        found = self.staged.extracted(lambda writer: self._extract(tables, writer))
        return self.staged.discovery(self.kind, self.path, found)

    def finished(self) -> None:
        """The conversion is complete: the staged images go."""
        if self.staged is not None:
            self.staged.remove()

    def _extract(self, tables: list[tuple[str, str | None]], writer: Writer | None) -> Extracted:
        """Streams every table once, staging its images, or (no writer) noting their spans."""
        found = Extracted(presplit=all(split is not None for _, split in tables))
        image, label = self._common_columns([t for t, _ in tables], found)
        names: dict[str, int] = {}
        paths = [t for t, _ in tables]
        if writer is None:
            per_table: Iterable[Iterable[tuple[Any, Any]]] = (
                table_rows.in_place_rows(t, self.kind, image, label) for t in paths
            )
        else:
            local = not any(fileio.is_remote(t) for t in paths)  # a bucket's tables: read here
            per_table = table_rows.staged_rows(paths, self.kind, image, label, writer.folder if local else None)
        for (table, split), rows in zip(tables, per_table, strict=True):
            rel = table.removeprefix(self.path + "/") if table != self.path else table.rsplit("/", 1)[-1]
            for row, (value, label_value) in enumerate(rows):
                where = f"{rel} row {row}"
                key_base = f"{rel}/{row:07d}"  # the table and row: how report.json and image/filename name it
                if task_of(found.task).objects:  # source_id: a number from the row's key
                    label_value = table_objects.row_objects(label_value, key_number(key_base))
                self._stage_row(found, writer, names, where, key_base, split, value, label_value, label)
        if task_of(found.task).objects:
            top = max((c for o in found.objects.values() for c in o["classes"]), default=0)
            found.class_names = found.class_names or _id_names(top, f"{label}.category")
            return found
        if found.class_names is None and names:
            found.class_names = sorted(names, key=names.__getitem__)
        elif found.class_names is None and label is not None and found.images:
            found.class_names = _id_names(max(i for _, i, _ in found.images), label)
        if label is None:
            found.class_names = None
        return found

    def _common_columns(self, tables: list[str], found: Extracted) -> tuple[str, str | None]:
        """The (image, label) columns every table has, from their schemas (the `objects` column
        for a detection table); the class names and the task noted in `found`."""
        columns: tuple[str, str | None] | None = None
        for table in tables:
            schema = table_rows.schema(table, self.kind)
            image, label, class_names = self._columns(table, schema)
            if (objects := table_objects.objects_column(_features(schema), list(schema.names))) is not None:
                label, class_names = objects  # a detection table: its objects instead of a label
                found.task = DETECTION
            if columns is not None and columns != (image, label):
                raise SourceError(
                    f"{storage.redact(table)}: columns {(image, label)} differ from the others' {columns}"
                )
            columns = (image, label)
            if class_names is not None:
                found.class_names = class_names
        if columns is None:
            raise SourceError(f"{storage.redact(self.path)}: no Parquet or Arrow tables found")
        return columns

    def _stage_row(
        self,
        found: Extracted,
        writer: Writer | None,
        names: dict[str, int],
        where: str,
        key_base: str,
        split: str | None,
        value: Any,
        label_value: Any,
        label_column: str | None,
    ) -> None:
        """One row: its image staged and listed, or the row reported with why not."""
        data, path = _image_value(value)
        if data is None and path:
            data, why = self._named_image(path)
            if why:
                found.skipped.append((where, f"its image names {path[:200]!r}: {why}"))
                return
        if not data:
            found.skipped.append((where, "no image in the row (empty or null)"))
            return
        if isinstance(label_value, str) and task_of(found.task).objects:
            found.skipped.append((where, f"{label_value} (column {label_column!r})"))
            return
        if label_column is not None and label_value is None:
            found.skipped.append((where, f"no label (null in column {label_column!r})"))
            return
        if isinstance(label_value, SourceObjects):
            label = -1
            found.objects[key_base] = dataclasses.asdict(label_value)
        elif label_column is None:
            label = -1
        elif isinstance(label_value, str):
            label = names.setdefault(label_value, len(names))
        else:
            label = int(label_value)
            if label < 0:
                found.skipped.append((where, f"label {label} (-1 marks unlabeled rows in datasets' ClassLabel)"))
                return
            if found.class_names is not None and label >= len(found.class_names):
                count = len(found.class_names)
                found.skipped.append((where, f"label {label} is not an id of the ClassLabel's {count} names"))
                return
        key = key_base + "." + (sniff_format(data) or "bin").replace("jpeg", "jpg")
        if isinstance(value, table_rows.InPlace) and writer is not None:  # staged by a worker process
            writer.note(key, value.span)
        elif isinstance(value, table_rows.InPlace):
            found.spans[key] = value.span
        elif writer is not None:
            writer.put(key, data)
        found.images.append((key, label, split))
        if key_base in found.objects:  # filed under the staged file's key
            found.objects[key] = found.objects.pop(key_base)

    def _named_image(self, path: str) -> tuple[bytes | None, str | None]:
        """The bytes of the image file a row names, or why it is not read. Only regular files
        inside the dataset's folder, up to the largest allowed image's size, unless
        `outside_files`: a table from elsewhere named /etc files, '../' paths, a FIFO (the
        conversion hung), /dev/zero (6 GB in 13 s) and http:// URLs, which were fetched."""
        outside = confinement.entry_refusal(path)
        if outside and not self.outside_files:
            return (
                None,
                f"{outside}; images outside the dataset's folder are read only with {confinement.OUTSIDE_OPTION}",
            )
        local = path if outside else fileio.join(self._root(), confinement.normalised_entry(path))
        limit = image_limits.max_file_bytes(image_limits.DEFAULT_MAX_PIXELS)
        if storage.is_url(local):  # opted in: a server's size may be unknown or lie, so the read is bounded
            try:
                with fileio.open_binary(local, "rb") as f:
                    data = f.read(-1 if limit is None else limit + 1)
            except OSError as e:
                return None, f"the file cannot be read: {e}"
            if limit is not None and len(data) > limit:
                return None, f"the file holds more than any allowed image needs ({limit:,} bytes)"
            return data, None
        if not outside and not storage.is_url(self._root()) and not confinement.inside(self._root(), local):
            return None, f"a link that leads outside the dataset's folder; read only with {confinement.OUTSIDE_OPTION}"
        try:  # regular files only (a FIFO blocked, /dev/zero never ended), sized before they are read
            return fileio.read_regular(local, limit), None
        except fileio.UnusableFileError as e:
            return None, f"the file is {e}"
        except OSError as e:
            return None, f"the file cannot be read: {e}"

    def _root(self) -> str:
        return self.path if fileio.isdir(self.path) else self.path.rsplit("/", 1)[0]

    def _columns(self, table: str, schema: Any) -> tuple[str, str | None, list[str] | None]:
        """(image column, label column or None, ClassLabel names or None) of a table."""
        features = _features(schema)
        names = list(schema.names)
        image = self.image_column or next((n for n, f in features.items() if f.get("_type") == "Image"), None)
        image = image or next((n for n in names if n.lower() in IMAGE_NAMES), None)
        if image is None or image not in names:
            raise SourceError(
                f"{storage.redact(table)}: no image column found among {names}; name it with --image-column"
            )
        if self.label_column == "":  # asked for none: unlabeled
            return image, None, None
        label = self.label_column or next((n for n, f in features.items() if f.get("_type") == "ClassLabel"), None)
        label = label or next((n for n in names if n.lower() in LABEL_NAMES), None)
        if label is not None and label not in names:
            raise SourceError(f"{storage.redact(table)}: no column {label!r} among {names}")
        class_names = features.get(label or "", {}).get("names") if label else None
        return image, label, class_names


def _id_names(top: int, column: str) -> list[str]:
    """Class names for integer labels without `datasets`' ClassLabel names: the ids themselves,
    '0'..'top' (as TFDS names them), said in a warning, since the ids are then all there is."""
    warnings.warn(
        f"column {column!r} holds class ids 0..{top} without ClassLabel names: the classes are named '0'..'{top}'",
        stacklevel=3,
    )
    return [str(i) for i in range(top + 1)]


def _features(schema: Any) -> dict[str, dict[str, Any]]:
    """`datasets`' feature metadata in a table's schema ({} when it has none)."""
    raw = (schema.metadata or {}).get(b"huggingface")
    if not raw:
        return {}
    info = json.loads(raw)
    features = info.get("info", {}).get("features") or info.get("features") or {}
    return {k: v for k, v in features.items() if isinstance(v, dict)}


def _image_value(value: Any) -> tuple[bytes | None, str | None]:
    """(bytes, path) of an image cell: datasets' {bytes, path} struct, or plain bytes (an image
    read in place: its first bytes)."""
    if isinstance(value, table_rows.InPlace):
        return value.head, None
    if isinstance(value, dict):
        return value.get("bytes"), value.get("path")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value), None
    if isinstance(value, str):
        return None, value
    return None, None


def _refuse(file: str, entry: str, refusal: str | None) -> None:
    """A SourceError naming the file and the entry that would read outside the dataset."""
    if refusal:
        raise SourceError(f"{storage.redact(file)}: {entry}: {refusal}; refused (it would be read outside the dataset)")
