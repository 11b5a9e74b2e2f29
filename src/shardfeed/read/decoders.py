"""What `load` maps over its records: each record's image and what follows it in the elements.

    record_decoder   (features, seed pair) -> (image, targets...): mapped per record, fused with
                     the batching by tf.data (read/decode.py decodes the image)
    record_preparer  (features, seed pair) -> (JPEG bytes, window, DCT ratio, flip, targets...),
    batch_decoder    then, once batched, the batch's JPEGs decoded, resized and flipped into the
                     batch by one compiled op (read/batch_decode.py): all-JPEG folders, the
                     default feeds; the same pixels as `record_decoder`'s
    record_targets   what follows the image: its mask, boxes, k-hot vector or label, file name

A mask or boxes are cut and flipped as their image is: the same crop window (drawn from the same
seed and the stored size), the same flip decision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shardfeed.format.schema import BOX_KEYS, IGNORED_LABEL, OBJECT_IS_CROWD, OBJECT_LABEL, TEXT, Schema
from shardfeed.lazy import tensorflow
from shardfeed.read import batch_decode, fused_resize
from shardfeed.read.augment import flip_seed, flipped
from shardfeed.read.boxes import box_columns
from shardfeed.read.decode import (
    DCT_SCALES,
    Preprocess,
    crop_window,
    dct_index,
    decode_one,
    fusable,
    letterbox_frame,
    letterboxed,
    may_scale,
    parsed_schema,
    scaled_window,
    window_at_scale,
)


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
    elements: its mask, boxes, k-hot vector or label (if any), then its file name (if asked)."""
    schema = parsed_schema(schema)
    by_name = _name_table(schema.label_names) if schema.label_names else None  # built once, here

    def targets(parsed: Any, seed: Any) -> tuple[Any, ...]:
        out: tuple[Any, ...] = ()
        if schema.mask_key is not None:
            out += (decode_mask(parsed[schema.mask_key], seed, options),)
        elif schema.objects:
            height, width, _ = stored_dimensions(parsed, schema)
            out += (place_boxes(parsed, height, width, seed, options, schema.label_offset),)
        elif schema.multi_hot and schema.label_key is not None:
            out += (k_hot(parsed[schema.label_key], schema.multi_hot, schema.label_offset),)
        elif by_name is not None:
            out += (by_name.lookup(parsed[TEXT]),)
        elif schema.label_key is not None:
            out += (parsed[schema.label_key] - schema.label_offset,)
        if schema.filename_key is not None:
            out += (parsed[schema.filename_key],)
        return out

    return targets


def stored_dimensions(parsed: dict[str, Any], schema: Schema) -> tuple[Any, Any, Any]:
    """A record's stored height, width and channels (int64 scalars; 0 where not parsed)."""
    tf = tensorflow()
    zero = tf.constant(0, tf.int64)
    height, width, channels = (
        parsed[k] if k else zero for k in (schema.height_key, schema.width_key, schema.channels_key)
    )
    return height, width, channels


def _name_table(names: tuple[str, ...]) -> Any:
    """Class name -> id in `names` (-1 for a name not there: a record of no class of the map)."""
    tf = tensorflow()
    keys, ids = tf.constant(list(names)), tf.range(len(names), dtype=tf.int64)
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, ids), default_value=-1)


def batch_decodable(schema: Schema, options: Preprocess) -> bool:
    """Whether `load` decodes this folder's JPEGs a batch at a time (`record_preparer`, then
    `batch_decoder`): every record a JPEG (the manifest says so), images without masks or boxes,
    the fused resize's feeds (uint8, no antialiasing, letterbox or photometric augmentation),
    `DecodeOptions.batch_decode`, and the op built and loaded."""
    schema = parsed_schema(schema)
    plain = schema.all_jpeg and not schema.pixels_as_floats and schema.mask_key is None and not schema.objects
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
        ratio = tf.gather(tf.constant(DCT_SCALES), dct_index(window, options.image_size)) if scale else tf.constant(1)
        flip = flipped(seed) if flips else tf.constant(False)
        return (data, scaled_window(window, shape, ratio), ratio, flip, *targets(parsed, seed))

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


def k_hot(ids: Any, classes: int, offset: int) -> Any:
    """A multi-label record's stored ids (a 1-D list) as a float32 [classes] vector of 0 and 1."""
    tf = tensorflow()
    return tf.minimum(tf.reduce_sum(tf.one_hot(ids - offset, classes, dtype=tf.float32), axis=0), 1.0)


