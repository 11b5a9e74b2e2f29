"""NumPy sources: images and labels in .npz/.npy files (keras' mnist.npz layout, image/label pairs)."""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

from shardfeed.errors import SourceError
from shardfeed.format import fileio
from shardfeed.write.items import Discovery, Item


class ArraySource:
    """NumPy arrays of uint8 images (N,H,W) or (N,H,W,C) with integer labels (MNIST-like).

    Accepts an `.npz` holding `x_<split>`/`y_<split>` pairs (as keras' mnist.npz), or
    `images`/`labels`, or names given explicitly; or an images `.npy` with a labels `.npy`.
    """

    kind = "arrays"

    def __init__(
        self,
        path: str,
        *,
        labels_path: str | None = None,
        images_key: str | None = None,
        labels_key: str | None = None,
        class_names: list[str] | None = None,
    ) -> None:
        self.path = path
        self.labels_path = labels_path
        self.images_key = images_key
        self.labels_key = labels_key
        self.class_names = class_names

    def discover(self) -> Discovery:
        if not fileio.exists(self.path):
            raise SourceError(f"array file {self.path!r} does not exist")
        pairs = self._pairs()
        items: list[Item] = []
        max_label = -1
        name = os.path.basename(self.path)
        for split, images_key, labels, shape in pairs:
            if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
                raise SourceError(
                    f"{name}: labels for {images_key!r} must be a 1-D integer array, got {labels.dtype} {labels.shape}"
                )
            if len(labels) != shape[0]:
                raise SourceError(f"{name}: {shape[0]} images in {images_key!r} but {len(labels)} labels")
            if len(labels) and labels.min() < 0:
                raise SourceError(f"{name}: labels for {images_key!r} must be >= 0, found {labels.min()}")
            per_image = int(np.prod(shape[1:]))
            max_label = max(max_label, int(labels.max()) if len(labels) else -1)
            width = len(str(max(shape[0] - 1, 0)))
            items.extend(
                Item(
                    f"{name}:{images_key}[{i:0{width}d}]",
                    int(labels[i]),
                    split,
                    per_image,
                    (images_key, i),
                )
                for i in range(shape[0])
            )
        if self.class_names is not None:
            if len(self.class_names) <= max_label:
                raise SourceError(f"{len(self.class_names)} class names given but labels go up to {max_label}")
            class_names = list(self.class_names)
        else:
            class_names = [str(i) for i in range(max_label + 1)]
        presplit = any(split is not None for split, *_ in pairs)
        return Discovery(self.kind, self.path, items, self.path, class_names, [], presplit)

    def _pairs(self) -> list[tuple[str | None, str, np.ndarray, tuple[int, ...]]]:
        """(split, images key, labels, images shape) for each image array in the input."""
        name = os.path.basename(self.path)
        if self.path.endswith(".npy"):
            if not self.labels_path:
                raise SourceError(f"{name} holds images only; pass the labels .npy too (labels_path=, --labels-file)")
            images = load_array(self.path, "")
            labels = _np_load(self.labels_path)
            _check_image_array(images, name)
            return [(None, "", labels, images.shape)]
        archive = _np_load(self.path)
        keys = sorted(archive.files)
        if self.images_key or self.labels_key:
            chosen = [(None, self.images_key or "images", self.labels_key or "labels")]
        elif any(k.startswith("x_") for k in keys):
            chosen = [(k[2:], k, "y_" + k[2:]) for k in keys if k.startswith("x_")]
        else:
            chosen = [(None, "images", "labels")]
        pairs: list[tuple[str | None, str, np.ndarray, tuple[int, ...]]] = []
        for split, images_key, labels_key in chosen:
            for key in (images_key, labels_key):
                if key not in keys:
                    raise SourceError(
                        f"array {key!r} not in {name}, which holds {keys}; "
                        "pass images_key=/labels_key= (--images-key/--labels-key)"
                    )
            images = archive[images_key]
            _check_image_array(images, f"{name}:{images_key}")
            pairs.append((split, images_key, archive[labels_key], images.shape))
        return pairs


def _check_image_array(images: np.ndarray, name: str) -> None:
    if images.dtype != np.uint8:
        raise SourceError(f"{name}: images must be uint8, got {images.dtype}; scale and cast first")
    if images.ndim not in (3, 4) or (images.ndim == 4 and images.shape[3] not in (1, 3)):
        raise SourceError(f"{name}: images must be (N,H,W) or (N,H,W,C) with C 1 or 3, got {images.shape}")


_ARRAY_CACHE: dict[tuple[str, str], Any] = {}


def _np_load(path: str, *, mmap: bool = False) -> Any:
    """np.load for local files (memory-mapped .npy when asked) and URL paths."""
    if fileio.is_remote(path):
        return np.load(io.BytesIO(fileio.read_bytes(path)))
    return np.load(path, mmap_mode="r" if mmap and path.endswith(".npy") else None)


def load_array(path: str, key: str) -> Any:
    """An image array, memory-mapped for .npy, loaded once per process for .npz."""
    cache_key = (path, key)
    if cache_key not in _ARRAY_CACHE:
        _ARRAY_CACHE.clear()
        array = _np_load(path, mmap=True)
        _ARRAY_CACHE[cache_key] = array if path.endswith(".npy") else array[key]
    return _ARRAY_CACHE[cache_key]
