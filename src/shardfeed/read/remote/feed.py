"""One worker's shards from a bucket, fed to tf.data through the shard cache in the order it reads them.

TensorFlow cannot open `s3://` and has no cache, so the shard pipeline reads local copies: each
epoch's shard order is computed here, in Python (`order.global_order` over shard numbers, a
pure function of (seed, epoch)), so fetching can run ahead of the reader in exactly that order:

    epoch number  -> this worker's shard order (and the next epoch's, to rank evictions)
    shard order   -> fetches, several at a time, up to `ahead` shards beyond the one read now
    each shard    -> (local verified path, record count) once fetched: what the interleave opens

A shard handed out is pinned until the reader has read its last record (`finished`, called by
the pipeline as the shard's end marker passes): before that the interleave may not even have
opened it, and a missing file would stall TensorFlow's reader. The interleave holds at most
twice its cycle of shards (current and prefetched), so the cache must hold that many plus the one
being fetched (checked at start: `reading_cycle`).
Per epoch it logs shards read from the cache and fetched, bytes fetched and seconds waited (at
debug level when everything came from the cache without a wait).
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import logging
import os
import threading
import time
import weakref
from collections import Counter
from collections.abc import Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from shardfeed.errors import OptionError, ShardfeedError
from shardfeed.format import manifest
from shardfeed.format.storage import StorageError
from shardfeed.read.order import global_order
from shardfeed.read.remote.cache import RemoteShard, ShardCache
from shardfeed.read.shardset import ShardSet

log = logging.getLogger("shardfeed")

FETCH_THREADS = 4  # shards fetched at once
AHEAD = 8  # shards fetched beyond the one being handed out, when the cache has room
WAIT_FOR_ROOM = 120.0  # seconds a fetch waits for room before the read fails naming the limit
SHARDS_HELD = 4  # the fewest shards a cache must hold: two read at once, one handed out, one being fetched
_LIVE: weakref.WeakSet[ShardFeed] = weakref.WeakSet()  # closed at exit (`_close_all`)


def _close_all() -> None:
    """At interpreter exit, before finalisation and before `lazy.release_iterators` (atexit
    runs the last registered first; this is registered with the first feed, after TensorFlow's
    import registered that): tf.data threads still calling a feed get an immediate error
    instead of starting fetches against a store that may be gone."""
    for feed in list(_LIVE):
        feed.close()


def remote_shards(shards: ShardSet) -> list[RemoteShard]:
    """The shards of a converted folder in a bucket, with the manifest's sizes and hashes."""
    if shards.sizes is None or shards.sha256s is None:
        raise OptionError("shards in a bucket are read through the cache, which needs the folder's manifest")
    return [
        RemoteShard(url, size, sha) for url, size, sha in zip(shards.files, shards.sizes, shards.sha256s, strict=True)
    ]


