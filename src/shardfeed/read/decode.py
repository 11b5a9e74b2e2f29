"""Parse records and decode images: where the JPEG is decoded (and only what is needed).

Each record is parsed on its own (`tf.io.parse_single_example`, mapped per record and fused with
the batching by tf.data: measured cheaper than a batch-wide `parse_example`), then its image is
decoded by format, sniffed from its bytes: JPEG with `decode_and_crop_jpeg` (training: a random-resized
crop; evaluation: the centre square), PNG/GIF/BMP fully then cropped, raw pixels reshaped from
the record's height/width/channels, float pixel lists (the MNIST/Estimator recipe) likewise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeGuard

from shardfeed.format.schema import BOX_KEYS, OBJECT_LABEL, TEXT, Schema
from shardfeed.lazy import tensorflow
from shardfeed.read import decode_resize, fused_resize
from shardfeed.read.augment import Augment, flip_seed, flipped, photometric
from shardfeed.read.preprocess import Preprocess, crop_window, letterbox_frame, letterboxed
from shardfeed.read.record_targets import decode_mask, k_hot, place_boxes

DCT_SCALES = (1, 2, 4, 8)  # the reduced sizes libjpeg decodes to directly
SCALE_SHARE = 0.1  # images that must be able to decode scaled before the per-image choice is built


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
    if schema.label_names:
        spec[TEXT] = tf.io.FixedLenFeature([], tf.string, default_value="")
    elif schema.label_key and schema.multi_hot:
        spec[schema.label_key] = tf.io.VarLenFeature(tf.int64)
    elif schema.label_key:
        spec[schema.label_key] = tf.io.FixedLenFeature([], tf.int64)
    if schema.filename_key:
        spec[schema.filename_key] = tf.io.FixedLenFeature([], tf.string, default_value="")
    if schema.mask_key:
        spec[schema.mask_key] = tf.io.FixedLenFeature([], tf.string)
    if schema.objects:
        spec |= {key: tf.io.VarLenFeature(tf.float32) for key in BOX_KEYS}
        spec[OBJECT_LABEL] = tf.io.VarLenFeature(tf.int64)
    return spec


def parsed_schema(schema: Schema) -> Schema:
    """The schema records are parsed with: for all-JPEG shards without the dimensions, which only
    serve raw-pixel records (fewer features make each parse cheaper)."""
    if schema.all_jpeg and not schema.objects:  # boxes are placed with the stored image's size
        return dataclasses.replace(schema, height_key=None, width_key=None, channels_key=None)
    return schema


def record_decoder(schema: Schema, options: Preprocess) -> Callable[..., Any]:
    """A function (serialized record, seed pair) -> (image [H, W, C], label[, filename]).

    Mapped per record (then batched): tf.data fuses the map into the batch and decodes records in
    parallel on its own threads. A batch-wide `parse_example` + `map_fn` measured 0.1-0.2 ms more
    CPU per image (docs/benchmarks/load.md): the while loop and its TensorArray cost more than parsing
    records one by one.
    """
    tf = tensorflow()
    schema = parsed_schema(schema)
    spec = feature_spec(schema)
    by_name = _name_table(schema.label_names) if schema.label_names else None

    @tf.autograph.experimental.do_not_convert  # explicit tf.cond throughout; nothing to convert
    def decode_record(serialized: Any, seed: Any) -> Any:
        parsed = tf.io.parse_single_example(serialized, spec)
        data = parsed[schema.image_key]
        if schema.pixels_as_floats:
            data = tf.sparse.to_dense(data)
        zero = tf.constant(0, tf.int64)
        height, width, channels = (
            parsed[k] if k else zero for k in (schema.height_key, schema.width_key, schema.channels_key)
        )
        out: tuple[Any, ...] = (decode_one(data, height, width, channels, seed, schema=schema, options=options),)
        if schema.mask_key is not None:
            out += (decode_mask(parsed[schema.mask_key], seed, options),)
        elif schema.objects:
            out += (place_boxes(parsed, height, width, seed, options, schema.label_offset),)
        elif schema.multi_hot and schema.label_key is not None:
            out += (k_hot(parsed[schema.label_key], schema.multi_hot, schema.label_offset),)
        elif by_name is not None:
            out += (by_name.lookup(parsed[TEXT]),)
        elif schema.label_key is not None:
            out += (parsed[schema.label_key] - schema.label_offset,)
        if schema.filename_key is not None:
            out += (parsed[schema.filename_key],)
        return out if len(out) > 1 else out[0]

    return decode_record


def _name_table(names: tuple[str, ...]) -> Any:
    """Class name -> id in `names` (-1 for a name not there: a record of no class of the map)."""
    tf = tensorflow()
    keys, ids = tf.constant(list(names)), tf.range(len(names), dtype=tf.int64)
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, ids), default_value=-1)


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
        scale = _may_scale(schema, options)
        whole = _jpeg_in_one_op(data, seed, options, scale)
        if whole is not None:
            return whole
        image = _jpeg(data, seed, options, scale)
    else:
        image = tf.cond(
            tf.equal(tf.strings.substr(data, 0, 3), b"\xff\xd8\xff"),
            lambda: _jpeg(data, seed, options, _may_scale(schema, options)),
            lambda: _other(data, height, width, channels, seed, options),
        )
    return _resized(image, seed, options)


def _resized(image: Any, seed: Any, options: Preprocess) -> Any:
    """The decoded window resized to `image_size` (or letterboxed), augmented, in the output dtype."""
    tf = tensorflow()
    augment = options.augment
    if image.dtype == tf.uint8 and _fusable(options):  # not pixels stored as floats
        fused = fused_resize.resize_flip(image, options.image_size, _flip(seed, options))
        if fused is not None:
            return tf.ensure_shape(fused, [*options.image_size, options.config.channels])
    if letterboxed(options):
        frame = letterbox_frame(tf.shape(image)[0], tf.shape(image)[1], options.image_size)
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


def _flip(seed: Any, options: Preprocess) -> Any:
    """Whether this record is mirrored (a bool tensor), as the compiled ops take it."""
    tf = tensorflow()
    augment = options.augment
    return flipped(seed) if augment is not None and augment.flip else tf.constant(False)


def _jpeg_in_one_op(data: Any, seed: Any, options: Preprocess, scale: bool) -> Any | None:
    """The JPEG's window decoded, resized and flipped by one compiled op (read/decode_resize.py),
    the pixels `_jpeg` then `_resized` give; a record libjpeg refuses takes that path instead.
    None where the op does not apply (`_fusable`) or cannot be had."""
    if not _fusable(options):
        return None
    tf = tensorflow()
    config = options.config
    shape = tf.io.extract_jpeg_shape(data)
    window = crop_window(shape, seed, options)
    ratio = tf.constant(1)
    if scale:
        height, width = options.image_size
        room = tf.minimum(window[2] // height, window[3] // width)  # times the window holds the output
        ratio = tf.gather(
            tf.constant(DCT_SCALES), tf.reduce_sum(tf.cast(room >= tf.constant(DCT_SCALES[1:]), tf.int32))
        )
    fast = config.dct_method == "INTEGER_FAST"
    one = decode_resize.decode_resize(
        data,
        _scaled(window, shape, ratio),
        ratio,
        options.image_size,
        _flip(seed, options),
        channels=config.channels,
        fast_dct=fast,
    )
    if one is None:
        return None
    image, ok = one
    image = tf.cond(ok, lambda: image, lambda: _resized(_jpeg(data, seed, options, scale), seed, options))
    return tf.ensure_shape(image, [*options.image_size, config.channels])


def _photometric(augment: Augment | None) -> TypeGuard[Augment]:
    """Whether the augmentation goes beyond the crop and flip (float32 steps after the resize)."""
    return augment is not None and bool(augment.rotate or augment.translate or augment.color_jitter or augment.noise)


def _fusable(options: Preprocess) -> bool:
    """Whether the resize, rounding and flip can be the fused op's (read/fused_resize.py): its
    pixels are those of the uint8 path below, without antialiasing, letterbox or photometric steps."""
    config = options.config
    return (
        config.fused_resize
        and config.dtype == "uint8"
        and not config.antialias
        and not letterboxed(options)
        and not _photometric(options.augment)
    )


def _may_scale(schema: Schema, options: Preprocess) -> bool:
    """Whether to build the per-image DCT-scale choice: only when enough images can pay for it.

    The choice (a `switch_case` around the decode) costs ~8% of a 200-500 px photo's decode
    (10-round A/B: 1.507 vs 1.385 ms CPU per image), and saves half or more of the decode of an
    image whose crop holds the output twice. So it is built when at least `SCALE_SHARE` of the
    images have a shorter side of twice the output or more (the manifest's side histogram), else
    when the longest side allows it (older manifests), or when nothing is known (foreign files).
    """
    if not options.config.dct_scaling or schema.mask_key is not None or schema.objects:  # cut at full resolution
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
    config = options.config

    def decode(ratio: int) -> Callable[[], Any]:
        return lambda: tf.io.decode_and_crop_jpeg(
            data, _scaled(window, shape, ratio), channels=config.channels, ratio=ratio, dct_method=config.dct_method
        )

    if not scale:
        return decode(1)()
    height, width = options.image_size
    room = tf.minimum(window[2] // height, window[3] // width)  # times the window holds the output
    index = tf.reduce_sum(tf.cast(room >= tf.constant(DCT_SCALES[1:]), tf.int32))
    return tf.switch_case(index, [decode(ratio) for ratio in DCT_SCALES])


def _scaled(window: Any, shape: Any, ratio: Any) -> Any:
    """The crop window in the coordinates of the image decoded at 1/`ratio` (an int or a tensor):
    the nearest scaled pixel edges (off by at most half a scaled pixel), inside the scaled image;
    the window itself at ratio 1."""
    tf = tensorflow()
    if isinstance(ratio, int) and ratio == 1:
        return window
    start = (window[:2] + ratio // 2) // ratio
    end = tf.minimum((window[:2] + window[2:] + ratio // 2) // ratio, (shape[:2] + ratio - 1) // ratio)
    return tf.concat([start, end - start], 0)


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
