"""A tf.data service worker's verified copies of a bucket's shards, and the pipeline's view of them.

The service runs `load`'s pipeline on its workers as a serialized graph: Python (the shard feed
that fetches through the cache while reading) cannot travel with it, and TensorFlow cannot open
`s3://`. So each worker host holds the whole dataset in its shard cache before serving:

    shardfeed serve worker --dispatcher HOST:PORT --mirror s3://bucket/out [--cache-dir DIR]
        -> every shard of every split fetched into DIR (checked against the manifest's size and
           SHA-256, like any fetch), pinned for the worker's lifetime (never evicted), each
           record's length checked against its shard's size (`tfrecord.framing_problem`: `load`
           checks that before TensorFlow reads, which the service's graph-only workers cannot), then served
    load("s3://bucket/out", service=ServiceOptions(address, mirror_dir=DIR))
        -> the pipeline reads DIR/<sha256>.tfrecord: the content-addressed names the manifest
           gives, the same on every worker, so a re-converted dataset is never read from an old copy

A worker started without `--mirror` (or mirroring another folder) fails the read naming the
missing copy and the flag, never a hang (the shard pipeline's missing-file check).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from shardfeed.errors import CorruptRecordError, OptionError
from shardfeed.format import fileio, manifest, storage, tfrecord
from shardfeed.read import shardset
from shardfeed.read.remote.cache import RemoteShard, ShardCache, copy_name
from shardfeed.read.remote.feed import FETCH_THREADS, remote_shards
from shardfeed.read.shardset import ShardSet

log = logging.getLogger("shardfeed")


@dataclass(frozen=True)
class Mirrored:
    """What `mirror` did: shards and bytes held, how many were fetched now, and in what time."""

    url: str
    shards: int
    bytes: int
    fetched: int
    seconds: float

    def __str__(self) -> str:
        return (
            f"mirrored {storage.redact(self.url)}: {self.shards} shards, {self.bytes / 1e6:,.1f} MB "
            f"({self.fetched} fetched, {self.shards - self.fetched} already here) in {self.seconds:.1f} s"
        )


def mirror(url: str, cache: ShardCache, threads: int = FETCH_THREADS) -> Mirrored:
    """Fetches every shard of the converted folder `url` (all splits) into `cache`, verified, and
    pins each for this process's lifetime.

    Raises:
        OptionError: `url` is not a converted folder in a bucket, or the cache limit is below the
            dataset's size (a mirror must hold all of it: the service's workers cannot fetch).
        StorageError, CorruptRecordError: as a fetch does (the object named).
    """
    if not fileio.is_bucket(url) or not shardset.is_converted_folder(url):
        raise OptionError(f"--mirror {storage.redact(url)}: give a folder in a bucket that shardfeed converted")
    started = time.monotonic()
    m = manifest.opened(url)
    shards = {s.sha256: s for split in m.split_names for s in remote_shards(shardset.from_manifest(m, split))}
    total = sum(s.size for s in shards.values())
    if cache.limit is not None and total > cache.limit:
        raise OptionError(
            f"--mirror {storage.redact(url)}: its shards are {total:,} bytes, over the cache limit of "
            f"{cache.limit:,}; a service worker holds the whole dataset (raise --cache-limit)"
        )
    for sha in shards:
        cache.pin(sha)
    missing = [s for s in shards.values() if not cache.holds(s)]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda s: _fetch(cache, s, set(shards)), missing))
    for shard in shards.values():  # the service's workers run graph ops only: `load` cannot check there
        if problem := tfrecord.framing_problem(cache.path(shard), shard.size, m.compression):
            raise CorruptRecordError(f"shard {storage.redact(shard.url)} is corrupt or truncated: {problem.message}")
    done = Mirrored(url, len(shards), total, len(missing), time.monotonic() - started)
    log.info("%s into %s", done, cache.directory)
    return done


def _fetch(cache: ShardCache, shard: RemoteShard, keep: set[str]) -> str:
    if not cache.reserve(shard, keep, rank=lambda _: 0.0):
        raise OptionError(f"the shard cache {cache.directory} has no room for {storage.redact(shard.url)}")
    return cache.fetch(shard)


def in_mirror(shards: ShardSet, directory: str) -> ShardSet:
    """`shards` (a converted folder's, in a bucket) as read from a mirror in `directory`."""
    if shards.sha256s is None:
        raise OptionError("shards in a bucket are read through the service's mirrors, which need a manifest")
    return dataclasses.replace(shards, files=[os.path.join(directory, copy_name(sha)) for sha in shards.sha256s])
