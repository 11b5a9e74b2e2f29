"""`load`: a `tf.data.Dataset` of (images, labels) batches from shards, ready for `model.fit`.

`load` validates its arguments, opens the split, and picks one of two record pipelines:

    shard_pipeline.py  whole shards per worker, interleaved, through a shuffle buffer (default)
    index_pipeline.py  records read by index: the global order, or even splits across workers

then adds the shared tail (what flows through each stage):

    (record, seed)     -> optional filter on parsed features
    decoded images     -> parse_single_example + decode/crop/augment per record (decode.py),
                          fused with the batching by tf.data
                       -> optional map hook; known cardinality; prefetch(AUTOTUNE)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from shardfeed.format.schema import FILENAME, Schema
from shardfeed.lazy import tensorflow
from shardfeed.read import index_pipeline, options, shard_pipeline, shardset
from shardfeed.read import service as service_lib
from shardfeed.read.augment import Augment, resolve_augment
from shardfeed.read.decode import Preprocess, feature_spec, record_decoder
from shardfeed.read.options import DecodeConfig, ReadConfig
from shardfeed.read.order import worker_positions


def load(
    path: str | Sequence[str],
    *,
    split: str = "train",
    batch_size: int = 64,
    image_size: int | tuple[int, int] = (224, 224),
    training: bool | None = None,
    augment: bool | Augment | None = None,
    seed: int | None = None,
    repeat: bool = False,
    read: ReadConfig | None = None,
    decode: DecodeConfig | None = None,
    input_context: Any = None,
    service: str | None = None,
) -> Any:
    """A dataset of (images, labels) batches (images only for unlabeled data).

    Args:
        path: a converted folder (with manifest.json), or other TFRecords: a file, glob or list.
        split: which split of a converted folder.
        batch_size: images per batch (with `input_context`: the global batch, divided per replica).
        image_size: output (height, width), or one int for squares.
        training: shuffle, augment and drop the last partial batch; default: split == 'train'.
        augment: True/None for the default `Augment()` when training, an `Augment`, or False.
        seed: makes shard order, shuffling and augmentation reproducible.
        repeat: repeat forever (then pass steps_per_epoch to fit); default one pass per iteration.
            Without it, each pass over a global-order dataset reads the next epoch.
        read: which records, in what order (`ReadConfig`: shuffle, workers, resume point, ...).
        decode: how records become pixels (`DecodeConfig`: channels, dtype, crop, ...).
        input_context: a `tf.distribute.InputContext`; assigns this input pipeline its share.
        service: a tf.data service dispatcher, "grpc://HOST:PORT" (`shardfeed serve`): the
            pipeline runs on its workers, in `read.service_mode` (read/service.py). The order is
            then not reproducible, and the dataset's cardinality is unknown.

    Raises:
        ValueError: bad option, missing split (lists the splits), unknown feature (lists those
            present), fewer shards than workers, resuming without a seed.
    """
    read, decode = read or ReadConfig(), decode or DecodeConfig()
    size = options.image_size(image_size)
    _check_batch_size(batch_size)
    training = _is_training(split, training)
    if (read.epoch or read.start_step) and seed is None:
        raise ValueError("epoch and start_step need a seed: the order must be the one the interrupted run saw")
    if service is not None:
        service_lib.check_options(service, read, decode)
    shards, schema = _open(path, split, read)
    if input_context is not None:
        read = dataclasses.replace(
            read, num_workers=input_context.num_input_pipelines, worker_index=input_context.input_pipeline_id
        )
        batch_size = input_context.get_per_replica_batch_size(batch_size)
    deterministic = read.keeps_order(training=training, seed=seed)
    if read.by_index:
        if not shardset.is_converted_folder(path):
            raise ValueError(
                "shuffle='global' and even splits read through the index files of a converted folder; "
                f"{path!r} has no manifest.json"
            )
        ds, num_records = index_pipeline.indexed_records(
            str(path), split, read, training=training, seed=seed, batch_size=batch_size, repeat=repeat
        )
    else:
        ds, num_records = shard_pipeline.shard_records(
            shards, read, training=training, seed=seed, deterministic=deterministic, repeat=repeat
        )
    preprocess = Preprocess(size, resolve_augment(augment, training), decode)
    known_length = not repeat and service is None
    ds = _batched(ds, num_records, schema, preprocess, read, batch_size, training, deterministic, known_length)
    if service is not None:
        ds = service_lib.distribute(ds, service, read.service_mode, compress=read.service_compress)
    return ds.prefetch(tensorflow().data.AUTOTUNE)


def _batched(
    ds: Any,
    num_records: int,
    schema: Schema,
    preprocess: Preprocess,
    read: ReadConfig,
    batch_size: int,
    training: bool,
    deterministic: bool,
    known_length: bool,
) -> Any:
    """The shared tail: (record, seed) elements -> decoded batches (of a known count when
    `known_length`: one pass, not repeated, not split across service workers)."""
    tf = tensorflow()
    filter_fn, map_fn = read.filter_fn, preprocess.config.map_fn
    if filter_fn is not None:
        spec = feature_spec(schema)
        ds = ds.filter(lambda record, _: filter_fn(tf.io.parse_single_example(record, spec)))
    drop_remainder = read.drops_remainder(training=training)
    ds = ds.map(record_decoder(schema, preprocess), num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    if map_fn is not None:
        ds = ds.map(map_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    # A resumed pass (start_step) is shorter than the full epochs that later passes read.
    if known_length and filter_fn is None and not read.skip_corrupt and not read.start_step:
        ds = ds.apply(tf.data.experimental.assert_cardinality(_batch_count(num_records, batch_size, drop_remainder)))
    opts = tf.data.Options()
    opts.deterministic = deterministic
    opts.experimental_optimization.map_parallelization = True
    return ds.with_options(opts)


def steps_per_epoch(
    path: str | Sequence[str],
    split: str = "train",
    batch_size: int = 64,
    *,
    training: bool | None = None,
    read: ReadConfig | None = None,
) -> int:
    """Batches in one epoch of `split` for this worker: what `load` with the same arguments yields.

    Counted from the manifest (or the counted records of foreign files). Like `load`, the last
    partial batch is dropped when training (default: split == 'train') unless `read` says otherwise.
    """
    read = read or ReadConfig()
    _check_batch_size(batch_size)
    shards, _ = _open(path, split, read)
    if read.by_index:
        records = len(worker_positions(shards.num_records, read.num_workers, read.worker_index, read.even or "drop"))
    else:
        if read.num_workers > 1 or read.worker_index:
            shards = shards.for_worker(read.num_workers, read.worker_index)
        records = shards.num_records
    return _batch_count(records, batch_size, read.drops_remainder(training=_is_training(split, training)))


def _open(path: str | Sequence[str], split: str, read: ReadConfig) -> tuple[shardset.ShardSet, Schema]:
    """The split's shards and schema (with the file-name feature when `read` asks for it)."""
    shards, schema = shardset.open_split(
        path, split, image_key=read.image_key, label_key=read.label_key, compression=read.compression
    )
    if read.with_filenames:
        schema = dataclasses.replace(schema, filename_key=FILENAME)
    return shards, schema


def _is_training(split: str, training: bool | None) -> bool:
    return (split == "train") if training is None else training


def _check_batch_size(batch_size: int) -> None:
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")


def _batch_count(records: int, batch_size: int, drop_remainder: bool) -> int:
    batches = records / batch_size
    return math.floor(batches) if drop_remainder else math.ceil(batches)
