"""Image bytes: format detection, validation, normalisation, and write-time resize/crop/encode.

Everything here works on bytes or arrays and returns bytes; no TensorFlow. JPEG files that
TensorFlow decodes as they are keep their original bytes; anything it cannot (CMYK, EXIF-rotated,
16-bit, palette, alpha, GIF/BMP/WebP/TIFF, a PNG named .jpg) is re-encoded upright as RGB or
grayscale, and the reason is returned so the manifest can count it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import simplejpeg
from PIL import Image, ImageOps

from shardfeed.errors import OptionError
from shardfeed.format import image_limits
from shardfeed.format.image_format import sniff_format
from shardfeed.write import perceptual_hash
from shardfeed.write.images import jpeg, png
from shardfeed.write.images.transforms import UPSCALED, Geometry

_JPEG_EXTENSIONS = (".jpg", ".jpeg", ".jpe", ".jfif")
IMAGE_FORMATS = ("keep", "jpeg", "png")
ARRAY_ENCODINGS = ("png", "raw")
CHECKS = ("decode", "header")


class BadImageError(ValueError):
    """The bytes are not a usable image; the message is the reason for the report."""


@dataclass(frozen=True)
class ImageOptions:
    """How images are checked and transformed at write time.

    Attributes:
        resize: scale so the shorter side is this many pixels (None: no resize).
        max_size: shrink so the longer side is at most this many pixels (None: no limit).
        center_crop: crop a centred square of this size (after resizing; upscales if smaller).
        image_format: 'keep' the source format, or re-encode everything as 'jpeg' or 'png'.
        quality: JPEG quality for re-encoded images.
        check: 'decode' decodes every image (at 1/8 scale for JPEG) to prove it is readable;
            'header' checks headers and JPEG end markers only (faster, misses mid-file damage).
        array_encoding: how NumPy images are stored: 'png' (lossless, compact) or 'raw' bytes.
        max_pixels: larger images (width x height, from the header) are reported, never decoded.
    """

    resize: int | None = None
    max_size: int | None = None
    center_crop: int | None = None
    image_format: str = "keep"
    quality: int = 95
    check: str = "decode"
    array_encoding: str = "png"
    max_pixels: int | None = image_limits.DEFAULT_MAX_PIXELS

    def __post_init__(self) -> None:
        for name in ("resize", "max_size", "center_crop", "max_pixels"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise OptionError(f"{name} must be a positive integer number of pixels, got {value!r}")
        if self.resize is not None and self.max_size is not None:
            raise OptionError("resize (shorter side) and max_size (longer side) exclude each other")
        _check_choice("image_format", self.image_format, IMAGE_FORMATS)
        _check_choice("check", self.check, CHECKS)
        _check_choice("array_encoding", self.array_encoding, ARRAY_ENCODINGS)
        if not 1 <= self.quality <= 100:
            raise OptionError(f"quality must be in 1..100, got {self.quality}")

    @property
    def geometry(self) -> Geometry:
        """The resize and crop asked for (write/images/transforms.py)."""
        return Geometry(self.resize, self.max_size, self.center_crop)

    @property
    def transforms(self) -> bool:
        """True when every image is decoded and re-encoded."""
        return bool(self.resize or self.max_size or self.center_crop or self.image_format != "keep")


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise OptionError(f"{name} must be one of {list(allowed)}, got {value!r}")


@dataclass(frozen=True)
class PreparedImage:
    """Image bytes ready for a record, with what a reader needs to know about them."""

    data: bytes
    format: str  # 'JPEG', 'PNG' or 'RAW'
    height: int
    width: int
    channels: int
    conversion: str | None = None  # why the source bytes were re-encoded, if they were
    warning: str | None = None  # kept, but the decoder complained
    hash_source: perceptual_hash.Source | None = None  # what its perceptual hash is made from


def prepare_file_image(data: bytes, name: str, options: ImageOptions, *, phash: bool = False) -> PreparedImage:
    """Checks an image file's bytes and returns what goes into the record.

    Args:
        data: the file's content.
        name: the file name (its extension decides whether a non-JPEG named .jpg is converted).
        options: write-time checks and transforms.
        phash: also keep what the image's perceptual hash is made from (the decode check's
            pixels where there is one; with check='header' a JPEG or PNG kept as it is gets none).

    Raises:
        BadImageError: empty, not an image, truncated or corrupt.
    """
    if not data:
        raise BadImageError("empty file")
    fmt = sniff_format(data)
    if fmt is None:
        fmt = _identify_with_pillow(data)
    too_large = image_limits.refusal(data, options.max_pixels)
    if too_large:
        raise BadImageError(too_large)
    claims_jpeg = name.lower().endswith(_JPEG_EXTENSIONS)
    if not options.transforms:
        if fmt == "jpeg":
            kept = _keep_jpeg(data, options.check, phash)
            if kept is not None:
                return kept
        elif fmt == "png" and not claims_jpeg:
            kept = _keep_png(data, options.check, phash)
            if kept is not None:
                return kept
    return _transcode(data, fmt, claims_jpeg, options, phash)


def source_frame(data: bytes, stored: PreparedImage) -> tuple[tuple[int, int], int]:
    """The (width, height) of an image as its file holds it, and the EXIF orientation its stored
    form was turned by (1: none; only a re-encoded image is turned). What a mask or a box drawn
    on the file's pixels must go through to stay on the stored ones (masks.py, encode.py)."""
    if stored.data is data:  # kept as it came: the stored size is the file's, and it was not turned
        return (stored.width, stored.height), 1
    with Image.open(io.BytesIO(data)) as image:
        size, orientation = image.size, int(image.getexif().get(jpeg.EXIF_ORIENTATION, 1) or 1)
    return size, orientation if 2 <= orientation <= 8 else 1


