"""What an image's bytes are, from their first bytes (never from a file name): the writer sniffs
sources with it, readers of other people's records sniff what a record holds."""

from __future__ import annotations

_MAGIC = [
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
]


def sniff_format(data: bytes) -> str | None:
    """The image format from the content's magic bytes ('jpeg', 'png', ...), or None."""
    for magic, name in _MAGIC:
        if data.startswith(magic):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None
