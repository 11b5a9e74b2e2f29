"""Records' images as NumPy arrays, without TensorFlow: for IndexedRecords, previews and reports."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from shardfeed.errors import SourceError
from shardfeed.format import image_limits, schema


def to_rgb(image: np.ndarray) -> np.ndarray:
    """A [H, W, 1] or [H, W, 3] uint8 image as [H, W, 3] (gray repeated)."""
    return image if image.shape[-1] == 3 else np.repeat(image[..., :1], 3, axis=-1)


def with_dimensions(features: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """A parsed record (our keys) with image/height and image/width, read from the image's header
    when the writer stored none (other people's records often carry only the bytes)."""
    if schema.HEIGHT in features and schema.WIDTH in features:
        return features
    size = image_limits.header_size(features.get(schema.ENCODED, [b""])[0])
    if size is None:
        return features
    return {**features, schema.WIDTH: [size[0]], schema.HEIGHT: [size[1]]}


def decode_image(example: dict[str, Any], max_pixels: int | None = image_limits.DEFAULT_MAX_PIXELS) -> np.ndarray:
    """The image of a parsed example as uint8 [H, W, C] (JPEG via simplejpeg, else Pillow/raw).

    Raises:
        SourceError: the image declares more than `max_pixels` (a foreign shard may hold anything).
    """
    data = example[schema.ENCODED]
    fmt = example.get(schema.FORMAT, b"")
    if fmt == b"RAW":
        h, w, c = (int(example[k]) for k in (schema.HEIGHT, schema.WIDTH, schema.CHANNELS))
        return np.frombuffer(data, np.uint8).reshape(h, w, c)
    too_large = image_limits.refusal(data, max_pixels)
    if too_large:
        name = example.get(schema.FILENAME, b"").decode(errors="replace")
        raise SourceError(f"record {name or '(no file name)'}: {too_large}")
    if data[:3] == b"\xff\xd8\xff":
        import simplejpeg

        gray = int(example.get(schema.CHANNELS, 3)) == 1
        return np.asarray(simplejpeg.decode_jpeg(data, "GRAY" if gray else "RGB"))
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        array = np.asarray(im)
    return array[..., None] if array.ndim == 2 else array
