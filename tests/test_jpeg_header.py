"""The JPEG header walk finds every EXIF block Pillow finds, on real photos."""

from __future__ import annotations

import io

import numpy as np
from conftest import jpeg_bytes
from PIL import Image

from shardfeed.write.images import jpeg


def _pillow_orientation(data: bytes) -> int:
    with Image.open(io.BytesIO(data)) as im:
        return int(im.getexif().get(0x0112, 1) or 1)


def test_exif_orientation_read_off_the_marker_walk_agrees_with_pillow() -> None:
    """The header walk that skips Pillow for files without EXIF finds every EXIF block Pillow
    does: after JFIF and ICC segments, with a thumbnail-sized comment, in progressive files."""
    import skimage.data

    photo = np.ascontiguousarray(skimage.data.astronaut()[::4, ::4])
    icc = Image.open(io.BytesIO(jpeg_bytes(photo))).info.get("icc_profile") or b"\x00" * 3000
    variants = {
        "plain": jpeg_bytes(photo),
        "progressive": jpeg_bytes(photo, progressive=True),
        "comment": jpeg_bytes(photo, comment=b"\xff\xd9 not a marker " * 500),
    }
    for orientation in (1, 3, 6, 8):
        exif = Image.Exif()
        exif[0x0112] = orientation
        variants[f"exif{orientation}"] = jpeg_bytes(photo, exif=exif.tobytes())
        variants[f"icc+exif{orientation}"] = jpeg_bytes(photo, exif=exif.tobytes(), icc_profile=icc)
        variants[f"progressive+exif{orientation}"] = jpeg_bytes(photo, exif=exif.tobytes(), progressive=True)
    for name, data in variants.items():
        assert jpeg.exif_orientation(data) == _pillow_orientation(data), name
        assert jpeg.may_have_exif(data) == ("exif" in name), name
    assert jpeg.may_have_exif(variants["exif6"][:40])  # a header cut short: Pillow decides
