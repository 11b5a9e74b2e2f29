"""How a table's rows are read: Parquet a few row batches at a time, Arrow streams a record batch
at a time, and, from a local table whose images are stored as they are, the images as byte spans
of the file.

An uncompressed Arrow stream (`datasets`' save_to_disk tables) keeps each binary value contiguous
in the file: memory-mapped, a value's buffer address less the map's start is its offset in the
file. A Parquet column chunk written uncompressed and PLAIN (as `datasets` writes image columns
for the Hub: `compression="none"`, no dictionary, so that the Hub's content-defined chunks
deduplicate) holds each value as its 4-byte length and its bytes: found there after the one
before and checked byte for byte against what pyarrow read. The conversion then reads each image
from the table itself (`Item.span`) instead of a staged copy. A table whose images are not in the
file as they are (compressed record batches or pages, dictionary or other encodings) or whose
rows name image files instead of holding them is not read this way (`NotInPlace`): the caller
stages it as before.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Callable, Iterable, Iterator
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np

from shardfeed import parallel
from shardfeed.errors import SourceError
from shardfeed.format import fileio, storage
from shardfeed.write.sources.staging import Writer, part_images

BATCH_ROWS = 64  # rows in memory at a time
MAX_ROW_GROUP_BYTES = 2 * 2**30  # a Parquet row group's image and label columns, read whole by pyarrow
HEAD_BYTES = 64  # what the image's format is told from (format/image_format.sniff_format)


class InPlace(NamedTuple):
    """An image held by the table: its first bytes, and (file, offset, size) of all of them."""

    head: bytes
    span: tuple[str, int, int]


class NotInPlace(Exception):
    """The table's images cannot all be read as spans of it (the message says why)."""


def in_place_rows(table: str, kind: str, image: str, label: str | None) -> Iterator[tuple[InPlace | None, Any]]:
    """(the row's image, or None when it holds none; its label value) of each row of the local
    table `table` ('arrow' stream or 'parquet'), in order.

    Raises:
        NotInPlace: the table's image bytes are not in the file as they are (compressed record
            batches or pages, dictionary-encoded values), or a row names an image file.
    """
    pa = pyarrow()
    path = fileio.absolute(table)
    with readable(table, kind):
        yield from (_parquet_rows if kind == "parquet" else _arrow_rows)(pa, path, table, image, label)


def _arrow_rows(pa: Any, path: str, table: str, image: str, label: str | None) -> Iterator[tuple[InPlace | None, Any]]:
    """An Arrow stream's rows: each value's buffer address less the map's start is its offset."""
    with pa.memory_map(path) as mapped:
        whole = mapped.read_buffer()
        mapped.seek(0)
        for batch in pa.ipc.open_stream(mapped):
            values, names = _bytes_and_paths(pa, batch.column(batch.schema.get_field_index(image)))
            spans = _spans(values, whole)
            yield from _batch_rows(
                path, batch, label, spans, names, lambda at, size: whole.slice(at, min(size, HEAD_BYTES)).to_pybytes()
            )


def _parquet_rows(
    pa: Any, path: str, table: str, image: str, label: str | None
) -> Iterator[tuple[InPlace | None, Any]]:
    """A Parquet file's rows, where its image column chunks are stored uncompressed and PLAIN
    (as `datasets` writes image columns since it chunks files for the Hub's deduplication): each
    value is then its 4-byte length and its bytes, as they are, between page headers and levels.
    pyarrow reads the values; each is found in the file after the one before, from its length
    and first bytes, and its whole span is compared with what pyarrow read (so a span holds
    exactly its image, or the table is staged)."""
    parquet = pa.parquet.ParquetFile(path, memory_map=True)
    columns = [image] + ([label] if label else [])
    check_row_groups(table, parquet.metadata, columns)
    chunks = [_plain_chunk(parquet.metadata.row_group(g), image) for g in range(parquet.metadata.num_row_groups)]
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # closed when the last view of it goes
    whole = pa.py_buffer(mapped)
    for group, (cursor, end) in enumerate(chunks):
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=[group], columns=columns):
            values, names = _bytes_and_paths(pa, batch.column(batch.schema.get_field_index(image)))
            spans, cursor = _found_spans(values, mapped, whole, cursor, end)
            yield from _batch_rows(
                path, batch, label, spans, names, lambda at, size: mapped[at : at + min(size, HEAD_BYTES)]
            )


def _plain_chunk(row_group: Any, image: str) -> tuple[int, int]:
    """(start, end) in the file of a row group's image-bytes column chunk, or NotInPlace when
    its values are not stored as they are."""
    for i in range(row_group.num_columns):
        chunk = row_group.column(i)
        if chunk.path_in_schema not in (image, f"{image}.bytes"):
            continue
        if chunk.compression != "UNCOMPRESSED" or chunk.has_dictionary_page:
            raise NotInPlace(f"its image pages are {chunk.compression.lower()} or dictionary-encoded")
        if not set(chunk.encodings) <= {"PLAIN", "RLE", "BIT_PACKED"}:
            raise NotInPlace(f"its image values are encoded {'/'.join(chunk.encodings)}, not PLAIN")
        return chunk.data_page_offset, chunk.data_page_offset + chunk.total_compressed_size
    raise NotInPlace("the image column holds no bytes")


