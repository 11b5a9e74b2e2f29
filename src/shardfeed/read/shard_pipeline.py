"""The shard pipeline: whole shards per worker, read in parallel and checked, then a shuffle buffer.

shard file names   -> shuffled per epoch (training), whole shards per worker
serialized records -> parallel interleave across shards, checked per shard (shardset.py)
                   -> optional cache; shuffle buffer over the cheap serialized records
(record, seed)     -> one stateless seed pair per record, for reproducible augmentation
"""

from __future__ import annotations

from typing import Any

from shardfeed.lazy import tensorflow
from shardfeed.read import shardset
from shardfeed.read.options import ReadConfig
from shardfeed.read.order import buffer_shuffle


def shard_records(
    shards: shardset.ShardSet, read: ReadConfig, *, training: bool, seed: int | None, deterministic: bool, repeat: bool
) -> tuple[Any, int]:
    """(serialized record, seed pair) elements of this worker's shards, and how many a pass yields."""
    tf = tensorflow()
    if read.num_workers > 1 or read.worker_index:
        shards = shards.for_worker(read.num_workers, read.worker_index)
    records = shardset.checked_records(
        shards, shuffle_files=training, seed=seed, deterministic=deterministic, skip_corrupt=read.skip_corrupt
    )
    if read.cache:
        records = records.cache("" if read.cache is True else str(read.cache))
    if training:
        records = buffer_shuffle(records, read.buffer_size(shards.num_records), seed)
    if repeat:
        records = records.repeat()
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
    return tf.data.Dataset.zip((records, seeds)), shards.num_records
