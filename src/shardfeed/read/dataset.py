"""`load`: a `tf.data.Dataset` of (images, labels) batches from shards, ready for `model.fit`.

`load` resolves a `ReadPlan` (plan.py: the split opened once, the worker's share, every
option rule), hands it to one of two record pipelines, which take the same plan and yield the
same (serialized record, seed pair) elements for one epoch:

    shard_pipeline.py  whole shards per worker, interleaved, through a shuffle buffer (default)
    index_pipeline.py  records read by index: the global order, or even splits across workers

then adds the shared tail to each epoch on its own (what flows through each stage), so a batch never
mixes two epochs: with `repeat`, epoch after epoch of exactly `steps_per_epoch` batches each:

    (record, seed)     -> the record's features, parsed where it was read (a chunk at a time);
                          with a filter_fn, the serialized record, filtered, then parsed alone
    decoded images     -> decode/crop/augment per record (decoders.py, decode.py),
                          with the record's own seed pair, fused with the batching by tf.data;
                          the last partial batch of the epoch dropped when training (all-JPEG
                          folders: windows and flips per record, then each batch's JPEGs
                          decoded into it by one compiled op, batch_decode.py)
                       -> optional map hook; epochs repeated; known cardinality; prefetch(AUTOTUNE)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.lazy import tensorflow
from shardfeed.read import index_pipeline, options, shard_pipeline
from shardfeed.read import service as service_lib
from shardfeed.read.augment import Augment, resolve_augment
from shardfeed.read.decode.image import Preprocess
from shardfeed.read.decode.mapped import batch_decodable, batch_decoder, record_decoder, record_preparer
from shardfeed.read.decode.parsing import feature_spec, record_parser
from shardfeed.read.options import BATCH_SIZE, IMAGE_SIZE, DecodeOptions, ReadOptions, ServiceOptions
from shardfeed.read.plan import ReadPlan, resolve
from shardfeed.read.raising import raising
from shardfeed.read.shardset import DataPath
from shardfeed.read.targets import targets_of


def load(
    path: DataPath,
    *,
    split: str = "train",
    batch_size: int = BATCH_SIZE,
    image_size: int | tuple[int, int] = IMAGE_SIZE,
    training: bool | None = None,
    augment: bool | Augment | None = None,
    seed: int | None = None,
    repeat: bool = False,
    read: ReadOptions | None = None,
    decode: DecodeOptions | None = None,
    input_context: Any = None,
    service: str | ServiceOptions | None = None,
) -> Any:
    """A dataset of (images, labels) batches (images only for unlabeled data; (images, masks),
    masks [B, H, W] uint8 class ids cut and flipped with their images, for a segmentation folder;
    labels k-hot float32 [B, K] for a multi-label folder; for a detection folder, KerasHub's
    {"boxes": [B, N, 4] (xmin, ymin, xmax, ymax) in output pixels, or the
    `DecodeOptions.bounding_box_format` asked for, "labels": [B, N]}, padded with -1 to the
    batch's most objects (or `DecodeOptions.max_objects`), moved with the image's crop and flip;
    evaluation reads the whole image, stretched or, with `DecodeOptions(letterbox=True)`,
    letterboxed).

    Args:
        path: a converted folder (with manifest.json, or its `Manifest` already read), or other
            TFRecords: a file, glob or list.
        split: which split of a converted folder.
        batch_size: images per batch (with `input_context`: the global batch, divided per replica).
        image_size: output (height, width), or one int for squares.
        training: shuffle, augment and drop the last partial batch; default: split == 'train'.
        augment: True/None for the default `Augment()` when training, an `Augment`, or False.
        seed: makes shard order, shuffling and augmentation reproducible.
        repeat: repeat forever, epoch after epoch, each batched on its own (exactly
            `steps_per_epoch` batches; pass that to fit); default one pass per iteration.
            Without it, each pass over a global-order dataset reads the next epoch.
        read: which records, in what order (`ReadOptions`: shuffle, workers, resume point, ...).
        decode: how records become pixels (`DecodeOptions`: channels, dtype, crop, ...).
        input_context: a `tf.distribute.InputContext`; assigns this input pipeline its share
            (instead of `ReadOptions(num_workers, worker_index)`: one or the other).
        service: a tf.data service dispatcher, "grpc://HOST:PORT" (`shardfeed serve`), or
            `ServiceOptions` (address, processing mode, compression): the pipeline runs on its
            workers (read/service.py). The order is then not reproducible, and the dataset's
            cardinality is unknown.

    Raises:
        OptionError: bad option, an option that does not apply here, fewer shards than workers,
            resuming without a seed.
        ManifestError, SourceError: missing split (lists the splits), unknown feature (lists
            those present).
    """
    decode = decode or DecodeOptions()
    size = options.image_size(image_size)
    plan = resolve(
        path,
        split=split,
        read=read,
        training=training,
        seed=seed,
        batch_size=batch_size,
        repeat=repeat,
        input_context=input_context,
        service=service,
        decode=decode,
    )
    augmenting = resolve_augment(augment, plan.training)
    targets = targets_of(plan.schema.task)
    if targets.exact:
        _check_masks_follow(augmenting, decode)
    if not targets.images_only and decode.decoder == "dali":
        raise OptionError(f"decoder='dali' reads one class id per image; {targets.task} records come with decoder='tf'")
    if decode.decoder == "dali":
        from shardfeed.read.dali import dali_dataset

        ds = dali_dataset(plan, size, augmenting, decode)
        return raising(ds.map(on_images_and_labels(decode.map_fn)) if decode.map_fn is not None else ds)
    preprocess = _preprocess(plan, size, augmenting, decode)
    ds = _finished(_stream(plan, preprocess), plan)
    if plan.service is not None:
        ds = service_lib.distribute(ds, plan.service)
    return raising(ds.prefetch(tensorflow().data.AUTOTUNE))  # its errors: shardfeed's own (read/raising.py)


def _preprocess(plan: ReadPlan, size: tuple[int, int], augment: Augment | None, decode: DecodeOptions) -> Preprocess:
    """What decides the pixels; on a tf.data service without the fused resize op, which the
    service's workers (other processes) would not have loaded (the same pixels either way)."""
    if plan.service is not None:
        decode = dataclasses.replace(decode, fused_resize=False)
    targets = targets_of(plan.schema.task)
    return Preprocess(
        size, augment, decode, whole_image=targets.whole_image, exact=targets.exact, training=plan.training
    )


