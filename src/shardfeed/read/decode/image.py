"""Decode images: where the JPEG is decoded (and only what is needed), and the windows a target
shares with its image (the crop window, the letterbox's frame).

Records are parsed first (read/decode/parsing.py). Each image is then decoded on its own (mapped per record and
fused with the batching by tf.data: a batch-wide decode with TensorFlow's ops in `map_fn` measured
0.1-0.2 ms more CPU per image; all-JPEG folders are decoded a batch at a time by a compiled op
instead, read/decode/mapped.py and read/native/batch_decode.py, with this module's windows) by format,
sniffed from its bytes: JPEG with `decode_and_crop_jpeg` (training: a random-resized crop;
evaluation: the centre square), PNG/GIF/BMP fully then cropped, raw pixels reshaped from
the record's height/width/channels, float pixel lists (the MNIST/Estimator recipe) likewise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from shardfeed.format.schema import Schema
from shardfeed.lazy import tensorflow
from shardfeed.read.augment import Augment, flip_seed, flipped, photometric, random_crop_window
from shardfeed.read.geometry import DCT_SCALES, dct_index, letterbox_frame, scaled_window, tf_ops
from shardfeed.read.native import fused_resize
from shardfeed.read.options import DecodeOptions

SCALE_SHARE = 0.1  # images that must be able to decode scaled before the per-image choice is built


@dataclass(frozen=True)
class Preprocess:
    """Everything that decides the pixels of a batch: output size, augmentation, decode config."""

    image_size: tuple[int, int]
    augment: Augment | None  # None: evaluation preprocessing (the centre crop)
    config: DecodeOptions = field(default_factory=DecodeOptions)
    whole_image: bool = False  # evaluation reads the whole image, not the centre crop (`Targets.whole_image`)
    exact: bool = False  # the window cut at full resolution, as masks and boxes are placed (`Targets.exact`)
    training: bool = False  # training batches (crowd regions left out unless config.crowd_targets)


def stored_dimensions(parsed: dict[str, Any], schema: Schema) -> tuple[Any, Any, Any]:
    """A record's stored height, width and channels (int64 scalars; 0 where not parsed)."""
    tf = tensorflow()
    zero = tf.constant(0, tf.int64)
    height, width, channels = (
        parsed[k] if k else zero for k in (schema.height_key, schema.width_key, schema.channels_key)
    )
    return height, width, channels


def decode_one(
    data: Any, height: Any, width: Any, channels: Any, seed: Any, *, schema: Schema, options: Preprocess
) -> Any:
    """One record's image, cropped, resized to `image_size`, augmented, in the output dtype."""
    tf = tensorflow()
    if schema.pixels_as_floats:
        image = _float_pixels(data, height, width, options.config.channels)
        window = crop_window(tf.shape(image), seed, options)
        image = tf.image.crop_to_bounding_box(image, window[0], window[1], window[2], window[3])
    elif schema.all_jpeg:
        image = _jpeg(data, seed, options, may_scale(schema, options))
    else:
        image = tf.cond(
            tf.equal(tf.strings.substr(data, 0, 3), b"\xff\xd8\xff"),
            lambda: _jpeg(data, seed, options, may_scale(schema, options)),
            lambda: _other(data, height, width, channels, seed, options),
        )
    augment = options.augment
    if image.dtype == tf.uint8 and fusable(options):  # not pixels stored as floats
        flip = flipped(seed) if augment is not None and augment.flip else tf.constant(False)
        fused = fused_resize.resize_flip(image, options.image_size, flip)
        if fused is not None:
            return tf.ensure_shape(fused, [*options.image_size, options.config.channels])
    if letterboxed(options):
        frame = tf.stack(letterbox_frame(tf.shape(image)[0], tf.shape(image)[1], options.image_size, tf_ops()))
        image = tf.image.resize(image, frame[:2], method="bilinear", antialias=options.config.antialias)
        image = tf.image.pad_to_bounding_box(image, frame[2], frame[3], *options.image_size)
    else:
        image = tf.image.resize(image, options.image_size, method="bilinear", antialias=options.config.antialias)
    image.set_shape([*options.image_size, options.config.channels])
    uint8 = options.config.dtype == "uint8"
    if _photometric(augment):
        image = photometric(image, seed, augment)
        return tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8) if uint8 else image
    # Flip alone: a bilinear resize of 0..255 pixels stays in 0..255 (no clip needed), and the
    # flip commutes with rounding, so it runs on the 4x smaller uint8 image, with the seed
    # photometric's flip uses (`flip_seed`): the same pixels, less work.
    image = tf.cast(tf.round(image), tf.uint8) if uint8 else tf.clip_by_value(image, 0.0, 255.0)
    if augment is not None and augment.flip:
        image = tf.image.stateless_random_flip_left_right(image, flip_seed(seed))
    return image


