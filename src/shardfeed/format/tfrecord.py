"""TFRecord framing (write, read, index) with CRC32C, without importing TensorFlow.

On-disk format, as TensorFlow's `tf.io.TFRecordWriter` writes it, one record after another:
    uint64 length (little-endian) | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
Compressed files (GZIP) are the same stream inside one gzip member.

The index format is NVIDIA DALI's: one text line `<offset> <size>` per record, where offset is
the byte position of the record's length field in the uncompressed stream and size is the whole
framed record (data plus 16 bytes of framing).
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterator
from typing import BinaryIO

import google_crc32c

from shardfeed.errors import CorruptRecordError

_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
FRAMING_BYTES = _HEADER.size + _FOOTER.size


def masked_crc(data: bytes) -> int:
    """TensorFlow's masked CRC32C of `data`."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One record with its framing, ready to append to a TFRecord file."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))


def is_record_header(header: bytes) -> bool:
    """Whether 12 bytes are a TFRecord header: a length and its masked CRC32C (a file starting
    with one is, with near certainty, a TFRecord file)."""
    if len(header) < _HEADER.size:
        return False
    _, length_crc = _HEADER.unpack(header[: _HEADER.size])
    return masked_crc(header[:8]) == length_crc


def iter_records(stream: BinaryIO, *, name: str = "<stream>", check_crc: bool = True) -> Iterator[tuple[int, bytes]]:
    """Yields (offset, data) for each record of an uncompressed TFRecord stream.

    Raises:
        CorruptRecordError: naming `name`, the record index and the byte offset.
    """
    offset = 0
    index = 0
    while True:
        header = stream.read(_HEADER.size)
        if not header:
            return
        if len(header) < _HEADER.size:
            raise CorruptRecordError(
                f"{name}: record {index} at byte {offset}: file ends inside a record header (truncated shard)"
            )
        length, length_crc = _HEADER.unpack(header)
        if check_crc and masked_crc(header[:8]) != length_crc:
            raise CorruptRecordError(
                f"{name}: record {index} at byte {offset}: length checksum mismatch (corrupt shard)"
            )
        data = stream.read(length)
        footer = stream.read(_FOOTER.size)
        if len(data) < length or len(footer) < _FOOTER.size:
            raise CorruptRecordError(
                f"{name}: record {index} at byte {offset}: file ends inside the record (truncated shard)"
            )
        if check_crc and masked_crc(data) != _FOOTER.unpack(footer)[0]:
            raise CorruptRecordError(f"{name}: record {index} at byte {offset}: data checksum mismatch (corrupt shard)")
        yield offset, data
        offset += length + FRAMING_BYTES
        index += 1


def read_records(path: str, *, compression: str | None = None) -> Iterator[bytes]:
    """Yields the records of a TFRecord file, checking every CRC."""
    from shardfeed.format import fileio

    with fileio.open_binary(path, "rb") as raw:
        stream: BinaryIO = gzip.GzipFile(fileobj=raw) if compression == "gzip" else raw  # type: ignore[assignment]
        for _, data in iter_records(stream, name=path):
            yield data


def format_index(sizes: list[int]) -> str:
    """The DALI index text for records whose data sizes are `sizes`."""
    lines = []
    offset = 0
    for size in sizes:
        framed = size + FRAMING_BYTES
        lines.append(f"{offset} {framed}\n")
        offset += framed
    return "".join(lines)


# The most an index line takes: two 20-digit numbers, a space and a newline (so an index file of
# n records is at most n * INDEX_LINE_BYTES bytes; a larger one is refused before it is read).
INDEX_LINE_BYTES = 42


def read_index(path: str, num_records: int) -> list[tuple[int, int]]:
    """The (offset, framed size) pairs of a shard's index file, which is to list `num_records`
    records: a regular file, read only when its size fits that many lines.

    Raises:
        CorruptRecordError: missing, not a regular file, too large or not an index (named, with
            what to run).
    """
    from shardfeed.format import fileio

    try:
        limit = f"an index of {num_records:,} records takes"
        return parse_index(fileio.read_regular(path, num_records * INDEX_LINE_BYTES + 64, limit).decode())
    except (OSError, ValueError) as e:
        raise CorruptRecordError(f"index file {path} cannot be read ({unreadable(e)}); run `shardfeed verify`") from e


def unreadable(error: BaseException) -> str:
    """Why a file could not be read, in a few words (an OSError's own text, not its errno)."""
    return error.strerror if isinstance(error, OSError) and error.strerror else str(error)


def parse_index(text: str) -> list[tuple[int, int]]:
    """(offset, framed size) pairs from DALI index text."""
    pairs = []
    for line in text.splitlines():
        if line.strip():
            offset, size = line.split()
            pairs.append((int(offset), int(size)))
    return pairs
