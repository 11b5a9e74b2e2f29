"""Image bytes on the write path: what an input image is, whether it is usable, and the bytes
that are stored for it.

    prepare.py   format detection, validation, normalisation, write-time resize/crop/encode
                 (`ImageOptions`, `prepare_file_image`, `check_stored_image`)
    transforms.py the write-time resize and crop (`Geometry`), for images and masks alike
    masks.py     segmentation masks: checked against their image, moved with its pixels
    jpeg.py      JPEG: EXIF orientation off the header, the decode check, DCT-scaled decoding
    png.py       PNG: every row the header promises is there (as TensorFlow's decoder requires)
"""

from __future__ import annotations

from shardfeed.write.images.prepare import (
    ARRAY_ENCODINGS,
    CHECKS,
    IMAGE_FORMATS,
    BadImageError,
    ImageOptions,
    PreparedImage,
    check_stored_image,
    encode,
    prepare_array_image,
    prepare_file_image,
    source_frame,
)
from shardfeed.write.images.transforms import UPSCALED

__all__ = [
    "ARRAY_ENCODINGS",
    "CHECKS",
    "IMAGE_FORMATS",
    "UPSCALED",
    "BadImageError",
    "ImageOptions",
    "PreparedImage",
    "check_stored_image",
    "encode",
    "prepare_array_image",
    "prepare_file_image",
    "source_frame",
]
