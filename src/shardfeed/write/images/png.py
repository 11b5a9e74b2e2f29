"""Whether a PNG holds every row its header promises, as TensorFlow's decoder requires.

Pillow decodes a PNG whose compressed data ends early but cleanly (a 96 x 96 header over 48 rows)
without a word, while `tf.io.decode_png` fails with "Invalid PNG data" when training reaches the
image. So the write-time check and `verify` walk the chunks (CRCs of the critical ones, as libpng
checks them), inflate the image data in bounded steps and count the bytes against what the header
declares.
"""

from __future__ import annotations

import struct
import zlib

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # by colour type
_STEP = 1 << 20  # inflate at most this much at a time: memory stays bounded whatever the file says


def expected_bytes(width: int, height: int, bit_depth: int, color_type: int) -> int:
    """The inflated size of a non-interlaced image's data: per row a filter byte plus the
    packed pixels."""
    return height * (1 + (width * _CHANNELS.get(color_type, 1) * bit_depth + 7) // 8)


def problem(data: bytes) -> str | None:
    """Why TensorFlow would refuse this PNG's image data, or None when every row is there.

    Interlaced (Adam7) files are not counted (None): rare, and no writer here makes one to test
    the count against.
    """
    if not data.startswith(_SIGNATURE) or len(data) < 33:
        return "not a PNG (header cut short)"
    width, height, bit_depth, color_type, _, _, interlace = struct.unpack(">IIBBBBB", data[16:29])
    if interlace:
        return None
    expected = expected_bytes(width, height, bit_depth, color_type)
    inflater, inflated, pos = zlib.decompressobj(), 0, 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if len(body) < length or pos + 12 + length > len(data):
            return f"truncated PNG: the {kind.decode(errors='replace')} chunk is cut short"
        critical = kind[0:1].isupper()
        crc = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])[0]
        if critical and zlib.crc32(kind + body) != crc:
            return f"corrupt PNG: CRC mismatch in the {kind.decode(errors='replace')} chunk"
        if kind == b"IDAT":
            try:
                inflated += _inflate(inflater, body, expected - inflated)
            except zlib.error as e:
                return f"corrupt PNG: image data does not inflate ({e})"
            if inflated > expected:
                return f"corrupt PNG: more image data than its {width}x{height} header declares"
        if kind == b"IEND":
            break
        pos += 12 + length
    if inflated < expected:
        share = inflated / expected if expected else 0.0
        return f"truncated PNG: image data ends after {share:.0%} of the rows its {width}x{height} header declares"
    return None


def _inflate(inflater: zlib._Decompress, chunk: bytes, room: int) -> int:
    """Bytes `chunk` inflates to, in steps of at most _STEP, stopping a little past `room`."""
    total, pending = 0, chunk
    while pending and total <= room:
        total += len(inflater.decompress(pending, _STEP))
        pending = inflater.unconsumed_tail
    return total
