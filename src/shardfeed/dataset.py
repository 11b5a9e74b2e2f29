"""`load`: a `tf.data.Dataset` of (images, labels) batches from shards, ready for `model.fit`.

Pipeline (what flows through each stage):
    shard file names   -> shuffled per epoch (training), whole shards per worker
    serialized records -> parallel interleave across shards, checked per shard (reader.py)
                       -> optional cache; shuffle buffer over the cheap serialized records
                       -> batch of serialized records
    decoded batches    -> parse_example per batch + per-image decode/crop/augment (decode.py)
                       -> user map hook, prefetch(AUTOTUNE)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shardfeed import reader
from shardfeed.augment import Augment
from shardfeed.decode import DTYPES, DecodeOptions, Schema, batch_decoder, feature_spec
from shardfeed.example_proto import parse_example
from shardfeed.indexed import EVEN_MODES, IndexedRecords, global_order, worker_positions
from shardfeed.lazy import tensorflow
from shardfeed.tfrecord import read_records

DEFAULT_SHUFFLE_BUFFER = 4096  # serialized records: ~4096 x 110 KB = 450 MB at ImageNet sizes
DCT_METHODS = ("INTEGER_FAST", "INTEGER_ACCURATE", "")


def load(
    path: str | Sequence[str],
    *,
    split: str = "train",
    batch_size: int = 64,
    image_size: int | tuple[int, int] = (224, 224),
    training: bool | None = None,
    augment: bool | Augment | None = None,
    shuffle_buffer: int | None = None,
    seed: int | None = None,
    deterministic: bool | None = None,
    repeat: bool = False,
    cache: bool | str = False,
    dtype: str = "uint8",
    channels: int = 3,
    drop_remainder: bool | None = None,
    crop_fraction: float = 0.875,
    dct_method: str = "INTEGER_ACCURATE",
    antialias: bool = False,
    input_context: Any = None,
    num_workers: int = 1,
    worker_index: int = 0,
    image_key: str | None = None,
    label_key: str | None = None,
    compression: str | None = None,
    filter: Callable[[dict[str, Any]], Any] | None = None,
    map: Callable[..., Any] | None = None,
    skip_corrupt: bool = False,
    with_filenames: bool = False,
    shuffle: str | None = None,
    epoch: int = 0,
    start_step: int = 0,
    even: str | None = None,
) -> Any:
    """A dataset of (images, labels) batches (images only for unlabeled data).

    Args:
        path: a converted folder (with manifest.json), or other TFRecords: a file, glob or list.
        split: which split of a converted folder.
        batch_size: images per batch (with `input_context`: the global batch, divided per replica).
        image_size: output (height, width), or one int for squares.
        training: shuffle, augment and drop the last partial batch; default: split == 'train'.
        augment: True/None for the default `Augment()` when training, an `Augment`, or False.
        shuffle_buffer: records in the shuffle buffer (training; default 4096, capped at the split).
        seed: makes shard order, shuffling and augmentation reproducible.
        deterministic: keep element order fixed; default True when a seed is given or when not
            training (evaluation and prediction outputs line up with the records).
        repeat: repeat forever (then pass steps_per_epoch to fit); default one pass per iteration.
        cache: keep the serialized records in memory (True) or in a cache file (a path).
        dtype: 'uint8' (default: normalise on the accelerator) or 'float32' (values 0..255).
        channels: 3 (grayscale is expanded) or 1.
        drop_remainder: drop the last partial batch; default True when training.
        crop_fraction: evaluation centre crop, as a share of the shorter side.
        dct_method: libjpeg IDCT: 'INTEGER_ACCURATE' (default; 'INTEGER_FAST' measured no faster).
        antialias: antialiased resize (37% slower; Inception and Keras resize without it).
        input_context: a `tf.distribute.InputContext`; assigns whole shards to this input pipeline.
        num_workers, worker_index: the same without a distribution strategy.
        image_key, label_key: feature names in other people's TFRecords (label_key='' for none).
        compression: 'gzip' for compressed foreign files (ours say so in the manifest).
        filter: predicate on one record's parsed features (a dict of tensors); False drops it.
        map: applied to each decoded batch, (images, labels) -> (images, labels).
        skip_corrupt: skip unreadable records (logged per shard) instead of failing.
        with_filenames: also yield each record's image/filename: (images, labels, filenames).
        shuffle: 'buffer' (shuffle buffer over shards read in parallel; the default) or 'global': a
            seeded permutation of all records of the split, new each epoch (`indexed.global_order`,
            the same order the TensorFlow-free `IndexedRecords` gives), read by index with bounded
            memory. Global order is a pure function of (seed, epoch), which makes `epoch` and
            `start_step` exact. Needs uncompressed shards of a converted folder; `cache`,
            `skip_corrupt` and `shuffle_buffer` do not apply (rejected). Default: 'global' with
            `even`, else 'buffer'.
        epoch, start_step: with shuffle='global', start at this epoch and skip this many batches
            of it (exact mid-epoch resume; see `shardfeed.fit_resumable`). Each further pass over
            the dataset (or each repetition) reads the next epoch whole; with start_step the
            cardinality is unknown, as the first pass is shorter.
        even: split records, not shards, across workers so each reads the same count: 'drop' the
            remainder or 'pad' by wrapping around (works with fewer shards than workers). Records
            are read by index (as for shuffle='global', with the same restrictions); training
            shuffles them globally unless shuffle='buffer' asks for a buffer over this worker's
            records in file order. Default None: whole shards per worker.

    Raises:
        ValueError: bad option, missing split (lists the splits), unknown feature (lists those
            present), fewer shards than workers, buffer-only options with global/even reading.
    """
    tf = tensorflow()
    size = _image_size(image_size)
    _check(batch_size, dtype, channels, crop_fraction, dct_method)
    training = (split == "train") if training is None else training
    augment_options = _augment(augment, training)
    # Evaluation/prediction keep file order (outputs line up with records); training is only
    # made deterministic when a seed asks for reproducibility, since order-free is faster.
    deterministic = (seed is not None or not training) if deterministic is None else deterministic
    drop_remainder = training if drop_remainder is None else drop_remainder
    shuffle = shuffle or ("global" if even is not None else "buffer")
    _check_indexed(shuffle, epoch, start_step, even, seed)
    _check_by_index_options(shuffle, even, cache=cache, skip_corrupt=skip_corrupt, shuffle_buffer=shuffle_buffer)
    shards, schema = _shards_and_schema(path, split, image_key, label_key, compression)
    if with_filenames:
        schema = dataclasses.replace(schema, filename_key="image/filename")
    if input_context is not None:
        num_workers, worker_index = input_context.num_input_pipelines, input_context.input_pipeline_id
        batch_size = input_context.get_per_replica_batch_size(batch_size)

    if shuffle == "global" or even is not None:
        # serialized records by index: a pure (seed, epoch) order, even record ranges per worker
        if not reader.is_converted_folder(path):
            raise ValueError(
                "shuffle='global' and even splits read through the index files of a converted folder; "
                f"{path!r} has no manifest.json"
            )
        ds, num_records = _indexed_records(
            str(path),
            split,
            seed=seed,
            epoch=epoch,
            skip=start_step * batch_size,
            shuffled=shuffle == "global" and training,
            repeat=repeat,
            num_workers=num_workers,
            worker_index=worker_index,
            even=even or "drop",
        )
        if training and shuffle == "buffer":  # even splits, asked for a buffer
            ds = _buffer_shuffle(ds, shuffle_buffer, num_records, seed)
    else:
        if num_workers > 1 or worker_index:
            shards = shards.for_worker(num_workers, worker_index)
        # serialized records, checked per shard
        records = reader.read_records(
            shards, shuffle_files=training, seed=seed, deterministic=deterministic, skip_corrupt=skip_corrupt
        )
        if cache:
            records = records.cache("" if cache is True else str(cache))
        if training:
            records = _buffer_shuffle(records, shuffle_buffer, shards.num_records, seed)
        if repeat:
            records = records.repeat()
        # one stateless seed pair per record, for reproducible augmentation
        seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
        ds = tf.data.Dataset.zip((records, seeds))
        num_records = shards.num_records
    if filter is not None:
        spec = feature_spec(schema)
        ds = ds.filter(lambda record, _: filter(tf.io.parse_single_example(record, spec)))
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    # decoded batches
    options = DecodeOptions(size, channels, dtype, augment_options, crop_fraction, dct_method, antialias)
    ds = ds.map(batch_decoder(schema, options), num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    if map is not None:
        ds = ds.map(map, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    # A resumed pass (start_step) is shorter than the full epochs that later passes read.
    if not repeat and filter is None and not skip_corrupt and not start_step:
        ds = ds.apply(tf.data.experimental.assert_cardinality(_batch_count(num_records, batch_size, drop_remainder)))
    opts = tf.data.Options()
    opts.deterministic = deterministic
    opts.experimental_optimization.map_parallelization = True
    ds = ds.with_options(opts)
    return ds.prefetch(tf.data.AUTOTUNE)


SHUFFLES = ("buffer", "global")
INDEXED_CHUNK = 64  # records per Python call when reading by index


def _buffer_shuffle(ds: Any, shuffle_buffer: int | None, num_records: int, seed: int | None) -> Any:
    """`ds` through a shuffle buffer (default size, capped at the records there are; 0: none)."""
    if shuffle_buffer == 0:
        return ds
    buffer = min(shuffle_buffer or DEFAULT_SHUFFLE_BUFFER, max(num_records, 1))
    return ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)


def _check_indexed(shuffle: str, epoch: int, start_step: int, even: str | None, seed: int | None) -> None:
    if shuffle not in SHUFFLES:
        raise ValueError(f"shuffle must be one of {list(SHUFFLES)}, got {shuffle!r}")
    if (epoch or start_step) and shuffle != "global":
        raise ValueError(
            "epoch and start_step need shuffle='global' (only a global order is a pure function "
            "of (seed, epoch), so only it can be resumed exactly)"
        )
    if (epoch or start_step) and seed is None:
        raise ValueError("epoch and start_step need a seed: the order must be the one the interrupted run saw")
    if epoch < 0 or start_step < 0:
        raise ValueError(f"epoch and start_step must be >= 0, got {epoch}, {start_step}")
    if even is not None and even not in EVEN_MODES:
        raise ValueError(f"even must be None, 'drop' or 'pad', got {even!r}")


def _check_by_index_options(shuffle: str, even: str | None, **options: Any) -> None:
    """Rejects buffer-pipeline options that reading by index cannot honour, instead of ignoring them."""
    if shuffle != "global" and even is None:
        return
    why = {
        "cache": "records are read in a new order each epoch, straight from the shards",
        "skip_corrupt": "a damaged record stops the run with its shard and number; run `shardfeed verify`",
        "shuffle_buffer": "the global order needs no buffer",
    }
    if shuffle != "global":
        del options["shuffle_buffer"]  # even splits with shuffle='buffer' do use one
    for name, value in options.items():
        if value not in (None, False):
            raise ValueError(f"{name}= does not apply with shuffle='global' or even splits: {why[name]}")


def _indexed_records(
    path: str,
    split: str,
    *,
    seed: int | None,
    epoch: int,
    skip: int,
    shuffled: bool,
    repeat: bool,
    num_workers: int,
    worker_index: int,
    even: str,
) -> tuple[Any, int]:
    """(record bytes, seed pair) elements read by index, and how many the first pass yields.

    The augmentation seed of each record is (seed, epoch * N + position): also a pure function,
    so a resumed run augments exactly as the interrupted one would have.
    """
    tf = tensorflow()
    records = IndexedRecords(path, split)
    n = len(records)
    base_seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
    positions = worker_positions(n, num_workers, worker_index, even)
    if skip > len(positions):
        raise ValueError(f"start_step skips {skip} records but this worker has {len(positions)} per epoch")

    orders = _EpochOrders(records, base_seed, shuffled)

    def read_chunk(epoch_number: np.ndarray, begin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        chosen = positions[int(begin) : int(begin) + INDEXED_CHUNK]
        order = orders.get(int(epoch_number))
        blobs = np.array([records.record(int(order[p])) for p in chosen], dtype=object)
        return blobs, int(epoch_number) * n + chosen

    def chunks(epoch_number: Any) -> Any:
        first = tf.where(epoch_number == epoch, tf.constant(skip, tf.int64), tf.constant(0, tf.int64))
        begins = tf.data.Dataset.range(first, len(positions), INDEXED_CHUNK)
        return begins.map(lambda begin: (epoch_number, begin))

    def read(epoch_number: Any, begin: Any) -> tuple[Any, Any]:
        blobs, keys = tf.numpy_function(read_chunk, [epoch_number, begin], (tf.string, tf.int64), stateful=False)
        return tf.ensure_shape(blobs, [None]), tf.ensure_shape(keys, [None])

    # (epoch, chunk start) pairs, each read by one Python call of INDEXED_CHUNK records. A
    # numpy_function map, not from_generator: the generator source cost ~75% more CPU per image
    # here, even with the records already in memory (see docs/benchmarks.md).
    ds = (
        _epoch_numbers(epoch, repeat)
        .flat_map(chunks)
        .map(read, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .unbatch()
    )
    ds = ds.map(lambda record, key: (record, tf.stack([tf.constant(base_seed, tf.int64), key])))
    return ds, len(positions) - skip


def _epoch_numbers(epoch: int, repeat: bool) -> Any:
    """The epochs one iteration of the dataset reads: `epoch`, `epoch + 1`, ... (with `repeat`,
    all of them in one iteration; without, one per iteration, so that `model.fit(ds, epochs=N)`,
    which iterates the dataset anew each epoch, gets a new order each epoch, as with buffer
    shuffling's reshuffle_each_iteration)."""
    tf = tensorflow()
    iterations = itertools.count(epoch)
    lock = threading.Lock()

    def next_epoch() -> np.int64:
        with lock:
            return np.int64(next(iterations))

    first = tf.data.Dataset.range(1).map(lambda _: tf.numpy_function(next_epoch, [], tf.int64, stateful=True))
    first = first.map(lambda e: tf.ensure_shape(e, []))
    return first.flat_map(lambda e: tf.data.Dataset.counter(e)) if repeat else first


class _EpochOrders:
    """The read order of recent epochs, computed once per epoch (an argsort of all records)."""

    def __init__(self, records: IndexedRecords, seed: int, shuffled: bool) -> None:
        self.records, self.seed, self.shuffled = records, seed, shuffled
        self._cache: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def get(self, epoch: int) -> np.ndarray:
        with self._lock:
            if epoch not in self._cache:
                if len(self._cache) >= 2:  # parallel reads straddle at most one epoch boundary
                    del self._cache[min(self._cache)]
                n = len(self.records)
                self._cache[epoch] = global_order(n, self.seed, epoch) if self.shuffled else np.arange(n)
            return self._cache[epoch]


def steps_per_epoch(
    path: str | Sequence[str],
    split: str = "train",
    batch_size: int = 64,
    *,
    drop_remainder: bool = True,
    num_workers: int = 1,
    worker_index: int = 0,
    even: str | None = None,
    image_key: str | None = None,
    label_key: str | None = None,
) -> int:
    """Batches in one epoch of `split` for this worker, from the manifest (or counted records).

    With `even` (record-level splits, as in `load(even=...)`) every worker gets the same count.
    """
    shards, _ = _shards_and_schema(path, split, image_key, label_key, None)
    if even is not None:
        records = len(worker_positions(shards.num_records, num_workers, worker_index, even))
    else:
        if num_workers > 1 or worker_index:
            shards = shards.for_worker(num_workers, worker_index)
        records = shards.num_records
    return _batch_count(records, batch_size, drop_remainder)


def _batch_count(records: int, batch_size: int, drop_remainder: bool) -> int:
    batches = records / batch_size
    return math.floor(batches) if drop_remainder else math.ceil(batches)


def _image_size(image_size: int | tuple[int, int]) -> tuple[int, int]:
    size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    if len(size) != 2 or not all(isinstance(s, int) and s > 0 for s in size):
        raise ValueError(f"image_size must be a positive int or (height, width), got {image_size!r}")
    return size[0], size[1]


def _check(batch_size: int, dtype: str, channels: int, crop_fraction: float, dct_method: str) -> None:
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, got {channels!r}")
    if not 0 < crop_fraction <= 1:
        raise ValueError(f"crop_fraction must be in (0, 1], got {crop_fraction}")
    if dct_method not in DCT_METHODS:
        raise ValueError(f"dct_method must be one of {list(DCT_METHODS)}, got {dct_method!r}")


def _augment(augment: bool | Augment | None, training: bool) -> Augment | None:
    if isinstance(augment, Augment):
        return augment
    if augment is None:
        return Augment() if training else None
    return Augment() if augment else None


def _shards_and_schema(
    path: str | Sequence[str], split: str, image_key: str | None, label_key: str | None, compression: str | None
) -> tuple[reader.ShardSet, Schema]:
    """Our manifest's shards and schema, or foreign files with the schema read off a record."""
    if reader.is_converted_folder(path):
        shards = reader.from_manifest(str(path), split)
        m = shards.manifest
        if m is None:  # from_manifest always sets it; narrows the type
            raise ValueError(f"no manifest for {path!r}")
        labelled = m.labels is not None
        return shards, Schema(label_key=Schema.label_key if labelled else None, label_offset=m.label_offset)
    shards = reader.from_files(path, compression=compression)
    return shards, _foreign_schema(shards, image_key, label_key)


def _foreign_schema(shards: reader.ShardSet, image_key: str | None, label_key: str | None) -> Schema:
    """Reads the first record to check the named features exist and to see how pixels are stored."""
    first = next((f for f, n in zip(shards.files, shards.counts, strict=True) if n), None)
    if first is None:
        raise ValueError(f"the TFRecord files {shards.files[:3]} hold no records")
    record = parse_example(next(iter(read_records(first, compression=shards.compression))))
    image_key = image_key or "image/encoded"
    label_key = "image/class/label" if label_key is None else label_key
    for key, flag in ((image_key, "image_key"), (label_key, "label_key")):
        if key and key not in record:
            raise ValueError(f"feature {key!r} not in the records of {first}; they have {sorted(record)}; pass {flag}")
    pixels = bool(record[image_key]) and isinstance(record[image_key][0], float)

    def present(*names: str) -> str | None:
        return next((n for n in names if n in record), None)

    return Schema(
        image_key=image_key,
        label_key=label_key or None,
        height_key=present("image/height", "height"),
        width_key=present("image/width", "width"),
        channels_key=present("image/channels", "channels", "depth"),
        pixels_as_floats=pixels,
    )