def reading_cycle(cache: ShardCache, shards: list[RemoteShard], cycle: int) -> int:
    """Shards read at once: `cycle`, or fewer when the cache limit cannot pin that many.

    Raises:
        OptionError: the limit is below SHARDS_HELD shards of the largest size (two read at once, one being
            fetched, one handed out).
    """
    if cache.limit is None or not shards:
        return cycle
    largest = max(s.size for s in shards)
    fits = cache.limit // max(1, largest)
    if fits < SHARDS_HELD:
        raise OptionError(
            f"cache_limit {cache.limit:,} bytes holds {fits} of the largest shard ({largest:,} bytes); it must "
            f"hold at least {SHARDS_HELD} ({SHARDS_HELD * largest:,} bytes) to read while fetching"
        )
    return max(1, min(cycle, (fits - 2) // 2))


def check_room(cache: ShardCache, m: manifest.Manifest, splits: list[str | None]) -> None:
    """Refuses, before any work, a cache limit that cannot read every split a run reads (None:
    no such split, e.g. no validation): the
    limit was checked split by split as each pipeline was built, so a training run was refused
    only once its model was built, naming the validation split's shard as "the largest" while
    the training split's were four times larger (the limit it suggested failed again).

    Raises:
        OptionError: the limit holds fewer than SHARDS_HELD of the largest shard (as `reading_cycle`).
    """
    sized = [(s.num_bytes, split, s.file) for split in splits if split for s in m.split(split).shards]
    if cache.limit is None or not sized:
        return
    size, split, file = max(sized)
    fits = cache.limit // max(1, size)
    if fits < SHARDS_HELD:
        raise OptionError(
            f"cache_limit {cache.limit:,} bytes holds {fits} of the largest shard this run reads ({file} of split "
            f"{split!r}, {size:,} bytes); it must hold at least {SHARDS_HELD} ({SHARDS_HELD * size:,} bytes) to "
            "read while fetching"
        )


class ShardFeed:
    """Hands out local paths of one worker's shards, epoch after epoch, fetching ahead. One pass
    at a time: two iterators over one dataset at once would share its passes (Keras iterates one).

    Args:
        cache: the shard cache.
        shards: this worker's shards (a converted folder's, in a bucket).
        shuffle: a new seeded shard order each epoch (training); else manifest order.
        seed: the order's seed.
        first_epoch: the epoch number of the first pass (then one more per pass).
    """

    def __init__(self, cache: ShardCache, shards: ShardSet, *, shuffle: bool, seed: int, first_epoch: int) -> None:
        self.cache, self.shards = cache, remote_shards(shards)
        self.counts, self.split = shards.counts, shards.split or "shards"
        self.shuffle, self.seed, self.next_epoch = shuffle, seed, first_epoch
        self.reading: Counter[str] = Counter()  # sha256 -> copies handed out and not yet read to the end
        self._guard = threading.Lock()
        self._pass: Generator[tuple[str, int], None, None] | None = None  # the epoch `next_shard` hands out
        self._failed: Exception | None = None  # what the first failed call raised: later calls raise it at once
        if not _LIVE:
            atexit.unregister(_close_all)
            atexit.register(_close_all)
        _LIVE.add(self)

    def order(self, epoch: int) -> list[int]:
        n = len(self.shards)
        return [int(i) for i in global_order(n, self.seed, epoch)] if self.shuffle else list(range(n))

    def next_shard(self, position: Any) -> tuple[bytes, np.int64]:
        """(local path, record count) of the shard at `position` of the current pass; position 0
        starts the next epoch (what tf.data calls once per element of `range(shards)`).

        Once a call has failed (the store is down, the cache has no room) every later call fails
        at once with the same message: tf.data goes on calling while it tears the failed
        iterator down, and each call would otherwise start fetches of its own against the dead
        store (retried for ~20 s each): the process took minutes to exit, or never did."""
        if self._failed is not None:
            raise copy.copy(self._failed)
        try:
            return self._next_shard(int(position))
        except (ShardfeedError, OSError) as e:
            self._failed = e
            raise

    def close(self) -> None:
        """Stops handing out shards: later calls fail at once, fetches in flight retry no more,
        and this process's pins are removed (a failed run left its `.pin` files behind)."""
        if self._failed is None:
            self._failed = StorageError("the shard feed was closed (the process is exiting)")
        with self._guard:
            for sha256 in self.reading:
                self.cache.unpin(sha256)
            self.reading.clear()
        if self._pass is not None:
            with contextlib.suppress(ValueError):  # running in another thread now: it ends with its fetches
                self._pass.close()

    def _next_shard(self, position: int) -> tuple[bytes, np.int64]:
        if position == 0 or self._pass is None:
            if self._pass is not None:
                self._pass.close()  # a pass stopped early: its fetches not started give their room back
            self._pass = self.epoch()
        path, count = next(self._pass)
        if position == len(self.shards) - 1:  # the last one: the pass ends (its log line, cleanup)
            next(self._pass, None)
            self._pass = None
        return os.fsencode(path), np.int64(count)

    def handed(self, sha256: str) -> None:
        with self._guard:
            self.reading[sha256] += 1
            self.cache.pin(sha256)

    def finished(self, path: bytes) -> bool:
        """The reader has read shard copy `path` to its end: it may be evicted again."""
        sha256 = os.path.basename(os.fsdecode(path)).split(".")[0]
        with self._guard:
            self.reading[sha256] -= 1
            if self.reading[sha256] <= 0:
                del self.reading[sha256]
                self.cache.unpin(sha256)
        return True

    def pinned(self) -> set[str]:
        with self._guard:
            return set(self.reading)

    def epoch(self) -> Generator[tuple[str, int], None, None]:
        """(local path, record count) of each shard of the next epoch, in its order."""
        epoch = self.next_epoch
        self.next_epoch += 1
        with self._guard:  # a new pass: the previous one's reader is gone, read to the end or not
            for sha256 in self.reading:
                self.cache.unpin(sha256)
            self.reading.clear()
        order = self.order(epoch)
        following = self.order(epoch + 1)
        pool = ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="shardfeed-fetch")
        fetch = _EpochFetch(self, order, following, pool)
        try:
            yield from fetch.run(epoch)
        finally:  # also when the reader stops early (or a fetch failed): fetches not started give
            # their room back, those running stop retrying, so the error or the end comes quickly
            fetch.stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            for p, future in fetch.futures.items():
                if future.cancelled():
                    self.cache.release(self.shards[order[p]])


class _EpochFetch:
    """One epoch's fetching: what is scheduled, pinned and handed out, and its statistics."""

    def __init__(self, feed: ShardFeed, order: list[int], following: list[int], pool: ThreadPoolExecutor) -> None:
        self.feed, self.order, self.pool = feed, order, pool
        shards = feed.shards
        # how far ahead each shard is read next: this epoch's rest, then the next epoch's start
        self.next_use = {s.sha256: float("inf") for s in shards}
        for step, i in reversed(list(enumerate(order + following))):
            self.next_use[shards[i].sha256] = step
        self.futures: dict[int, Future[str]] = {}  # position in order -> fetch
        self.stop = threading.Event()  # set when the pass ends: running fetches retry no more
        self.position = 0
        self.hits = self.fetched = self.fetched_bytes = 0
        self.waited = 0.0

    def rank(self, sha256: str) -> float:
        step = self.next_use.get(sha256, float("inf"))
        return float("inf") if step < self.position else step - self.position

    def keep(self) -> set[str]:
        shards = self.feed.shards
        ahead = {shards[self.order[p]].sha256 for p in self.futures if p >= self.position}
        return ahead | self.feed.pinned()

    def schedule(self) -> None:
        """Starts fetches in order from the current position while the cache has room."""
        shards, cache = self.feed.shards, self.feed.cache
        for p in range(self.position, min(len(self.order), self.position + AHEAD + 1)):
            if p in self.futures:
                continue
            shard = shards[self.order[p]]
            if cache.holds(shard):
                self.futures[p] = _done(cache.path(shard))
                self.hits += 1
                continue
            if not cache.reserve(shard, self.keep() | {shard.sha256}, self.rank):
                return  # in order: nothing later starts before this one
            self.futures[p] = self.pool.submit(cache.fetch, shard, self.stop)
            self.fetched += 1
            self.fetched_bytes += shard.size

    def run(self, epoch: int) -> Iterator[tuple[str, int]]:
        started = time.monotonic()
        for p, i in enumerate(self.order):
            self.position = p
            deadline = time.monotonic() + WAIT_FOR_ROOM
            self.schedule()
            waiting = time.monotonic()
            while p not in self.futures:  # no room yet: fetches in flight finish, pins move on
                if time.monotonic() > deadline:
                    raise OptionError(
                        f"the shard cache ({self.feed.cache.limit:,} bytes in {self.feed.cache.directory}) had no "
                        f"room for {self.feed.shards[i].url} for {WAIT_FOR_ROOM:.0f} s: shards being read (here or by "
                        "another process sharing the folder) fill it; raise cache_limit, or give each reader "
                        "its own cache_dir"
                    )
                time.sleep(0.05)
                self.schedule()
            path = self.futures.pop(p).result()
            self.waited += time.monotonic() - waiting
            self.feed.handed(self.feed.shards[i].sha256)
            yield path, self.feed.counts[i]
        quiet = not self.fetched and self.waited < 1  # said once something had to be fetched or waited for
        log.log(
            logging.DEBUG if quiet else logging.INFO,
            "shard cache: %s, epoch %d: %d shards, %d from the cache, %d fetched (%s bytes), waited %.1f s of %.1f s",
            self.feed.split,
            epoch,
            len(self.order),
            self.hits,
            self.fetched,
            f"{self.fetched_bytes:,}",
            self.waited,
            time.monotonic() - started,
        )


def _done(value: str) -> Future[str]:
    future: Future[str] = Future()
    future.set_result(value)
    return future