def _identify_with_pillow(data: bytes) -> str:
    try:
        with Image.open(io.BytesIO(data)) as im:
            return str(im.format or "unknown").lower()
    except Exception as e:
        raise BadImageError(f"not an image: unrecognised content ({type(e).__name__})") from e


def _keep_jpeg(data: bytes, check: str, hashed: bool) -> PreparedImage | None:
    """The JPEG as it is, or None when it must be converted (CMYK, EXIF-rotated)."""
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError as e:
        raise BadImageError(f"corrupt JPEG header: {e}") from e
    if colorspace not in ("Gray", "YCbCr", "RGB") or jpeg.exif_orientation(data) != 1:
        return None
    channels = 1 if colorspace == "Gray" else 3
    warning, source = None, None
    if check == "decode":
        warning, pixels = _decode_check(data, colorspace, perceptual_hash.MIN_SIDE if hashed else 1)
        if hashed and colorspace == "RGB":  # (RGB files are decoded in RGB, the rest in gray)
            source = perceptual_hash.image_source(Image.fromarray(pixels, "RGB"), (height, width))
        elif hashed:
            source = perceptual_hash.source(pixels[:, :, 0], (height, width))
    elif data.rfind(b"\xff\xd9", -65536) < 0:
        raise BadImageError("truncated JPEG: no end-of-image marker")
    return PreparedImage(data, "JPEG", height, width, channels, warning=warning, hash_source=source)


def _decode_check(data: bytes, colorspace: str, min_side: int = 1) -> tuple[str | None, np.ndarray]:
    """`jpeg.decode_check`, its failure as a BadImageError."""
    try:
        return jpeg.decode_check(data, colorspace, min_side)
    except jpeg.DamagedJpegError as e:
        raise BadImageError(str(e)) from e


