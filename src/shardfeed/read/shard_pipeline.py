"""The shard pipeline: whole shards per worker, read in parallel and checked, then a shuffle buffer.

shard file names   -> shuffled per epoch (training), whole shards per worker (the plan's share);
                      from a bucket: local copies in an order computed in Python, fetched ahead
                      through the shard cache (read/remote/feed.py); on the tf.data service: the
                      workers' mirrors of the bucket (read/remote/mirror.py)
serialized records -> parallel interleave across shards, each shard's record count checked
                      against the manifest (`checked_records`); parsed there, 64 at a time
                      (`decode.record_parser`; not when a filter_fn needs the records whole)
                   -> optional cache; shuffle buffer over the cheap records (still encoded
                      images: their features, or serialized for a filter_fn)
(record, seed)     -> a seeded random seed pair per record, new each iteration (records have no
                      stable position here; the index pipeline's pairs are (seed, position))
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from shardfeed.format import fileio, tfrecord
from shardfeed.lazy import tensorflow
from shardfeed.read.order import buffer_shuffle
from shardfeed.read.plan import ReadPlan
from shardfeed.read.remote.cache import ShardCache
from shardfeed.read.remote.feed import ShardFeed, reading_cycle, remote_shards
from shardfeed.read.remote.mirror import in_mirror
from shardfeed.read.shardset import ShardSet

END_OF_SHARD = b"\x00shardfeed:end-of-shard\x00"
MISSING = " is missing (deleted or moved after the dataset was made); run `shardfeed verify`"
NOT_MIRRORED = (
    " is not on this tf.data service worker: start every worker with `shardfeed serve worker --mirror URL` "
    "(the folder in the bucket) and the --cache-dir given to load as ServiceOptions(mirror_dir=...)"
)
READ_BUFFER = 4 << 20  # per open shard; 4 MB read 31.8k records/s against 23.8k with 256 KB
INTERLEAVE_CYCLE = 16  # shards read at once, each on its own thread (AUTOTUNE chose fewer: 22k vs 30k records/s)
CHECK_BATCH = 64  # records per integrity-count step; also the interleave granularity


def shard_records(plan: ReadPlan, parse: Callable[[Any], Any] | None = None) -> Any:
    """(record, seed pair) elements of one epoch of this worker's shards (see the module
    docstring): each record serialized, or its features where `parse` is given (see
    `checked_records`); `load` repeats the batched epoch, so each repetition reshuffles shards
    and buffer."""
    tf = tensorflow()
    read, shards = plan.read, plan.worker_shards
    feed_from, missing = None, MISSING
    if shards.in_bucket and plan.service is not None:
        shards, missing = in_mirror(shards, plan.service.mirror_directory()), NOT_MIRRORED
    elif shards.in_bucket:
        feed_from = (read.shard_cache(), plan.base_seed, read.epoch)
    records = checked_records(
        shards,
        shuffle_files=plan.training,
        seed=plan.seed,
        deterministic=plan.deterministic,
        skip_corrupt=read.skip_corrupt,
        feed_from=feed_from,
        missing=missing,
        parse=parse,
        framing_checked=plan.service is None,
    )
    if read.cache:
        records = records.cache("" if read.cache is True else str(read.cache))
    if plan.training:
        records = buffer_shuffle(records, read.buffer_size(shards.num_records), plan.seed)
    # Dataset ops only, so the pipeline can run on tf.data service workers. (A per-iteration
    # random start counted up with Dataset.counter measured 7% more CPU per image: 8-round A/B.)
    seeds = tf.data.Dataset.random(seed=plan.seed, rerandomize_each_iteration=True).batch(2)
    return tf.data.Dataset.zip((records, seeds))


def checked_records(
    shards: ShardSet,
    *,
    shuffle_files: bool,
    seed: int | None,
    deterministic: bool,
    skip_corrupt: bool,
    feed_from: tuple[ShardCache, int, int] | None = None,
    missing: str = MISSING,
    parse: Callable[[Any], Any] | None = None,
    framing_checked: bool = True,
) -> Any:
    """A dataset of serialized records from `shards`, interleaved in parallel.

    TensorFlow's reader reports corruption without naming the file and stops reading a file at
    its first bad record. So each shard is read with errors ignored, in batches whose sizes are
    summed; after the shard's last batch the total is compared with the expected count: a
    shortfall raises an error naming the shard (or, with `skip_corrupt`, is logged). Checking per
    batch instead of per record keeps the check free (measured: 20.7k vs 21.4k records/s without
    it, against 6.2k records/s for a per-record check). `feed_from`: see `_shard_files`;
    `missing`: what a missing shard's error says after its path. `parse` (serialized records
    [N] -> features [N, ...]) parses each checked batch before it is split into records: one
    `parse_example` per 64 records instead of a `parse_single_example` per record later
    (measured: 1.08x `load`'s training images/s paired, docs/benchmarks/load.md).
    `framing_checked`: each local shard's record lengths are checked against its size before
    TensorFlow opens it (`_framing`), and the shard is read only up to a record whose length runs
    past its end: the count check then names it. Off on the tf.data service, whose workers run
    graph ops only (a bucket's shards are checked there by `serve worker --mirror`).
    """
    tf = tensorflow()
    files, cycle, feed = _shard_files(shards, shuffle_files, seed, feed_from)
    compression = "GZIP" if shards.compression == "gzip" else ""
    end = tf.constant([END_OF_SHARD])

    @tf.autograph.experimental.do_not_convert
    def opened(path: Any, readable: Any) -> Any:
        """The shard's records, read past damage (the count check below finds what was lost)
        and never past its first `readable` records (-1: all); a missing shard fails naming it
        (with `skip_corrupt`: no records, so the count check logs it as skipped)."""
        message = tf.strings.join(["shard ", path, missing])
        paths = tf.data.Dataset.from_tensors(path)
        paths = paths.filter(_present) if skip_corrupt else paths.map(lambda p: _asserted(p, _present(p), message))
        return paths.flat_map(
            lambda p: (
                tf.data.TFRecordDataset(p, compression_type=compression, buffer_size=READ_BUFFER)
                .take(readable)
                .ignore_errors()
            )
        )

    @tf.autograph.experimental.do_not_convert
    def read_one(path: Any, expected: Any) -> Any:
        problem, readable = _framing(path, shards.compression) if framing_checked else (tf.constant(""), -1)
        batches = opened(path, readable).batch(CHECK_BATCH).concatenate(tf.data.Dataset.from_tensors(end))

        @tf.autograph.experimental.do_not_convert
        def step(count: Any, batch: Any) -> Any:
            short = tf.logical_and(_is_end(batch), tf.not_equal(count, expected))
            message = _shortfall(path, count, expected, problem)
            if skip_corrupt:
                check = tf.cond(
                    short,
                    lambda: tf.print("shardfeed: skipped", expected - count, "unreadable records of", path),
                    tf.no_op,
                )
            else:
                check = tf.debugging.Assert(tf.logical_not(short), [message])
            with tf.control_dependencies([check]):
                return count + tf.cast(tf.size(batch), tf.int64), batch

        counted = _released_at_end(batches.scan(tf.constant(0, tf.int64), step), path, feed)
        return counted.filter(lambda b: tf.logical_not(_is_end(b)))

    batches = files.interleave(
        read_one, cycle_length=cycle, block_length=1, num_parallel_calls=cycle, deterministic=deterministic
    )
    if parse is not None:
        batches = batches.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return batches.unbatch()


def _shortfall(path: Any, count: Any, expected: Any, problem: Any) -> Any:
    """The error of a shard that ended after `count` of its `expected` records (or held more);
    `problem`: what `_framing` found there ('' for nothing)."""
    tf = tensorflow()
    return tf.strings.join(
        [
            "shard ",
            path,
            " is corrupt or truncated: read ",
            tf.strings.as_string(count),
            " of its ",
            tf.strings.as_string(expected),
            " records; ",
            tf.where(
                count < expected,
                tf.strings.join(["the damage is at record ", tf.strings.as_string(count), " (from 0)"]),
                "it holds more records than the manifest says",
            ),
            tf.where(tf.equal(problem, ""), "", tf.strings.join([": ", problem])),
            " (run `shardfeed verify` for every problem)",
        ]
    )


def _framing(path: Any, compression: str | None) -> tuple[Any, Any]:
    """What is wrong with the framing of the shard at `path` ('' for nothing) and how many of its
    records TensorFlow's reader may read (-1: all): up to the first whose length runs past the
    file's end (`tfrecord.framing_problem`), which that reader allocates before reading (an edited
    shard claiming 2^40 bytes killed `load` with a segmentation fault). Checked in Python, a pread
    per record header: 0.5 ms a shard of 1,000 records."""
    tf = tensorflow()

    def found(raw: bytes) -> tuple[bytes, np.int64]:
        name = raw.decode()
        if fileio.is_remote(name):  # TensorFlow's own filesystems (ram://): not a local file
            return b"", np.int64(-1)
        try:
            size = os.stat(name).st_size
        except OSError:
            return b"", np.int64(-1)  # missing: `_present` says so
        problem = tfrecord.framing_problem(name, size, compression)
        if problem is None:
            return b"", np.int64(-1)
        return problem.message.encode(), np.int64(problem.record)

    problem, readable = tf.numpy_function(found, [path], (tf.string, tf.int64), stateful=False)
    return tf.ensure_shape(problem, []), tf.ensure_shape(readable, [])


def _is_end(batch: Any) -> Any:
    """Whether a batch is the end-of-shard marker."""
    tf = tensorflow()
    return tf.logical_and(tf.equal(tf.size(batch), 1), tf.equal(batch[0], END_OF_SHARD))


def _released_at_end(batches: Any, path: Any, feed: ShardFeed | None) -> Any:
    """`batches`, telling the feed when the shard's end marker passes: its copy may be evicted."""
    if feed is None:
        return batches
    tf = tensorflow()

    def release(batch: Any) -> Any:
        done = tf.cond(
            _is_end(batch), lambda: tf.numpy_function(feed.finished, [path], tf.bool), lambda: tf.constant(False)
        )
        with tf.control_dependencies([done]):
            return tf.identity(batch)

    return batches.map(release)


def _shard_files(
    shards: ShardSet, shuffle: bool, seed: int | None, feed_from: tuple[ShardCache, int, int] | None
) -> tuple[Any, int, ShardFeed | None]:
    """(path, record count) of each shard in this epoch's order, how many to read at once, and
    the feed handing them out.

    `feed_from` (cache, seed, first epoch): the shards are in a bucket; their local copies come
    from a `ShardFeed` in its seeded order, each pass the next epoch.
    """
    tf = tensorflow()
    cycle = min(len(shards.files), INTERLEAVE_CYCLE)
    if feed_from is not None:
        cache, base_seed, first_epoch = feed_from
        cycle = reading_cycle(cache, remote_shards(shards), cycle)
        feed = ShardFeed(cache, shards, shuffle=shuffle, seed=base_seed, first_epoch=first_epoch)

        def next_shard(position: Any) -> Any:
            path, count = tf.numpy_function(feed.next_shard, [position], (tf.string, tf.int64), stateful=True)
            return tf.ensure_shape(path, []), tf.ensure_shape(count, [])

        # (not Dataset.from_generator: a pipeline fed by one spent 10% more CPU per image, measured)
        return tf.data.Dataset.range(len(shards.files)).map(next_shard), cycle, feed
    files = tf.data.Dataset.from_tensor_slices((shards.files, tf.constant(shards.counts, tf.int64)))
    if shuffle:
        files = files.shuffle(len(shards.files), seed=seed, reshuffle_each_iteration=True)
    return files, cycle, None


def _present(path: Any) -> Any:
    """Whether the shard exists. TensorFlow's reader cannot open a missing file, and
    `ignore_errors` then asks it again forever: the pipeline hangs instead of failing. A glob of
    the literal name (paths with glob characters are taken as present)."""
    tf = tensorflow()
    literal = tf.logical_not(tf.strings.regex_full_match(path, r".*[\[\]*?\\].*"))
    found = tf.greater(tf.size(tf.io.matching_files(path)), 0)
    return tf.logical_or(found, tf.logical_not(literal))


def _asserted(value: Any, condition: Any, message: Any) -> Any:
    """`value`, once `condition` holds; else the pipeline fails with `message`."""
    tf = tensorflow()
    with tf.control_dependencies([tf.debugging.Assert(condition, [message])]):
        return tf.identity(value)
