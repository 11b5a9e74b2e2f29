"""Parse record batches and decode images: where the JPEG is decoded (and only what is needed).

Records are parsed a batch at a time (`tf.io.parse_example`), then each image is decoded by
format, sniffed from its bytes: JPEG with `decode_and_crop_jpeg` (training: a random-resized
crop; evaluation: the centre square), PNG/GIF/BMP fully then cropped, raw pixels reshaped from
the record's height/width/channels, float pixel lists (the MNIST/Estimator recipe) likewise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardfeed.format.schema import Schema
from shardfeed.lazy import tensorflow
from shardfeed.read.augment import Augment, photometric, random_crop_window
from shardfeed.read.options import DecodeConfig


@dataclass(frozen=True)
class Preprocess:
    """Everything that decides the pixels of a batch: output size, augmentation, decode config."""

    image_size: tuple[int, int]
    augment: Augment | None  # None: evaluation preprocessing (the centre crop)
    config: DecodeConfig = field(default_factory=DecodeConfig)


def feature_spec(schema: Schema) -> dict[str, Any]:
    tf = tensorflow()
    spec: dict[str, Any] = {}
    if schema.pixels_as_floats:
        spec[schema.image_key] = tf.io.VarLenFeature(tf.float32)
    else:
        spec[schema.image_key] = tf.io.FixedLenFeature([], tf.string)
    for key in (schema.height_key, schema.width_key, schema.channels_key):
        if key:
            spec[key] = tf.io.FixedLenFeature([], tf.int64, default_value=0)
    if schema.label_key:
        spec[schema.label_key] = tf.io.FixedLenFeature([], tf.int64)
    if schema.filename_key:
        spec[schema.filename_key] = tf.io.FixedLenFeature([], tf.string, default_value="")
    return spec


def batch_decoder(schema: Schema, options: Preprocess) -> Callable[..., Any]:
    """A function (serialized records [B], seeds [B, 2]) -> (images [B, H, W, C], labels [B])."""
    tf = tensorflow()
    spec = feature_spec(schema)
    height, width = options.image_size
    out_spec = tf.TensorSpec(
        [height, width, options.config.channels], tf.uint8 if options.config.dtype == "uint8" else tf.float32
    )

    @tf.autograph.experimental.do_not_convert  # explicit tf.cond throughout; nothing to convert
    def decode_batch(serialized: Any, seeds: Any) -> Any:
        parsed = tf.io.parse_example(serialized, spec)
        images_in = parsed[schema.image_key]
        if schema.pixels_as_floats:
            images_in = tf.sparse.to_dense(images_in)
        zeros = tf.zeros_like(seeds[:, 0])
        dims = [parsed[k] if k else zeros for k in (schema.height_key, schema.width_key, schema.channels_key)]
        images = tf.map_fn(
            lambda args: decode_one(*args, schema=schema, options=options),
            (images_in, *dims, seeds),
            fn_output_signature=out_spec,
            parallel_iterations=16,
        )
        out: tuple[Any, ...] = (images,)
        if schema.label_key is not None:
            out += (parsed[schema.label_key] - schema.label_offset,)
        if schema.filename_key is not None:
            out += (parsed[schema.filename_key],)
        return out if len(out) > 1 else images

    return decode_batch


def decode_one(
    data: Any, height: Any, width: Any, channels: Any, seed: Any, *, schema: Schema, options: Preprocess
) -> Any:
    """One record's image, cropped, resized to `image_size`, augmented, in the output dtype."""
    tf = tensorflow()
    if schema.pixels_as_floats:
        image = _float_pixels(data, height, width, options.config.channels)
        window = _window(tf.shape(image), seed, options)
        image = tf.image.crop_to_bounding_box(image, window[0], window[1], window[2], window[3])
    else:
        image = tf.cond(
            tf.equal(tf.strings.substr(data, 0, 3), b"\xff\xd8\xff"),
            lambda: _jpeg(data, seed, options),
            lambda: _other(data, height, width, channels, seed, options),
        )
    image = tf.image.resize(image, options.image_size, method="bilinear", antialias=options.config.antialias)
    if options.augment is not None:
        image = photometric(image, tf.random.experimental.stateless_fold_in(seed, 1), options.augment)
    if options.config.dtype == "uint8":
        return tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)
    return image


def _window(shape: Any, seed: Any, options: Preprocess) -> Any:
    """The crop to decode: random-resized when augmenting, else the centre square."""
    tf = tensorflow()
    if options.augment is not None and options.augment.crop:
        return random_crop_window(shape, seed, options.augment)
    h, w = shape[0], shape[1]
    side = tf.maximum(1, tf.cast(tf.cast(tf.minimum(h, w), tf.float32) * options.config.crop_fraction, tf.int32))
    return tf.stack([(h - side) // 2, (w - side) // 2, side, side])


def _jpeg(data: Any, seed: Any, options: Preprocess) -> Any:
    """Decodes only the crop window (libjpeg skips the rest)."""
    tf = tensorflow()
    window = _window(tf.io.extract_jpeg_shape(data), seed, options)
    return tf.io.decode_and_crop_jpeg(
        data, window, channels=options.config.channels, dct_method=options.config.dct_method
    )


def _other(data: Any, height: Any, width: Any, channels: Any, seed: Any, options: Preprocess) -> Any:
    """PNG/GIF/BMP decoded fully, or raw pixels reshaped; then the crop window."""
    tf = tensorflow()
    is_raw = tf.logical_and(height > 0, tf.equal(tf.strings.length(data), tf.cast(height * width * channels, tf.int32)))

    def raw() -> Any:
        pixels = tf.reshape(tf.io.decode_raw(data, tf.uint8), tf.stack([height, width, channels]))
        return _to_channels(pixels, options.config.channels)

    def encoded() -> Any:
        return tf.io.decode_image(data, channels=options.config.channels, expand_animations=False)

    image = tf.cond(is_raw, raw, encoded)
    window = _window(tf.shape(image), seed, options)
    return tf.image.crop_to_bounding_box(image, window[0], window[1], window[2], window[3])


def _to_channels(image: Any, channels: int) -> Any:
    tf = tensorflow()
    have = tf.shape(image)[-1]
    if channels == 3:
        return tf.cond(tf.equal(have, 1), lambda: tf.tile(image[..., :1], [1, 1, 3]), lambda: image[..., :3])
    return tf.cond(
        tf.equal(have, 3), lambda: tf.cast(tf.image.rgb_to_grayscale(image), tf.uint8), lambda: image[..., :1]
    )


def _float_pixels(values: Any, height: Any, width: Any, channels: int) -> Any:
    """Float pixel lists (0..1 or 0..255) as a [H, W, C] float image in 0..255."""
    tf = tensorflow()
    n = tf.size(values, out_type=tf.int64)
    h = tf.where(height > 0, height, tf.cast(tf.sqrt(tf.cast(n, tf.float32)), tf.int64))
    w = tf.where(width > 0, width, n // tf.maximum(h, 1))
    c = n // tf.maximum(h * w, 1)
    image = tf.reshape(values, tf.stack([h, w, c]))
    image = tf.where(tf.reduce_max(image) <= 1.0, image * 255.0, image)
    if channels == 3:
        return tf.cond(tf.equal(c, 1), lambda: tf.tile(image[..., :1], [1, 1, 3]), lambda: image[..., :3])
    return tf.cond(tf.equal(c, 3), lambda: tf.image.rgb_to_grayscale(image), lambda: image)