def check_stored_image(data: bytes, fmt: str, height: int, width: int, channels: int) -> str | None:
    """Proves a record's stored image decodes as TensorFlow would and matches its recorded shape.

    Returns:
        None if fine, else the problem (for `verify`).
    """
    try:
        if fmt == "RAW":
            if len(data) != height * width * channels:
                return f"raw image has {len(data)} bytes, expected {height}x{width}x{channels}"
            return None
        if fmt == "JPEG":
            h, w, colorspace, _ = simplejpeg.decode_jpeg_header(data)
            _decode_check(data, colorspace)
        else:
            with Image.open(io.BytesIO(data)) as im:
                (w, h), limit = im.size, image_limits.DEFAULT_MAX_PIXELS
                if not (problem := image_limits.too_large((w, h), limit)):
                    im.load()
            if problem := problem or (png.problem(data) if fmt == "PNG" else None):
                return problem
    except (BadImageError, ValueError, OSError) as e:
        return f"image does not decode: {e}"
    if (height or width) and (h, w) != (height, width):  # 0: the record does not say (other writers)
        return f"image is {h}x{w} but the record says {height}x{width}"
    return None


def _keep_png(data: bytes, check: str, hashed: bool) -> PreparedImage | None:
    """The PNG as it is if 8-bit gray or RGB, else None (16-bit, palette, alpha get converted)."""
    if len(data) < 33:
        raise BadImageError("truncated PNG: header cut short")
    width = int.from_bytes(data[16:20], "big")
    height = int.from_bytes(data[20:24], "big")
    bit_depth, color_type = data[24], data[25]
    if bit_depth != 8 or color_type not in (0, 2):
        return None
    source = None
    try:
        with Image.open(io.BytesIO(data)) as im:
            if check == "decode":
                im.load()
                source = perceptual_hash.image_source(im) if hashed else None
            else:
                im.verify()
    except Exception as e:
        raise BadImageError(f"corrupt PNG: {e}") from e
    if check == "decode" and (missing := png.problem(data)):  # Pillow pads missing rows
        raise BadImageError(missing)
    return PreparedImage(data, "PNG", height, width, 1 if color_type == 0 else 3, hash_source=source)


def _transcode(data: bytes, fmt: str, claims_jpeg: bool, options: ImageOptions, hashed: bool) -> PreparedImage:
    """Decodes, makes the image upright RGB/gray, applies transforms, re-encodes."""
    orientation = jpeg.exif_orientation(data) if fmt == "jpeg" else None
    im = _decode(data, fmt, orientation, options)
    reasons = _conversion_reasons(im, fmt, claims_jpeg, orientation)
    im = _normalise_mode(_upright(im, orientation))
    source = perceptual_hash.image_source(im) if hashed else None
    if options.geometry.upscales(im.size):
        reasons.append(UPSCALED)
    im = options.geometry.apply(im)
    if options.image_format != "keep":
        out_format = options.image_format
    else:
        out_format = "jpeg" if fmt in ("jpeg", "webp") or claims_jpeg else "png"
    encoded = encode(im, out_format, options.quality)
    reason = ", ".join(reasons) if reasons else None
    return PreparedImage(encoded, out_format.upper(), im.height, im.width, _channels(im), reason, hash_source=source)


def _decode(data: bytes, fmt: str, orientation: int | None, options: ImageOptions) -> Image.Image:
    """The decoded image; a JPEG at the DCT scale that keeps it at least the resize target.

    Upright JPEGs are decoded in C; Pillow decodes the rest (and keeps the EXIF that turns them).

    Raises:
        BadImageError: Pillow cannot decode it.
    """
    if orientation == 1:
        decoded = jpeg.decode_scaled(data, options.geometry.target_size)
        if decoded is not None:
            return decoded
    try:
        im: Image.Image = Image.open(io.BytesIO(data))
        target = options.geometry.target_size(im.size)
        if fmt == "jpeg" and target is not None:
            im.draft(im.mode if im.mode in ("L", "RGB") else "RGB", target)  # DCT-scaled decode
        im.load()
    except Exception as e:
        raise BadImageError(f"corrupt {fmt.upper()}: {e}") from e
    return im


