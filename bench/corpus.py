"""Benchmark corpus: a few thousand realistic JPEGs cut from the real photos scikit-image ships."""

from __future__ import annotations

import os

import numpy as np
from PIL import Image

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field", "retina", "cat")


def _photos_for(root: str, count: int) -> list[np.ndarray] | None:
    """The shipped photos to cut a corpus from, into an emptied `root`; None when `root` already
    holds `count` images (re-used as it is)."""
    existing = sum(len(files) for _, _, files in os.walk(root)) if os.path.isdir(root) else 0
    if existing == count:
        return None
    import shutil

    import skimage.data

    shutil.rmtree(root, ignore_errors=True)
    return [getattr(skimage.data, name)()[..., :3] for name in PHOTOS]


def _save(root: str, i: int, classes: int, pixels: np.ndarray) -> None:
    """Image `i` as root/class<i mod classes>/<i>.jpg, quality 90."""
    folder = os.path.join(root, f"class{i % classes:02d}")
    os.makedirs(folder, exist_ok=True)
    Image.fromarray(np.ascontiguousarray(pixels)).save(os.path.join(folder, f"{i:06d}.jpg"), quality=90)


def build_corpus(root: str, count: int, *, classes: int = 10, seed: int = 0) -> str:
    """Writes `count` JPEGs (random crops 200-500 px a side, quality 90) into root/<class>/.

    Re-uses the folder when it already holds that many images.
    """
    photos = _photos_for(root, count)
    if photos is None:
        return root
    rng = np.random.default_rng(seed)
    for i in range(count):
        photo = photos[i % len(photos)]
        h, w = photo.shape[:2]
        ch, cw = int(rng.integers(200, min(h, 500))), int(rng.integers(200, min(w, 500)))
        y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        crop = photo[y : y + ch, x : x + cw]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        _save(root, i, classes, crop)
    return root


def build_large_corpus(root: str, count: int, *, classes: int = 10, seed: int = 0) -> str:
    """Writes `count` phone-sized JPEGs (2,000-4,032 px wide, 4:3, 3-12 MP, quality 90) into
    root/<class>/: mosaics of native-resolution crops of the shipped photos (no upscaling, so
    every pixel is real photo detail and the files compress like photos).

    Re-uses the folder when it already holds that many images.
    """
    photos = _photos_for(root, count)
    if photos is None:
        return root
    rng = np.random.default_rng(seed)
    for i in range(count):
        width = int(rng.integers(2000, 4033))
        height = width * 3 // 4
        canvas = np.empty((height, width, 3), np.uint8)
        for y in range(0, height, 256):
            for x in range(0, width, 256):
                photo = photos[int(rng.integers(len(photos)))]
                py, px = int(rng.integers(0, photo.shape[0] - 256)), int(rng.integers(0, photo.shape[1] - 256))
                tile = photo[py : py + 256, px : px + 256]
                canvas[y : y + 256, x : x + 256] = tile[: height - y, : width - x]
        _save(root, i, classes, canvas)
    return root