def _check_masks_follow(augment: Augment | None, decode: DecodeOptions) -> None:
    """Refuses what segmentation masks and boxes could not follow: they move with their image's
    crop and flip, not with a rotation or shift, nor through DALI (images only)."""
    if augment is not None and (augment.rotate or augment.translate):
        raise OptionError(
            "rotate= and translate= would move the images off their segmentation masks or boxes; those follow the "
            "crop and the flip: use those (Augment(rotate=0, translate=0))"
        )
    if decode.decoder == "dali":
        raise OptionError("decoder='dali' decodes images only; masks and boxes come with decoder='tf'")


def _stream(plan: ReadPlan, preprocess: Preprocess) -> Any:
    """The batches of one iteration: one epoch, or with `repeat` one epoch after another. Each
    epoch is batched on its own, so a batch never mixes two epochs and every epoch yields exactly
    `batches_per_pass()` batches (`repeat` or not): what `steps_per_epoch` counts, what Keras
    trains on in each of its epochs, and what an exact resume restarts from."""
    tf = tensorflow()
    by_batch = batch_decodable(plan.schema, preprocess)
    # built once, out here: they may hold a lookup table
    decoder = record_preparer(plan.schema, preprocess) if by_batch else record_decoder(plan.schema, preprocess)
    parse = record_parser(plan.schema)
    read_parse = parse if plan.read.filter_fn is None else None
    map_fn = on_images_and_labels(preprocess.config.map_fn) if preprocess.config.map_fn is not None else None

    def batches(ds: Any) -> Any:
        """One epoch's (record, seed pair) elements -> decoded batches."""
        filter_fn, deterministic = plan.read.filter_fn, plan.deterministic
        if filter_fn is not None:
            spec = feature_spec(plan.schema)
            ds = ds.filter(lambda record, _: filter_fn(tf.io.parse_single_example(record, spec)))
            # filter_fn sees the record's every feature; what passes is parsed as the readers parse
            ds = ds.map(lambda record, seed: (parse(tf.expand_dims(record, 0)), tf.expand_dims(seed, 0))).unbatch()
        ds = ds.map(decoder, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
        if targets_of(plan.schema.task).padded:  # a different number of objects per image: padded with -1
            ds = ds.padded_batch(
                plan.batch_size,
                padded_shapes=_padded_shapes(ds.element_spec, preprocess.config.max_objects),
                padding_values=_padding(ds.element_spec),
                drop_remainder=plan.drop_remainder,
            )
        else:
            ds = ds.batch(plan.batch_size, drop_remainder=plan.drop_remainder)
        if by_batch:  # the batch's JPEGs decoded into it by one op (read/native/batch_decode.py)
            ds = ds.map(batch_decoder(preprocess), num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
        if map_fn is not None:
            ds = ds.map(map_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
        return ds

    if plan.by_index:
        epoch = index_pipeline.IndexedEpochs(plan)
        batched = tf.autograph.experimental.do_not_convert(lambda e: batches(epoch(e, read_parse)))
        return index_pipeline.epoch_numbers(plan).flat_map(batched)
    ds = batches(shard_pipeline.shard_records(plan, read_parse))
    return ds.repeat() if plan.repeat else ds


def _padded_shapes(spec: Any, max_objects: int | None) -> Any:
    """A detection batch's shapes: boxes and labels to the batch's most objects, or to
    `max_objects` (a fixed shape: XLA and JAX compile once)."""
    tf = tensorflow()

    def shape(leaf: Any) -> Any:
        padded = leaf.shape.rank and leaf.shape[0] is None
        return tf.TensorShape([max_objects, *leaf.shape[1:]]) if padded else leaf.shape

    return tf.nest.map_structure(shape, spec)


def _padding(spec: Any) -> Any:
    """What pads a detection batch: -1 for the boxes and labels of absent objects (KerasHub's
    convention), 0 or "" for what is never padded (images, file names)."""
    tf = tensorflow()

    def value(leaf: Any) -> Any:
        if leaf.dtype == tf.string:
            return tf.constant("", tf.string)
        padded = leaf.shape.rank and leaf.shape[0] is None  # boxes [N, 4], labels [N]
        return tf.constant(-1 if padded else 0, leaf.dtype)

    return tf.nest.map_structure(value, spec)


def _finished(ds: Any, plan: ReadPlan) -> Any:
    """The batches with their count stated when known, and the plan's determinism."""
    tf = tensorflow()
    if plan.known_length:
        ds = ds.apply(tf.data.experimental.assert_cardinality(plan.batches_per_pass()))
    opts = tf.data.Options()
    opts.deterministic = plan.deterministic
    opts.experimental_optimization.map_parallelization = True
    return ds.with_options(opts)


def steps_per_epoch(
    path: DataPath,
    split: str = "train",
    batch_size: int = BATCH_SIZE,
    *,
    training: bool | None = None,
    read: ReadOptions | None = None,
    input_context: Any = None,
) -> int:
    """Batches in one epoch of `split` for this worker: what `load` with the same arguments yields.

    Both resolve the same `ReadPlan` (read/plan.py), so they cannot disagree: counted from the
    manifest (or the counted records of foreign files); like `load`, the last partial batch is
    dropped when training (default: split == 'train') unless `read` says otherwise.

    Raises:
        OptionError: as `load` would, and for `filter_fn` (the count is only known by reading).
    """
    plan = resolve(
        path,
        split=split,
        read=read,
        training=training,
        batch_size=batch_size,
        input_context=input_context,
        counting=True,
    )
    return plan.batches_per_pass()


def on_images_and_labels(map_fn: Callable[..., Any]) -> Callable[..., Any]:
    """`map_fn`, given (images, labels) (or the images alone, unlabeled) whatever else a batch
    carries: with `ReadOptions(with_filenames=True)` the file names pass through unchanged (the
    user's function was called with three arguments and failed inside TensorFlow)."""

    def applied(*element: Any) -> Any:
        head, rest = element[:2], element[2:]
        out = map_fn(*head)
        if not rest:
            return out
        return (*out, *rest) if isinstance(out, tuple) else (out, *rest)

    return applied