def _upright(im: Image.Image, orientation: int | None) -> Image.Image:
    """The image turned upright by its EXIF orientation (`None`: not known from the header).

    A JPEG whose header says upright is returned as it is: Pillow's `exif_transpose` would copy
    it (~60 µs an image, 6% of a resize conversion's time per image).
    """
    return im if orientation == 1 else ImageOps.exif_transpose(im)


def _conversion_reasons(im: Image.Image, fmt: str, claims_jpeg: bool, orientation: int | None) -> list[str]:
    """Why TensorFlow could not use the source bytes as they are (empty: only transforms asked)."""
    reasons = []
    if fmt not in ("jpeg", "png"):
        reasons.append(f"{fmt} format")
    elif fmt != "jpeg" and claims_jpeg:
        reasons.append(f"{fmt} content named .jpg")
    if im.mode in ("CMYK", "YCCK"):
        reasons.append("CMYK JPEG")
    elif im.mode.startswith("I") or im.mode == "F":
        reasons.append("16-bit image")
    elif im.mode in ("P", "PA"):
        reasons.append("palette image")
    elif im.mode in ("RGBA", "LA", "La", "RGBa"):
        reasons.append("alpha channel")
    if orientation not in (None, 1):
        reasons.append("EXIF rotation")
    return reasons


def _normalise_mode(im: Image.Image) -> Image.Image:
    """8-bit 'L' or 'RGB'; transparency composited over white, 16-bit scaled down."""
    if im.mode in ("L", "RGB"):
        return im
    if im.mode == "1":
        return im.convert("L")
    if im.mode.startswith("I") or im.mode == "F":
        array = np.asarray(im)
        if array.dtype != np.uint8:
            peak = 65535.0 if array.max(initial=0) > 255 else 255.0
            array = np.clip(array.astype(np.float64) * (255.0 / peak), 0, 255).round()
        return Image.fromarray(array.astype(np.uint8), "L")
    if im.mode in ("P", "PA"):
        im = im.convert("RGBA")
    if im.mode in ("RGBA", "LA", "La", "RGBa"):
        rgba = im.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        flat = Image.alpha_composite(background, rgba)
        return flat.convert("L" if im.mode in ("LA", "La") else "RGB")
    return im.convert("RGB")


def _channels(im: Image.Image) -> int:
    return 1 if im.mode == "L" else 3


def encode(im: Image.Image, fmt: str, quality: int = 95) -> bytes:
    """Encodes an 'L' or 'RGB' image as 'jpeg' or 'png', deterministically."""
    buffer = io.BytesIO()
    if fmt == "jpeg":
        im.save(buffer, "JPEG", quality=quality)
    else:
        im.save(buffer, "PNG", compress_level=6)
    return buffer.getvalue()


def prepare_array_image(array: np.ndarray, options: ImageOptions, *, phash: bool = False) -> PreparedImage:
    """A NumPy uint8 image (H, W) or (H, W, C) with C in 1/3, stored losslessly.

    Raises:
        BadImageError: wrong dtype or shape.
    """
    if array.dtype != np.uint8:
        raise BadImageError(f"array image dtype must be uint8, got {array.dtype}")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] != 3):
        raise BadImageError(f"array image shape must be (H, W), (H, W, 1) or (H, W, 3), got {array.shape}")
    im = Image.fromarray(np.ascontiguousarray(array), "L" if array.ndim == 2 else "RGB")
    source = perceptual_hash.image_source(im) if phash else None
    if options.transforms:
        im = options.geometry.apply(im)
    channels = _channels(im)
    if options.image_format == "keep" and options.array_encoding == "raw":
        return PreparedImage(np.asarray(im).tobytes(), "RAW", im.height, im.width, channels, hash_source=source)
    fmt = "png" if options.image_format == "keep" else options.image_format
    return PreparedImage(
        encode(im, fmt, options.quality), fmt.upper(), im.height, im.width, channels, hash_source=source
    )
