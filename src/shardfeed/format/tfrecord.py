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
import os
import struct
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

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
        data = _read_up_to(stream, length)
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


# A record's data is read in pieces of at most this: its length field comes from the file, and a
# read of 2^40 bytes asked for at once is a MemoryError (verify), or in TensorFlow's reader a
# segmentation fault, before the file's end is found.
_READ_PIECE = 64 << 20


def _read_up_to(stream: BinaryIO, length: int) -> bytes:
    """Up to `length` bytes of `stream`, fewer where it ends first; memory grows only with what
    the stream really holds, whatever `length` claims."""
    if length <= _READ_PIECE:
        return stream.read(length)
    pieces, left = [], length
    while left > 0:
        piece = stream.read(min(left, _READ_PIECE))
        if not piece:
            break
        pieces.append(piece)
        left -= len(piece)
    return b"".join(pieces)


class FramingProblem(NamedTuple):
    """A record whose length field runs past the end of its file: its index, and what to say."""

    record: int
    message: str


def framing_problem(path: str, size: int, compression: str | None = None) -> FramingProblem | None:
    """Why the TFRecord file at local `path`, `size` bytes long, would make a reader allocate
    more than the file holds, or None: the first record whose length field runs past the end of
    the file (or of its uncompressed stream), named by index and byte offset. Only the 12-byte
    headers are read (a pread each): 0.5 ms a shard of 1,000 records of 100 KB. TensorFlow's
    reader allocates whatever a length field says, and died with a segmentation fault on an
    edited shard claiming 2^40 bytes. Lengths inside the file are left to the CRC checks.
    """
    if compression == "gzip":
        return _gzip_framing_problem(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        offset, index = 0, 0
        while offset < size:
            header = os.pread(fd, _HEADER.size, offset)
            if len(header) < _HEADER.size:
                return None  # a cut header: the reader's own check names it
            length = _HEADER.unpack(header)[0]
            if length > size - offset - FRAMING_BYTES:
                return _past_end(index, offset, length, size - offset - FRAMING_BYTES)
            offset += length + FRAMING_BYTES
            index += 1
        return None
    finally:
        os.close(fd)


def _gzip_framing_problem(path: str) -> FramingProblem | None:
    """`framing_problem` of a GZIP-compressed shard: the stream decompressed once, piece by
    piece, each record's data skipped rather than kept."""
    with gzip.open(path, "rb") as stream:
        offset, index = 0, 0
        while header := stream.read(_HEADER.size):
            if len(header) < _HEADER.size:
                return None
            length = _HEADER.unpack(header)[0]
            left = length + _FOOTER.size
            while left > 0 and (piece := stream.read(min(left, _READ_PIECE))):
                left -= len(piece)
            if left > 0:
                return _past_end(index, offset, length, length - left)
            offset += length + FRAMING_BYTES
            index += 1
    return None


def _past_end(index: int, offset: int, length: int, room: int) -> FramingProblem:
    """The problem of record `index` at `offset`, whose `length` is more than the `room` its file
    has for its data (what follows its header, less its 4-byte checksum)."""
    return FramingProblem(
        index,
        f"record {index} at byte {offset} claims {length:,} bytes, more than the {max(room, 0):,} the file holds "
        "after it (an edited or damaged shard)",
    )


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