def place_boxes(parsed: dict[str, Any], height: Any, width: Any, seed: Any, options: Preprocess, offset: int) -> Any:
    """A detection record's objects as its image is cut, resized (or letterboxed) and flipped:
    {"boxes": [N, 4] in `DecodeOptions.bounding_box_format` (default xyxy in pixels of the
    output), "labels": [N]}. The crop window is drawn from the image's seed and size, as the
    image's own; boxes are clipped to it, and those with less than `Augment.min_visible` of their
    area left inside are dropped, as are objects labelled below the label offset (adopt reports them)
    and, in training batches, crowd regions (`DecodeOptions.crowd_targets`)."""
    tf = tensorflow()
    columns = [parsed[key] for key in BOX_KEYS]
    labels = parsed[OBJECT_LABEL] - offset
    shape = tf.cast(tf.stack([height, width, 3]), tf.int32)
    window = tf.cast(crop_window(shape, seed, options), tf.float32)
    h, w = tf.cast(height, tf.float32), tf.cast(width, tf.float32)
    x0, y0 = (columns[0] * w - window[1]) / window[3], (columns[1] * h - window[0]) / window[2]
    x1, y1 = (columns[2] * w - window[1]) / window[3], (columns[3] * h - window[0]) / window[2]
    before = (x1 - x0) * (y1 - y0)
    x0, y0, x1, y1 = (tf.clip_by_value(v, 0.0, 1.0) for v in (x0, y0, x1, y1))
    after = (x1 - x0) * (y1 - y0)
    augment = options.augment
    least = augment.min_visible if augment is not None else 0.0
    keep = tf.logical_and(after > 0, after >= least * before)
    keep = tf.logical_and(keep, labels >= 0)  # an adopted object labelled below the offset is no class
    if options.training and not options.config.crowd_targets:  # crowd regions left out of training batches
        crowd = parsed[OBJECT_IS_CROWD]  # [N], or [] where a record has no crowd flags
        crowd = tf.concat([crowd, tf.zeros_like(labels)], 0)[: tf.size(labels)]
        keep = tf.logical_and(keep, tf.equal(crowd, 0))
    out_h, out_w = (float(v) for v in options.image_size)
    if letterboxed(options):  # fractions of the window -> pixels of the picture inside the padding
        frame = tf.cast(
            letterbox_frame(tf.cast(height, tf.int32), tf.cast(width, tf.int32), options.image_size), tf.float32
        )
        x0, x1 = x0 * frame[1] + frame[3], x1 * frame[1] + frame[3]
        y0, y1 = y0 * frame[0] + frame[2], y1 * frame[0] + frame[2]
    else:
        x0, y0, x1, y1 = x0 * out_w, y0 * out_h, x1 * out_w, y1 * out_h
    if augment is not None and augment.flip:  # the decision tf.image.stateless_random_flip_left_right takes
        mirrored = flipped(seed)
        x0, x1 = tf.where(mirrored, out_w - x1, x0), tf.where(mirrored, out_w - x0, x1)
    boxes = box_format(x0, y0, x1, y1, options.config.bounding_box_format, (out_h, out_w))
    boxes, labels = tf.boolean_mask(boxes, keep), tf.boolean_mask(labels, keep)
    if options.config.max_objects is not None:
        boxes, labels = boxes[: options.config.max_objects], labels[: options.config.max_objects]
    return {"boxes": boxes, "labels": labels}


def box_format(x0: Any, y0: Any, x1: Any, y1: Any, name: str, size: tuple[float, float]) -> Any:
    """Boxes given by their pixel edges, as [N, 4] in one of KerasHub's formats (options.BOX_FORMATS)."""
    return tensorflow().stack(box_columns(x0, y0, x1, y1, name, size), axis=-1)


def decode_mask(data: Any, seed: Any, options: Preprocess) -> Any:
    """A record's segmentation mask [H, W] (uint8 class ids), cut and flipped as its image is:
    the same crop window (drawn from the same seed; a mask has its image's size), resized with
    nearest-neighbour so that every pixel stays an id, flipped with the image's flip seed."""
    tf = tensorflow()
    mask = tf.io.decode_png(data, channels=1)
    window = crop_window(tf.shape(mask), seed, options)
    mask = tf.image.crop_to_bounding_box(mask, window[0], window[1], window[2], window[3])
    if letterboxed(options):  # the padding is 255: ignored, as Model Garden's ignore_label
        frame = letterbox_frame(tf.shape(mask)[0], tf.shape(mask)[1], options.image_size)
        mask = tf.image.resize(mask, frame[:2], method="nearest")
        bottom, right = options.image_size[0] - frame[0] - frame[2], options.image_size[1] - frame[1] - frame[3]
        mask = tf.pad(mask, [[frame[2], bottom], [frame[3], right], [0, 0]], constant_values=IGNORED_LABEL)
    else:
        mask = tf.image.resize(mask, options.image_size, method="nearest")
    if options.augment is not None and options.augment.flip:
        mask = tf.image.stateless_random_flip_left_right(mask, flip_seed(seed))
    mask.set_shape([*options.image_size, 1])
    return mask[..., 0]
