"""The by-index pipeline: records read through the index files in a pure (seed, epoch) order.

Used for the global shuffle (a seeded permutation of the whole split each epoch) and for even
splits (the same record count on every worker). Each element is read by a `tf.numpy_function`
call that fetches INDEXED_CHUNK records at once through `IndexedRecords`:

    (epoch, chunk start) -> INDEXED_CHUNK serialized records in this epoch's order, this worker's share
    (record, seed)       -> seed pair (seed, epoch * N + position), made in the same Python call:
                            a pure function, so a resumed run augments identically
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import numpy as np

from shardfeed.lazy import tensorflow
from shardfeed.read.indexed import IndexedRecords
from shardfeed.read.mixture import MixedRecords, MixedSplit
from shardfeed.read.order import balanced_order, buffer_shuffle, global_order, mixture_order
from shardfeed.read.plan import ReadPlan
from shardfeed.read.record_labels import record_labels

INDEXED_CHUNK = 64  # records per Python call when reading by index


def indexed_records(plan: ReadPlan) -> Any:
    """(serialized record, seed pair) elements read by index, from (read.epoch, start_step) on.

    Training reads the global order of each epoch (or, with shuffle='buffer' and even splits,
    this worker's records in file order through a shuffle buffer); evaluation reads file order.
    The seed pair of each record is (seed, epoch * N + position): also a pure function of (seed, epoch), so a
    resumed run augments exactly as the interrupted one would have.
    """
    tf = tensorflow()
    read = plan.read
    if plan.shards.manifest is None:  # the plan only reads by index for converted folders
        raise TypeError("indexed_records needs a plan over a converted folder")
    records: IndexedRecords | MixedRecords
    if plan.mixture is not None:
        records = MixedRecords(plan.mixture, plan.split)
    else:
        records = IndexedRecords(plan.shards.manifest, plan.split)
    n, epoch, skip = plan.epoch_records, read.epoch, read.start_step * plan.batch_size
    positions = plan.share.positions(n)
    resumed = plan.share.positions(n, read.start_record)  # the first epoch's: after what all workers read
    labels = record_labels(plan.shards.manifest, plan.split) if read.balance and plan.training else None
    orders = _EpochOrders(
        n, plan.base_seed, shuffled=read.order == "global" and plan.training, labels=labels, mixture=plan.mixture
    )

    def read_chunk(epoch_number: np.ndarray, begin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mine = resumed if int(epoch_number) == epoch else positions
        chosen = mine[int(begin) : int(begin) + INDEXED_CHUNK]
        order = orders.get(int(epoch_number))
        blobs = np.array([records.record(int(order[p])) for p in chosen], dtype=object)
        keys = int(epoch_number) * n + chosen
        return blobs, np.stack([np.full_like(keys, plan.base_seed), keys], axis=1)

    def chunks(epoch_number: Any) -> Any:
        first = tf.where(epoch_number == epoch, tf.constant(skip, tf.int64), tf.constant(0, tf.int64))
        last = tf.where(
            epoch_number == epoch, tf.constant(len(resumed), tf.int64), tf.constant(len(positions), tf.int64)
        )
        begins = tf.data.Dataset.range(first, last, INDEXED_CHUNK)
        return begins.map(lambda begin: (epoch_number, begin))

    def read_chunks(epoch_number: Any, begin: Any) -> tuple[Any, Any]:
        blobs, seeds = tf.numpy_function(read_chunk, [epoch_number, begin], (tf.string, tf.int64), stateful=False)
        return tf.ensure_shape(blobs, [None]), tf.ensure_shape(seeds, [None, 2])

    # (epoch, chunk start) pairs, each read by one Python call of INDEXED_CHUNK records. A
    # numpy_function map, not from_generator: the generator source cost ~75% more CPU per image
    # here, even with the records already in memory (see docs/benchmarks.md).
    ds = (
        _epoch_numbers(epoch, plan.repeat)
        .flat_map(chunks)
        .map(read_chunks, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .unbatch()
    )
    if plan.training and read.order == "buffer" and plan.mixture is None:  # even splits, asked for a buffer
        ds = buffer_shuffle(ds, read.buffer_size(len(positions)), plan.seed)
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
        self, n: int, seed: int, shuffled: bool, labels: np.ndarray | None = None, mixture: MixedSplit | None = None
    ) -> None:
        self.n, self.seed, self.shuffled, self.labels, self.mixture = n, seed, shuffled, labels, mixture
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
                else:
                    self._cache[epoch] = global_order(n, self.seed, epoch) if self.shuffled else np.arange(n)
            return self._cache[epoch]
