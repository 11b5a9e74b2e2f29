"""What `load` maps over its records: each record's image and what follows it in the elements.

    record_decoder   (features, seed pair) -> (image, targets...): mapped per record, fused with
                     the batching by tf.data (read/decode/image.py decodes the image)
    record_preparer  (features, seed pair) -> (JPEG bytes, window, DCT ratio, flip, targets...),
    batch_decoder    then, once batched, the batch's JPEGs decoded, resized and flipped into the
                     batch by one compiled op (read/native/batch_decode.py): all-JPEG folders, the
                     default feeds; the same pixels as `record_decoder`'s
    record_targets   what follows the image: its targets (read/targets/), its file name

A mask or boxes are cut and flipped as their image is: the same crop window (drawn from the same
seed and the stored size), the same flip decision (read/targets/segmentation.py, detection.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shardfeed.format.schema import Schema
from shardfeed.lazy import tensorflow
from shardfeed.read.augment import flipped
from shardfeed.read.decode.image import (
    Preprocess,
    crop_window,
    decode_one,
    fusable,
    may_scale,
    stored_dimensions,
    window_at_scale,
)
from shardfeed.read.decode.parsing import parsed_schema
from shardfeed.read.geometry import DCT_SCALES, dct_index, scaled_window, tf_ops
from shardfeed.read.native import batch_decode, fused_resize
from shardfeed.read.targets import targets_of


def record_decoder(schema: Schema, options: Preprocess) -> Callable[..., Any]:
    """A function (one record's features from `record_parser`, seed pair) -> (image [H, W, C],
    label[, filename]).

    Mapped per record (then batched): tf.data fuses the map into the batch and decodes records in
    parallel on its own threads. A batch-wide decode with TensorFlow's ops in `map_fn` measured
    0.1-0.2 ms more CPU per image (docs/benchmarks/load.md): its while loop and TensorArray cost
    more than decoding records one by one (the compiled batch op below has neither).
    """
    tf = tensorflow()
    schema = parsed_schema(schema)
    targets = record_targets(schema, options)

    @tf.autograph.experimental.do_not_convert  # explicit tf.cond throughout; nothing to convert
    def decode_record(parsed: Any, seed: Any) -> Any:
        data = parsed[schema.image_key]
        height, width, channels = stored_dimensions(parsed, schema)
        image = decode_one(data, height, width, channels, seed, schema=schema, options=options)
        out = (image, *targets(parsed, seed))
        return out if len(out) > 1 else out[0]

    return decode_record


def record_targets(schema: Schema, options: Preprocess) -> Callable[[Any, Any], tuple[Any, ...]]:
    """A function (one record's features, seed pair) -> what follows its image in `load`'s
    elements: its targets, placed as its image (read/targets/: a mask, boxes, a k-hot vector or
    a label; none for unlabeled records), then its file name (if asked)."""
    schema = parsed_schema(schema)
    placed = targets_of(schema.task).tf_targets(schema, options)  # built once, here: it may hold a table
    filename_key = schema.filename_key

    def targets(parsed: Any, seed: Any) -> tuple[Any, ...]:
        out = placed(parsed, seed) if placed is not None else ()
        return (*out, parsed[filename_key]) if filename_key is not None else out

    return targets


def batch_decodable(schema: Schema, options: Preprocess) -> bool:
    """Whether `load` decodes this folder's JPEGs a batch at a time (`record_preparer`, then
    `batch_decoder`): every record a JPEG (the manifest says so), images without masks or boxes,
    the fused resize's feeds (uint8, no antialiasing, letterbox or photometric augmentation),
    `DecodeOptions.batch_decode`, and the op built and loaded."""
    schema = parsed_schema(schema)
    plain = schema.all_jpeg and not schema.pixels_as_floats and not options.exact
    return plain and options.config.batch_decode and fusable(options) and batch_decode.available()


def record_preparer(schema: Schema, options: Preprocess) -> Callable[[Any, Any], tuple[Any, ...]]:
    """A function (one record's features, seed pair) -> (JPEG bytes, window int32 [4] at the DCT
    ratio's scale, ratio int32, flip bool, targets...): what `record_decoder` would decode the
    record with, drawn the same way, for `batch_decoder` once batched."""
    tf = tensorflow()
    schema = parsed_schema(schema)
    targets = record_targets(schema, options)
    scale = may_scale(schema, options)
    flips = options.augment is not None and options.augment.flip

    @tf.autograph.experimental.do_not_convert
    def prepare(parsed: Any, seed: Any) -> tuple[Any, ...]:
        data = parsed[schema.image_key]
        shape = tf.io.extract_jpeg_shape(data)
        window = crop_window(shape, seed, options)
        index = dct_index(window[2], window[3], options.image_size, tf_ops())
        ratio = tf.gather(tf.constant(DCT_SCALES), index) if scale else tf.constant(1)
        flip = flipped(seed) if flips else tf.constant(False)
        return (data, tf.stack(scaled_window(window, shape, ratio, tf_ops())), ratio, flip, *targets(parsed, seed))

    return prepare


def batch_decoder(options: Preprocess) -> Callable[..., Any]:
    """A function (a batch of `record_preparer`'s outputs) -> (images uint8 [B, H, W, C],
    targets...), or the images alone: the elements `record_decoder` then `batch` give. A JPEG
    the op's libjpeg refuses or warns about (corrupt data, CMYK) is decoded by TensorFlow's
    ops instead, which decode it or fail as they would have."""
    tf = tensorflow()
    config = options.config

    def decode_as_before(data: Any, window: Any, ratio: Any, flip: Any) -> Any:
        index = tf.argmax(tf.cast(tf.equal(ratio, DCT_SCALES), tf.int32), output_type=tf.int32)
        image = window_at_scale(data, index, lambda _: window, config)  # the window is at its ratio already
        return fused_resize.resize_flip(image, options.image_size, flip)

    @tf.autograph.experimental.do_not_convert
    def decode_batch(data: Any, windows: Any, ratios: Any, flips: Any, *targets: Any) -> Any:
        images, ok = batch_decode.decode_resize(data, windows, ratios, flips, options)

        def redo() -> Any:
            missed = tf.where(tf.logical_not(ok))
            again = tf.map_fn(
                lambda i: decode_as_before(data[i], windows[i], ratios[i], flips[i]),
                tf.squeeze(missed, 1),
                fn_output_signature=tf.TensorSpec([*options.image_size, config.channels], tf.uint8),
            )
            return tf.tensor_scatter_nd_update(images, missed, again)

        images = tf.cond(tf.reduce_all(ok), lambda: images, redo)
        return (images, *targets) if targets else images

    return decode_batch
