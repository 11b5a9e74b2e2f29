"""The by-index pipeline: records read through the index files in a pure (seed, epoch) order.

Used for the global shuffle (a seeded permutation of the whole split each epoch) and for even
splits (the same record count on every worker). `load` maps each epoch number to its own dataset
(`IndexedEpochs`) and batches it alone; each element is read by a `tf.numpy_function` call that
fetches INDEXED_CHUNK records at once through `IndexedRecords`:

    epoch number         -> chunk starts of this worker's share of the epoch
    chunk start          -> INDEXED_CHUNK serialized records in this epoch's order, parsed
                            together (decode.record_parser) unless a filter_fn needs them whole
    (record, seed)       -> seed pair (seed, epoch * N + position), made in the same Python call:
                            a pure function, so a resumed run augments identically
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from shardfeed.format.tasks import task_of
from shardfeed.lazy import tensorflow
from shardfeed.read.indexed import IndexedRecords
from shardfeed.read.mixture import MixedRecords, MixedSplit
from shardfeed.read.order import (
    balanced_order,
    global_order,
    mixture_order,
    repeat_factor_order,
    repeat_factors,
    window_order,
)
from shardfeed.read.plan import ReadPlan
from shardfeed.read.record_labels import record_classes, record_labels

log = logging.getLogger("shardfeed")

INDEXED_CHUNK = 64  # records per Python call when reading by index


def epoch_numbers(plan: ReadPlan) -> Any:
    """The epochs one iteration of the dataset reads (`_epoch_numbers`), from `read.epoch` on."""
    return _epoch_numbers(plan.read.epoch, plan.repeat)


class IndexedEpochs:
    """One epoch's (serialized record, seed pair) elements read by index, for any epoch number:
    `load` batches each epoch on its own, so no batch ever holds records of two epochs.

    Training reads the global order of each epoch (or, with shuffle='buffer' and even splits,
    this worker's records in file order shuffled within windows of the buffer's size,
    `order.window_order`); evaluation reads file order.
    The first epoch (`read.epoch`) starts after `start_step` batches or `start_record` records.
    The seed pair of each record is (seed, epoch * N + position): also a pure function of (seed,
    epoch), so a resumed run augments exactly as the interrupted one would have.
    """

    def __init__(self, plan: ReadPlan) -> None:
        if plan.shards.manifest is None:  # the plan only reads by index for converted folders
            raise TypeError("IndexedEpochs needs a plan over a converted folder")
        read = plan.read
        self.plan = plan
        cache = read.shard_cache() if plan.shards.in_bucket else None
        self.records: IndexedRecords | MixedRecords = (
            MixedRecords(plan.mixture, plan.split, cache)
            if plan.mixture is not None
            else IndexedRecords(plan.shards.manifest, plan.split, cache=cache)
        )
        split_bytes = sum(plan.shards.sizes or [])
        if cache is not None and cache.limit is not None and cache.limit < split_bytes:
            log.warning(
                "reading by index from a bucket with a cache_limit (%s bytes) below the split's %s bytes: records "
                "come from every shard all epoch, so shards are fetched again and again; raise cache_limit to the "
                "split's size or read with shuffle='buffer'",
                f"{cache.limit:,}",
                f"{split_bytes:,}",
            )
        self.n, self.first, self.skip = plan.epoch_records, read.epoch, read.start_step * plan.batch_size
        self.positions = plan.share.positions(self.n)
        self.resumed = plan.share.positions(self.n, read.start_record)  # the first epoch's: after what all read
        shuffled = read.order == "global" and plan.training
        self.orders = _EpochOrders(self.n, plan.base_seed, shuffled=shuffled, mixture=plan.mixture)
        m = plan.shards.manifest
        balance = task_of(m.header.task).balance if m is not None and read.balance and plan.training else None
        if balance == "objects":  # LVIS' repeat factors of the objects' classes
            self.orders.factors = repeat_factors(record_classes(m, plan.split), read.repeat_threshold)
        elif balance == "class":
            self.orders.labels = record_labels(m, plan.split)
        buffered = plan.training and read.order == "buffer" and plan.mixture is None  # even splits, asked for a buffer
        window = read.buffer_size(len(self.positions)) if buffered else 0
        # this worker's positions in file order, shuffled within windows of the buffer's size
        self.windows = _EpochOrders(len(self.positions), plan.base_seed, shuffled=False, window=window)

    def _read_chunk(self, epoch_number: np.ndarray, begin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """INDEXED_CHUNK records of an epoch from position `begin` of this worker's share, with
        their seed pairs (one Python call)."""
        epoch = int(epoch_number)
        mine = self.resumed if epoch == self.first else self.positions
        if self.windows.window:  # buffer order (no resume point: ReadOptions refuses one)
            mine = self.positions[self.windows.get(epoch)]
        chosen = mine[int(begin) : int(begin) + INDEXED_CHUNK]
        order = self.orders.get(epoch)
        blobs = np.array([self.records.record(int(order[p])) for p in chosen], dtype=object)
        keys = epoch * self.n + chosen
        return blobs, np.stack([np.full_like(keys, self.plan.base_seed), keys], axis=1)

    def __call__(self, epoch_number: Any, parse: Callable[[Any], Any] | None = None) -> Any:
        """The dataset of epoch `epoch_number` (a scalar int64 tensor); each chunk of records
        parsed by `parse` before it is split, where given (as `shard_pipeline.checked_records`)."""
        tf = tensorflow()
        is_first = tf.equal(epoch_number, self.first)
        begin = tf.where(is_first, tf.constant(self.skip, tf.int64), tf.constant(0, tf.int64))
        end = tf.where(is_first, tf.constant(len(self.resumed), tf.int64), tf.constant(len(self.positions), tf.int64))

        def read_chunks(begin: Any) -> tuple[Any, Any]:
            out = tf.numpy_function(self._read_chunk, [epoch_number, begin], (tf.string, tf.int64), stateful=False)
            records = tf.ensure_shape(out[0], [None])
            return parse(records) if parse is not None else records, tf.ensure_shape(out[1], [None, 2])

        # chunk starts, each read by one Python call of INDEXED_CHUNK records. A numpy_function
        # map, not from_generator: the generator source cost ~75% more CPU per image here, even
        # with the records already in memory (see docs/benchmarks/load.md).
        ds = (
            tf.data.Dataset.range(begin, end, INDEXED_CHUNK)
            .map(read_chunks, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .unbatch()
        )
        return ds


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
    """The read order of recent epochs (record numbers, or a mixture's ids), computed once per epoch."""

    def __init__(
        self,
        n: int,
        seed: int,
        shuffled: bool,
        labels: np.ndarray | None = None,
        mixture: MixedSplit | None = None,
        window: int = 0,
    ) -> None:
        self.n, self.seed, self.shuffled, self.labels, self.mixture = n, seed, shuffled, labels, mixture
        self.window = window  # file order shuffled within windows of this many records (0: none)
        self.factors: np.ndarray | None = None  # detection's repeat factors (balance='class')
        self._cache: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def get(self, epoch: int) -> np.ndarray:
        with self._lock:
            if epoch not in self._cache:
                if len(self._cache) >= 2:  # parallel reads straddle at most one epoch boundary
                    del self._cache[min(self._cache)]
                n = self.n
                if self.mixture is not None:
                    mix = self.mixture
                    self._cache[epoch] = mixture_order(mix.sizes, mix.counts, self.seed, epoch)
                elif self.labels is not None:
                    self._cache[epoch] = balanced_order(self.labels, self.seed, epoch)
                elif self.factors is not None:
                    self._cache[epoch] = repeat_factor_order(self.factors, self.seed, epoch)
                elif self.shuffled:
                    self._cache[epoch] = global_order(n, self.seed, epoch)
                else:
                    self._cache[epoch] = window_order(n, self.window, self.seed, epoch)
            return self._cache[epoch]
