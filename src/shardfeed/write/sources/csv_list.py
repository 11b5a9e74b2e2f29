"""A CSV/TSV list of image files (`path,label[,split]`), paths relative to the list."""

from __future__ import annotations

import csv
import dataclasses
import io
import os

from shardfeed.errors import SourceError
from shardfeed.format import fileio
from shardfeed.format.schema import CLASSIFICATION, MULTI_LABEL
from shardfeed.write.items import Discovery, Item, file_item, sorted_labels


class CsvSource:
    """A CSV/TSV list `path,label[,split]` with paths relative to the CSV file.

    The delimiter is ',' (tab for .tsv); a header that only splits into the path column on ';',
    tab or '|' (a spreadsheet export in a ';' locale) is read with that one. With `multi_label`,
    the label cell holds several class names, `label_separator` between them (default ';'):
    each image gets all of them (`"cat;outdoor"`), names sorted into ids as for one label.
    """

    kind = "csv"

    def __init__(
        self,
        csv_path: str,
        *,
        path_column: str = "path",
        label_column: str = "label",
        split_column: str | None = None,
        multi_label: bool = False,
        label_separator: str = ";",
    ) -> None:
        self.csv_path = csv_path
        self.path_column = path_column
        self.label_column = label_column
        self.split_column = split_column
        self.multi_label = multi_label
        self.label_separator = label_separator
        if multi_label and not label_separator.strip():
            raise SourceError(f"label_separator {label_separator!r} is blank; names are trimmed of spaces")

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
        presplit = split_i is not None
        if self.multi_label:
            items, class_names = self._multi_label(rows_ok, base, skipped, name)
        else:
            class_names = sorted_labels({label for _, label, _ in rows_ok})
            ids = {n: i for i, n in enumerate(class_names)}
            items = [file_item(base, rel, ids[label], split) for rel, label, split in sorted(rows_ok)]
        if presplit and any(item.split is None for item in items):
            missing = next(item.key for item in items if item.split is None)
            raise SourceError(
                f"{name}: split column {split_name!r} is empty for {missing!r}; "
                "fill it for every row or drop the column"
            )
        task = MULTI_LABEL if self.multi_label else CLASSIFICATION
        return Discovery(self.kind, self.csv_path, items, base, class_names, skipped, presplit, task=task)

    def _multi_label(
        self, rows: list[tuple[str, str, str | None]], base: str, skipped: list[tuple[str, str]], name: str
    ) -> tuple[list[Item], list[str]]:
        """The items and class names of a multi-label list: every name of a label cell is one of
        the image's classes (repeats said once; a cell of separators only is reported)."""
        named = [(rel, {n.strip() for n in label.split(self.label_separator)} - {""}, s) for rel, label, s in rows]
        skipped += [(rel, f"no class name in its label cell ({name})") for rel, names, _ in named if not names]
        class_names = sorted_labels({n for _, names, _ in named for n in names})
        ids = {n: i for i, n in enumerate(class_names)}
        items = [
            dataclasses.replace(file_item(base, rel, -1, split), labels=tuple(sorted(ids[n] for n in names)))
            for rel, names, split in sorted(named, key=lambda row: row[0])
            if names
        ]
        return items, class_names

    @staticmethod
    def _column(header: list[str], column: str, option: str, name: str) -> int:
        if column not in header:
            flag = "--" + option.replace("_", "-")
            raise SourceError(
                f"column {column!r} not in CSV header {header} (line 1 of {name}); pass {option}= ({flag})"
            )
        return header.index(column)
