"""The C decode path gives Pillow's pixels, at Pillow's DCT scale, on real photos."""

from __future__ import annotations

import io

import numpy as np
import pytest
from conftest import jpeg_bytes
from PIL import Image

from shardfeed.write.images import jpeg


def _pillow(data: bytes, target: tuple[int, int] | None) -> Image.Image:
    im = Image.open(io.BytesIO(data))
    if target is not None:
        im.draft(im.mode, target)
    im.load()
    return im


@pytest.mark.parametrize("target", [None, (300, 200), (120, 80), (60, 40), (20, 13), (5, 3), (600, 400)])
def test_scaled_decode_gives_pillows_pixels(target: tuple[int, int] | None) -> None:
    """Same size, mode and pixels as Pillow's draft + load: colour, gray and progressive files,
    at every DCT scale (1/1 to 1/8) and for targets larger than the image (no reduction)."""
    import skimage.data

    photo = np.ascontiguousarray(skimage.data.astronaut()[:400, :])  # 512 wide, 400 high
    files = {
        "colour": jpeg_bytes(photo),
        "gray": jpeg_bytes(np.ascontiguousarray(photo[:, :, 0])),
        "progressive": jpeg_bytes(photo, progressive=True),
        "odd size": jpeg_bytes(np.ascontiguousarray(photo[:397, :509])),
    }
    for name, data in files.items():
        ours = jpeg.decode_scaled(data, lambda size: target)
        theirs = _pillow(data, target)
        assert ours is not None, name
        assert (ours.mode, ours.size) == (theirs.mode, theirs.size), name
        assert np.array_equal(np.asarray(ours), np.asarray(theirs)), name


def test_draft_scale_is_the_largest_power_of_two_that_keeps_the_target() -> None:
    assert jpeg.draft_scale((512, 400), None) == 1
    assert jpeg.draft_scale((512, 400), (256, 200)) == 2
    assert jpeg.draft_scale((512, 400), (255, 201)) == 1
    assert jpeg.draft_scale((512, 400), (100, 100)) == 4
    assert jpeg.draft_scale((512, 400), (10, 10)) == 8
    assert jpeg.draft_scale((512, 400), (1024, 800)) == 1


def test_files_it_does_not_handle_are_left_to_pillow() -> None:
    """CMYK files and files the strict decoder complains about come back as None."""
    import skimage.data

    photo = np.ascontiguousarray(skimage.data.astronaut()[::2, ::2])
    cmyk = io.BytesIO()
    Image.fromarray(photo).convert("CMYK").save(cmyk, "JPEG")
    data = jpeg_bytes(photo)
    assert jpeg.decode_scaled(cmyk.getvalue(), lambda size: None) is None
    assert jpeg.decode_scaled(data[: len(data) // 2], lambda size: None) is None
    assert jpeg.decode_scaled(b"\xff\xd8\xff not a jpeg", lambda size: None) is None


def test_decode_check_rejects_truncation_and_warns_on_damaged_data() -> None:
    import skimage.data

    data = jpeg_bytes(np.ascontiguousarray(skimage.data.astronaut()[::2, ::2]))
    assert jpeg.decode_check(data, "YCbCr")[0] is None
    with pytest.raises(jpeg.DamagedJpegError, match="corrupt JPEG"):
        jpeg.decode_check(data[: len(data) // 2], "YCbCr")
    start = data.index(b"\xff\xda")  # start of scan: damage the entropy-coded data after it
    damaged = data[: start + 1000] + b"\xff\xd0" + data[start + 1002 :]  # a stray restart marker
    warning, _ = jpeg.decode_check(damaged, "YCbCr")
    assert warning is not None and warning.startswith("damaged JPEG data, decodes with a warning: Corrupt JPEG data")


def _verdict(data: bytes, colorspace: str) -> str:
    try:
        return "ok" if jpeg.decode_check(data, colorspace)[0] is None else "warning"
    except jpeg.DamagedJpegError:
        return "rejected"


def test_checking_colour_files_through_gray_gives_the_colour_verdicts() -> None:
    """The check decodes YCbCr files to gray (cheaper); on damaged real photos, baseline and
    progressive, every verdict is the one a full colour decode gives ("RGB" decodes to RGB)."""
    import random

    import skimage.data

    photo = np.ascontiguousarray(skimage.data.chelsea())
    rng = random.Random(0)
    verdicts = set()
    for source in (jpeg_bytes(photo), jpeg_bytes(photo, progressive=True)):
        scan = source.index(b"\xff\xda") + 12
        for k in range(30):
            damaged = bytearray(source)
            if k % 3 == 0:
                damaged = damaged[: rng.randrange(scan, len(damaged))]
            elif k % 3 == 1:
                for _ in range(rng.randrange(1, 20)):
                    damaged[rng.randrange(scan, len(damaged) - 2)] = rng.randrange(256)
            else:
                at = rng.randrange(scan, len(damaged) - 100)
                damaged[at : at + 2] = bytes([0xFF, rng.choice([0xD0, 0xD3, 0xC4, 0xDA, 0xD9])])
            gray, colour = _verdict(bytes(damaged), "YCbCr"), _verdict(bytes(damaged), "RGB")
            assert gray == colour, (k, gray, colour)
            verdicts.add(gray)
    assert {"warning", "rejected"} <= verdicts  # the damage was real