def _found_spans(
    values: Any, mapped: mmap.mmap, whole: Any, cursor: int, end: int
) -> tuple[list[tuple[int, int]], int]:
    """(offset in the file, size) of each PLAIN value (size 0 for a null or empty one), each
    found at or after `cursor` and compared byte for byte with what pyarrow read (`whole`: the
    file as a pyarrow buffer); and the cursor after the last."""
    offsets, valid, data = _binary_values(values)
    spans = []
    for i, ok in enumerate(valid):
        at, size = offsets[i], offsets[i + 1] - offsets[i]
        if not ok or size == 0:
            spans.append((0, 0))
            continue
        value = data.slice(at, size)
        head = value.slice(0, min(size, HEAD_BYTES)).to_pybytes()
        found = mapped.find(size.to_bytes(4, "little") + head, cursor, end) + 4
        if found < 4 or not value.equals(whole.slice(found, size)):
            raise NotInPlace("an image value is not in the file as it is")
        spans.append((found, size))
        cursor = found + size
    return spans, cursor


def _batch_rows(
    path: str,
    batch: Any,
    label: str | None,
    spans: list[tuple[int, int]],
    names: Any,
    head: Callable[[int, int], bytes],
) -> Iterator[tuple[InPlace | None, Any]]:
    """A record batch's rows from their images' spans: (InPlace, label), or (None, label) for a
    row without an image; NotInPlace for a row that names an image file instead."""
    labels = batch.column(batch.schema.get_field_index(label)).to_pylist() if label else [None] * len(spans)
    for i, (start, size) in enumerate(spans):
        if size:
            yield InPlace(head(start, size), (path, start, size)), labels[i]
        elif names is not None and names[i].is_valid:
            raise NotInPlace(f"row {i} of a record batch names an image file")
        else:
            yield None, labels[i]


def _bytes_and_paths(pa: Any, column: Any) -> tuple[Any, Any]:
    """The column's binary values (datasets' {bytes, path} struct flattened, the struct's nulls
    applied), and its paths (None for a plain binary column)."""
    if pa.types.is_struct(column.type):
        children = dict(zip([f.name for f in column.type], column.flatten(), strict=True))
        if "bytes" not in children:
            raise NotInPlace("the image column holds no bytes field")
        return children["bytes"], children.get("path")
    return column, None


def _spans(values: Any, whole: Any) -> list[tuple[int, int]]:
    """(offset in the file, size) of each value of an Arrow stream's batch; size 0 for a null or
    empty one."""
    offsets, valid, data = _binary_values(values)
    if data is None or not any(valid):
        return [(0, 0)] * len(valid)
    start = data.address - whole.address
    if start < 0 or start + data.size > whole.size:
        raise NotInPlace("its record batches are compressed (their bytes are not in the file as they are)")
    return [(start + offsets[i], offsets[i + 1] - offsets[i] if ok else 0) for i, ok in enumerate(valid)]


def _binary_values(values: Any) -> tuple[list[int], list[bool], Any]:
    """A binary column's value offsets (one more than its values), which values are not null,
    and its data buffer; a column without bytes (nothing but nulls and empty values) as all
    null."""
    kind = str(values.type)
    if kind not in ("binary", "large_binary"):
        raise NotInPlace(f"the image column is {kind}, not binary")
    _, offsets_buffer, data = values.buffers()
    count = len(values)
    if data is None or count == 0:
        return [0] * (count + 1), [False] * count, data
    width = np.int64 if kind == "large_binary" else np.int32
    offsets = np.frombuffer(offsets_buffer, dtype=width)[values.offset : values.offset + count + 1].tolist()
    valid = values.is_valid().to_numpy(zero_copy_only=False).tolist() if values.null_count else [True] * count
    return offsets, valid, data


def pyarrow() -> Any:
    """pyarrow, or a SourceError naming the extra that installs it."""
    try:
        import pyarrow as pa
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError as e:
        raise SourceError("reading Parquet or Arrow needs pyarrow: pip install 'shardfeed[hub]'") from e
    return pa


def schema(table: str, kind: str) -> Any:
    """The table's schema ('parquet' or 'arrow' stream), read from its footer or first message."""
    pa = pyarrow()
    with readable(table, kind), fileio.open_binary(table, "rb") as f:
        if kind == "parquet":
            return pa.parquet.read_schema(f)
        return pa.ipc.open_stream(f).schema