def _photometric(augment: Augment | None) -> TypeGuard[Augment]:
    """Whether the augmentation goes beyond the crop and flip (float32 steps after the resize)."""
    return augment is not None and bool(augment.rotate or augment.translate or augment.color_jitter or augment.noise)


def fusable(options: Preprocess) -> bool:
    """Whether the resize, rounding and flip can be the fused op's (read/native/fused_resize.py): its
    pixels are those of the uint8 path below, without antialiasing, letterbox or photometric steps."""
    config = options.config
    return (
        config.fused_resize
        and config.dtype == "uint8"
        and not config.antialias
        and not letterboxed(options)
        and not _photometric(options.augment)
    )


def letterboxed(options: Preprocess) -> bool:
    """Whether the image is letterboxed: asked for, and not randomly cropped."""
    augment = options.augment
    return options.config.letterbox and (augment is None or not augment.crop)


def crop_window(shape: Any, seed: Any, options: Preprocess) -> Any:
    """The crop to decode: random-resized when augmenting, else the centre square."""
    tf = tensorflow()
    if options.augment is not None and options.augment.crop:
        return random_crop_window(shape, seed, options.augment)
    h, w = shape[0], shape[1]
    if options.whole_image or options.config.letterbox:  # detection's evaluation: every object stays in view
        return tf.stack([0, 0, h, w])
    side = tf.maximum(1, tf.cast(tf.cast(tf.minimum(h, w), tf.float32) * options.config.crop_fraction, tf.int32))
    return tf.stack([(h - side) // 2, (w - side) // 2, side, side])


def may_scale(schema: Schema, options: Preprocess) -> bool:
    """Whether to build the per-image DCT-scale choice: only when enough images can pay for it.

    The choice (a `switch_case` around the decode) costs ~8% of a 200-500 px photo's decode
    (10-round A/B: 1.507 vs 1.385 ms CPU per image), and saves half or more of the decode of an
    image whose crop holds the output twice. So it is built when at least `SCALE_SHARE` of the
    images have a shorter side of twice the output or more (the manifest's side histogram), else
    when the longest side allows it (older manifests), or when nothing is known (foreign files).
    """
    if not options.config.dct_scaling or options.exact:  # cut at full resolution
        return False
    need = 2 * min(options.image_size)
    if schema.short_sides is not None:
        total = sum(n for _, n in schema.short_sides)
        large = sum(n for side, n in schema.short_sides if side >= need)
        return total > 0 and large >= SCALE_SHARE * total
    return schema.max_side is None or schema.max_side >= need


def _jpeg(data: Any, seed: Any, options: Preprocess, scale: bool) -> Any:
    """Decodes only the crop window (libjpeg skips the rest), at 1/2, 1/4 or 1/8 scale when the
    window holds the output that many times over (`DecodeOptions.dct_scaling`)."""
    tf = tensorflow()
    shape = tf.io.extract_jpeg_shape(data)
    window = crop_window(shape, seed, options)
    if not scale:
        return tf.io.decode_and_crop_jpeg(
            data, window, channels=options.config.channels, dct_method=options.config.dct_method
        )

    def crop(ratio: int) -> Any:
        return window if ratio == 1 else tf.stack(scaled_window(window, shape, ratio, tf_ops()))

    index = dct_index(window[2], window[3], options.image_size, tf_ops())
    return window_at_scale(data, index, crop, options.config)


def window_at_scale(data: Any, index: Any, crop: Callable[[int], Any], config: DecodeOptions) -> Any:
    """`decode_and_crop_jpeg` of the window `crop(ratio)` at the ratio `DCT_SCALES[index]` (a
    `switch_case` over the four: the op takes its ratio as an attribute, not a tensor)."""
    tf = tensorflow()

    def decode(ratio: int) -> Callable[[], Any]:
        return lambda: tf.io.decode_and_crop_jpeg(
            data, crop(ratio), channels=config.channels, ratio=ratio, dct_method=config.dct_method
        )

    return tf.switch_case(index, [decode(ratio) for ratio in DCT_SCALES])


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
    window = crop_window(tf.shape(image), seed, options)
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
