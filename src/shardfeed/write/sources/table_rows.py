"""How a table's rows are read: Parquet a few row batches at a time, Arrow streams a record batch
at a time, and, from a local Arrow stream (`datasets`' save_to_disk tables), the images as byte
spans of the file.

An uncompressed Arrow stream keeps each binary value contiguous in the file: memory-mapped, a
value's buffer address less the map's start is its offset in the file. The conversion then reads
each image from the table itself (`Item.span`) instead of a staged copy. A table whose buffers
are not in the map (compressed record batches) or whose rows name image files instead of
holding them is not read this way (`NotInPlace`): the caller stages it as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from shardfeed.errors import SourceError
from shardfeed.format import fileio, storage

BATCH_ROWS = 64  # rows in memory at a time
MAX_ROW_GROUP_BYTES = 2 * 2**30  # a Parquet row group's image and label columns, read whole by pyarrow
HEAD_BYTES = 64  # what the image's format is told from (format/image_format.sniff_format)


class InPlace(NamedTuple):
    """An image held by the table: its first bytes, and (file, offset, size) of all of them."""

    head: bytes
    span: tuple[str, int, int]


class NotInPlace(Exception):
    """The table's images cannot all be read as spans of it (the message says why)."""


def in_place_rows(table: str, image: str, label: str | None) -> Iterator[tuple[InPlace | None, Any]]:
    """(the row's image, or None when it holds none; its label value) of each row of the local
    Arrow stream `table`, in order.

    Raises:
        NotInPlace: a record batch's image bytes are not in the file as they are, or a row names
            an image file.
    """
    pa = pyarrow()
    path = fileio.absolute(table)
    with readable(table, "arrow"), pa.memory_map(path) as mapped:
        whole = mapped.read_buffer()
        mapped.seek(0)
        for batch in pa.ipc.open_stream(mapped):
            column = batch.column(batch.schema.get_field_index(image))
            values, names = _bytes_and_paths(pa, column)
            spans = _spans(values, whole)
            labels = batch.column(batch.schema.get_field_index(label)).to_pylist() if label else [None] * len(values)
            for i, (start, size) in enumerate(spans):
                if size:
                    yield (
                        InPlace(whole.slice(start, min(size, HEAD_BYTES)).to_pybytes(), (path, start, size)),
                        labels[i],
                    )
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
    """(offset in the file, size) of each value; size 0 for a null or empty one."""
    kind = str(values.type)
    if kind not in ("binary", "large_binary"):
        raise NotInPlace(f"the image column is {kind}, not binary")
    _, offsets_buffer, data = values.buffers()
    count = len(values)
    if data is None or count == 0:
        return [(0, 0)] * count
    start = data.address - whole.address
    if start < 0 or start + data.size > whole.size:
        raise NotInPlace("its record batches are compressed (their bytes are not in the file as they are)")
    width = np.int64 if kind == "large_binary" else np.int32
    offsets = np.frombuffer(offsets_buffer, dtype=width)[values.offset : values.offset + count + 1].astype(np.int64)
    valid = values.is_valid().to_numpy(zero_copy_only=False) if values.null_count else np.ones(count, bool)
    return [(start + int(offsets[i]), int(offsets[i + 1] - offsets[i]) if valid[i] else 0) for i in range(count)]


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


def rows(table: str, kind: str, image: str, label: str | None) -> Iterator[tuple[Any, Any]]:
    """(image value, label value) of each row, BATCH_ROWS at a time."""
    pa = pyarrow()
    columns = [image] + ([label] if label else [])
    with readable(table, kind), fileio.open_binary(table, "rb") as f:
        if kind == "parquet":
            parquet = pa.parquet.ParquetFile(f)
            check_row_groups(table, parquet.metadata, columns)
            batches = parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns)
        else:
            batches = iter(pa.ipc.open_stream(f))
        for batch in batches:
            images = batch.column(batch.schema.get_field_index(image)).to_pylist()
            labels = batch.column(batch.schema.get_field_index(label)).to_pylist() if label else [None] * len(images)
            yield from zip(images, labels, strict=True)


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
