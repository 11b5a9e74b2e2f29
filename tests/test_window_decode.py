"""grain_dataset's crop-window JPEG decoder (read/native/window_decode.py): the window's pixels are the
whole decode's, value for value, at every DCT scale and chroma layout; a JPEG libjpeg refuses
falls back to the whole decode; without the library the batches are within a level."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
from conftest import JPEG_HEADERS, photos
from PIL import Image

from shardfeed.read.native import window_decode

needs_decoder = pytest.mark.skipif(
    not JPEG_HEADERS and not window_decode.available(), reason="no libjpeg headers (jpeglib.h) on this machine"
)


def _jpeg(image: np.ndarray, **save: object) -> bytes:
    out = io.BytesIO()
    Image.fromarray(image).save(out, "JPEG", quality=90, **save)
    return out.getvalue()


def _whole_cut(data: bytes, scale: int, window: tuple[int, int, int, int]) -> np.ndarray:
    """The reference: simplejpeg's whole decode at 1/scale, cut to the window."""
    height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    pixels = simplejpeg.decode_jpeg(data, "RGB", min_height=-(-height // scale), min_width=-(-width // scale))
    top, left, h, w = window
    return pixels[top : top + h, left : left + w]


@pytest.mark.slow
@needs_decoder
def test_windows_are_the_whole_decodes_pixels_at_every_scale_and_chroma_layout() -> None:
    """Real photos as 4:2:0, 4:2:2, 4:4:4, progressive and grey JPEGs; random windows, windows on
    each edge, 1-pixel ones and the whole image, at 1/1 to 1/8: every value equals the whole
    decode's. (The edge columns are where a plain crop_scanline differs: upsampled without
    their left neighbour.)"""
    assert window_decode.available(), "the decoder did not build on a machine with jpeglib.h"
    rng = np.random.default_rng(0)
    checked = 0
    for photo in photos().values():
        layouts = {
            "4:2:0": _jpeg(photo, subsampling=2),
            "4:2:2": _jpeg(photo, subsampling=1),
            "4:4:4": _jpeg(photo, subsampling=0),
            "progressive": _jpeg(photo, progressive=True),
            "grey": _jpeg(np.ascontiguousarray(photo[..., 0])),
        }
        for layout, data in layouts.items():
            for scale in (1, 2, 4, 8):
                height, width = -(-photo.shape[0] // scale), -(-photo.shape[1] // scale)
                windows = [(0, 0, height, width), (0, 0, 1, 1), (height - 1, width - 1, 1, 1)]
                windows += [(0, width - 17, 33, 17), (height - 9, 0, 9, width)]
                for _ in range(6):
                    h, w = int(rng.integers(1, height + 1)), int(rng.integers(1, width + 1))
                    windows.append((int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w))
                for window in windows:
                    got = window_decode.decode_window(data, scale, window)
                    assert got is not None, f"{layout} 1/{scale} {window}"
                    np.testing.assert_array_equal(got, _whole_cut(data, scale, window), f"{layout} 1/{scale} {window}")
                    checked += 1
    assert checked == 4 * 5 * 4 * 11


@needs_decoder
def test_a_jpeg_libjpeg_refuses_or_warns_about_is_left_to_the_whole_decode() -> None:
    """A truncated JPEG (libjpeg would warn and fill grey), a CMYK one (no RGB conversion), a
    window outside the image, bytes that are no JPEG: None, so that the caller decodes the whole
    image and reports its error as before; the decoder is still usable after each."""
    photo = next(iter(photos().values()))
    data = _jpeg(photo)
    cmyk = io.BytesIO()
    Image.fromarray(photo).convert("CMYK").save(cmyk, "JPEG")
    h, w = photo.shape[:2]
    assert window_decode.decode_window(data[: len(data) // 2], 1, (h - 10, 0, 10, w)) is None
    assert window_decode.decode_window(cmyk.getvalue(), 1, (0, 0, 8, 8)) is None
    assert window_decode.decode_window(data, 1, (h - 4, 0, 8, 8)) is None
    assert window_decode.decode_window(b"\xff\xd8 not a jpeg at all", 1, (0, 0, 1, 1)) is None
    np.testing.assert_array_equal(
        window_decode.decode_window(data, 1, (5, 7, 20, 30)), _whole_cut(data, 1, (5, 7, 20, 30))
    )


BATCHES = """
import numpy as np, sys
from shardfeed import grain_dataset
from shardfeed.read.native import window_decode
ds = grain_dataset(sys.argv[1], batch_size=8, image_size=(48, 40), seed=5, epochs=2, num_threads=2)
print("decoder:", window_decode.available())
np.save(sys.argv[2], np.concatenate([images for images, _ in ds]))
"""


@pytest.mark.slow
@needs_decoder
def test_grain_batches_without_the_library_are_within_a_level(photo_shards: Path, tmp_path: Path) -> None:
    """Two epochs of training batches (random crops and flips) in fresh processes, one whose `c++`
    is missing (simplejpeg's whole decode and OpenCV's resize, with one warning): within one
    level of the library's (which are `load`'s, tests/test_batch_decode.py) for 99.5% of values,
    never more than a few levels off; a window one pixel off would be tens of levels on average."""
    made = {}
    for name, compiler in (("with", "c++"), ("without", str(tmp_path / "no-such-c++"))):
        env = {**os.environ, "CXX": compiler, "XDG_CACHE_HOME": str(tmp_path / f"cache-{name}")}  # none built before
        out = tmp_path / f"{name}.npy"
        done = subprocess.run(
            [sys.executable, "-c", BATCHES, str(photo_shards), str(out)], capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, done.stderr
        assert f"decoder: {name == 'with'}" in done.stdout
        made[name] = np.load(out)
    assert "no C++ compiler" in done.stderr and "simplejpeg" in done.stderr
    assert made["with"].shape[0] >= 2 * 4 * 8  # two epochs of at least 4 batches
    diff = np.abs(made["with"].astype(int) - made["without"].astype(int))
    assert diff.mean() < 0.3 and (diff > 1).mean() < 0.005 and diff.max() <= 8, (diff.mean(), (diff > 1).mean())