def rows(
    table: str, kind: str, image: str, label: str | None, row_groups: range | None = None
) -> Iterator[tuple[Any, Any]]:
    """(image value, label value) of each row (of these Parquet `row_groups`: all when None),
    BATCH_ROWS at a time."""
    pa = pyarrow()
    columns = [image] + ([label] if label else [])
    with readable(table, kind), fileio.open_binary(table, "rb") as f:
        if kind == "parquet":
            parquet = pa.parquet.ParquetFile(f)
            check_row_groups(table, parquet.metadata, columns)
            groups = None if row_groups is None else list(row_groups)
            batches = parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns, row_groups=groups)
        else:
            batches = iter(pa.ipc.open_stream(f))
        for batch in batches:
            images = batch.column(batch.schema.get_field_index(image)).to_pylist()
            labels = batch.column(batch.schema.get_field_index(label)).to_pylist() if label else [None] * len(images)
            yield from zip(images, labels, strict=True)


def staged_rows(
    tables: list[str], kind: str, image: str, label: str | None, stage_in: str | None
) -> Iterator[Iterable[tuple[Any, Any]]]:
    """Each table's `rows`, table after table. With `stage_in` (a local staging folder), several
    tables, or Parquet row groups, are read at once by worker processes, each writing its rows'
    image bytes to a file of its own there (`_staged_part`): a row's image then comes as an
    `InPlace` naming that file, its span in it. Otherwise (or where forking is not safe: the
    process holds TensorFlow) the rows are read here, their images as bytes."""
    parts = [(t, groups) for t in tables for groups in _parts(t, kind)] if stage_in is not None else []
    if len(parts) < 2 or not parallel.fork_is_safe():
        yield from (rows(t, kind, image, label) for t in tables)
        return
    with parallel.forked_pool(len(parts)) as pool:
        done = pool.map(
            _staged_part,
            [t for t, _ in parts],
            repeat(kind),
            repeat(image),
            repeat(label),
            [g for _, g in parts],
            repeat(stage_in),
            range(len(parts)),
        )
        for table in tables:
            yield [row for t, _ in parts if t == table for row in next(done)]


PARTS_PER_TABLE = 8  # a Parquet table's row groups, read in this many tasks (balance against overhead)


def _parts(table: str, kind: str) -> list[range | None]:
    """The row-group ranges a table is read in by workers: a Parquet file's row groups in up
    to PARTS_PER_TABLE runs, an Arrow stream whole (None)."""
    if kind != "parquet":
        return [None]
    pa = pyarrow()
    with readable(table, kind), fileio.open_binary(table, "rb") as f:
        count = pa.parquet.ParquetFile(f).metadata.num_row_groups
    step = max(1, -(-count // PARTS_PER_TABLE))
    return [range(start, min(start + step, count)) for start in range(0, count, step)] or [None]


def _staged_part(
    table: str, kind: str, image: str, label: str | None, row_groups: range | None, folder: str, index: int
) -> list[tuple[Any, Any]]:
    """`rows` of a table's `row_groups`, each image's bytes appended to the staging `folder`'s
    images file of task `index` and the row's image value replaced by an `InPlace` (its first
    bytes; the file's name, offset, size); a row without image bytes (null, empty, a path) kept
    as read (a worker process's task: what it returns is small)."""
    out: list[tuple[Any, Any]] = []
    with Writer(folder, part_images(index)) as part:
        for value, label_value in rows(table, kind, image, label, row_groups):
            data = value.get("bytes") if isinstance(value, dict) else value
            if isinstance(data, (bytes, bytearray)) and data:
                out.append((InPlace(bytes(data[:HEAD_BYTES]), part.append(bytes(data))), label_value))
            else:
                out.append((value, label_value))
    return out


@contextlib.contextmanager
def readable(table: str, kind: str) -> Iterator[None]:
    """Turns pyarrow's complaint about a damaged or foreign file ('Parquet magic bytes not found
    in footer', which names no file) into a SourceError naming the table."""
    pa = pyarrow()
    try:
        yield
    except (pa.ArrowException, EOFError) as e:
        what = "Parquet" if kind == "parquet" else "Arrow stream"
        raise SourceError(
            f"{storage.redact(table)} is not a readable {what} file ({e}); download or write it again"
        ) from None


def check_row_groups(table: str, metadata: Any, columns: list[str]) -> None:
    """Refuses a Parquet file whose row groups would take more than MAX_ROW_GROUP_BYTES once
    read (pyarrow reads a row group's column chunk whole): what the footer declares is checked
    before anything is read, so a few MB of compressed zeros cannot take the machine's memory."""
    for group in range(metadata.num_row_groups):
        meta = metadata.row_group(group)
        size = sum(
            meta.column(i).total_uncompressed_size
            for i in range(meta.num_columns)
            if meta.column(i).path_in_schema.split(".")[0] in columns
        )
        if size > MAX_ROW_GROUP_BYTES:
            raise SourceError(
                f"{storage.redact(table)}: row group {group} declares {size:,} bytes of {columns} once read, more than "
                f"{MAX_ROW_GROUP_BYTES:,}: refused before reading (write it with smaller row groups, as the Hub's "
                "files are: about 100 images each)"
            )
