"""Reading order without TensorFlow: the seeded global permutation, even worker splits, samplers.

`global_order` is shared by `IndexedRecords` (PyTorch, JAX/Grain) and `load` with
`ReadOptions(shuffle="global")`, so every framework sees the same order for a (seed, epoch);
`WorkerShare` is the one answer to "which part of a split does this worker read": whole shards,
or (with `even`) every num_workers-th position of an epoch; `buffer_shuffle` is the shard
pipeline's tf.data shuffle buffer, `window_order` its counterpart for even splits.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardfeed.errors import OptionError

EVEN_MODES = ("drop", "pad")
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, vectorised (a stable, well-mixed 64-bit hash)."""
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        return x ^ (x >> np.uint64(31))


def _epoch_salt(seed: int, epoch: int, tag: int = 0) -> np.uint64:
    """One 64-bit value from (seed, epoch), per order kind (`tag`: 0 for the global order, whose
    value a golden test pins; other constants keep the other orders independent of it)."""
    salt = _splitmix64(np.array([(seed & 0xFFFFFFFFFFFFFFFF) ^ tag], np.uint64))[0]
    return _splitmix64(np.array([salt ^ np.uint64(epoch & 0xFFFFFFFFFFFFFFFF)], np.uint64))[0]


def global_order(num_records: int, seed: int, epoch: int) -> np.ndarray:
    """The record numbers of one epoch in shuffled order: a pure function of (seed, epoch).

    Records are sorted by a 64-bit hash of (seed, epoch, record number). Written out here rather
    than taken from NumPy's Generator, whose streams may change between NumPy versions; a golden
    test pins the order.
    """
    salt = _epoch_salt(seed, epoch)
    keys = _splitmix64(np.arange(num_records, dtype=np.uint64) ^ salt)
    return np.argsort(keys, kind="stable").astype(np.int64)


def record_uniforms(seed: int, epoch: int, positions: np.ndarray, count: int) -> np.ndarray:
    """[len(positions), count] numbers in [0, 1): a pure function of (seed, epoch, position), the
    per-record randomness of the TensorFlow-free pipeline (read/grain/pipeline.py); a hash, so
    drawing them costs no generator per record."""
    keys: np.ndarray = positions.astype(np.uint64)[:, None] * np.uint64(count) + np.arange(count, dtype=np.uint64)
    hashed = _splitmix64(np.bitwise_xor(keys, _epoch_salt(seed, epoch, 0xA06)))
    return (hashed >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def window_order(num_records: int, window: int, seed: int, epoch: int) -> np.ndarray:
    """Record numbers in file order, shuffled within consecutive windows of `window` records: a
    pure function of (seed, epoch) that moves records about as far as a shuffle buffer of that
    size would (what even splits with shuffle='buffer' read; a tf.data shuffle made anew for
    each epoch could not be seeded per epoch). 0 or 1: file order."""
    numbers = np.arange(num_records, dtype=np.int64)
    if window <= 1:
        return numbers
    keys = _splitmix64(numbers.astype(np.uint64) ^ _epoch_salt(seed, epoch, 0xB0F))
    return np.lexsort((keys, numbers // window)).astype(np.int64)


def balanced_order(labels: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """Record numbers for one class-balanced epoch: a pure function of (labels, seed, epoch).

    The epoch keeps the split's length n, shared equally by the classes that have records: each
    gets n // K positions (the first n % K classes of a seeded class order one more). A class
    with fewer records than its share repeats every record floor(share / count) times and adds a
    seeded choice of the rest, without repeats; a larger class contributes a seeded choice of
    `share` records, a new one each epoch. The positions are then shuffled (seeded), so the
    proportions hold exactly per epoch, with no rejection.
    """
    n = len(labels)
    classes, inverse = np.unique(labels, return_inverse=True)
    if n == 0:
        return np.zeros(0, np.int64)
    salt = _epoch_salt(seed, epoch, 0xB1A5)
    keys = _splitmix64(np.arange(n, dtype=np.uint64) ^ salt)  # one seeded key per record
    base, extra = divmod(n, len(classes))
    class_rank = np.argsort(_splitmix64(np.arange(len(classes), dtype=np.uint64) ^ salt), kind="stable")
    shares = np.full(len(classes), base, np.int64)
    shares[class_rank[:extra]] += 1
    chosen = []
    for c in range(len(classes)):
        members = np.flatnonzero(inverse == c)
        members = members[np.argsort(keys[members], kind="stable")]  # this epoch's seeded order
        repeats, rest = divmod(int(shares[c]), len(members))
        chosen.append(np.concatenate([np.tile(members, repeats), members[:rest]]))
    picked = np.concatenate(chosen).astype(np.int64)
    shuffle_keys = _splitmix64(np.arange(len(picked), dtype=np.uint64) ^ (salt ^ np.uint64(0x5EED)))
    return picked[np.argsort(shuffle_keys, kind="stable")]


REPEAT_THRESHOLD = 0.001  # LVIS' t: classes on fewer than this share of images are repeated


def repeat_factors(classes: list[np.ndarray], threshold: float = REPEAT_THRESHOLD) -> np.ndarray:
    """LVIS' repeat factor of each image (Gupta et al. 2019, as Detectron2 computes it): a class
    c on a share f_c of the images has r_c = max(1, sqrt(t / f_c)); an image's factor is the
    largest r_c of its classes (1 for an image without objects)."""
    n = max(1, len(classes))
    counts: dict[int, int] = {}
    for present in classes:
        for c in present.tolist():
            counts[c] = counts.get(c, 0) + 1
    per_class = {c: max(1.0, math.sqrt(threshold / (k / n))) for c, k in counts.items()}
    return np.array([max((per_class[c] for c in p.tolist()), default=1.0) for p in classes], np.float64)


def repeat_factor_order(factors: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """Record numbers for one repeat-factor epoch: a pure function of (factors, seed, epoch).

    The epoch keeps the split's length n (so steps per epoch stay known), and image i fills
    n * r_i / sum(r) of its places in expectation: systematic sampling (one seeded offset, then
    evenly spaced points on the cumulative factors) gives each image the floor or the ceiling
    of its share, never more spread, then the places are shuffled (seeded)."""
    n = len(factors)
    if n == 0:
        return np.zeros(0, np.int64)
    salt = _epoch_salt(seed, epoch, 0x4F4A)
    offset = float(_splitmix64(np.array([salt], np.uint64))[0] >> np.uint64(11)) / float(1 << 53)
    cumulative = np.cumsum(factors / factors.sum()) * n
    picked = np.searchsorted(cumulative, offset + np.arange(n), side="right").astype(np.int64)
    shuffle_keys = _splitmix64(np.arange(n, dtype=np.uint64) ^ salt)
    return np.minimum(picked, n - 1)[np.argsort(shuffle_keys, kind="stable")]


def mixture_order(sizes: list[int], counts: list[int], seed: int, epoch: int) -> np.ndarray:
    """One mixed epoch: ids into the sources laid end to end (source i's records numbered from
    sum(sizes[:i])), a pure function of (sizes, counts, seed, epoch).

    Source i gives exactly counts[i] records per mixed epoch, in a seeded interleaving of all
    sources' places. Each source's records come from its own endless stream of global orders
    (seed + i): the k-th of source i in mixed epoch e is its stream's record e * counts[i] + k, so
    a source smaller than its count repeats a whole order before any record comes back, and a
    larger one moves on through its order from one mixed epoch to the next.
    """
    bases = np.cumsum([0, *sizes])[:-1]
    tags = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    salt = _epoch_salt(seed, epoch, 0x313C)
    tags = tags[np.argsort(_splitmix64(np.arange(len(tags), dtype=np.uint64) ^ salt), kind="stable")]
    out = np.empty(len(tags), np.int64)
    for i, (size, count) in enumerate(zip(sizes, counts, strict=True)):
        stream = epoch * count + np.arange(count, dtype=np.int64)  # positions in source i's stream
        own_epochs, positions = np.divmod(stream, size)
        picked = np.empty(count, np.int64)
        for own in np.unique(own_epochs):
            mask = own_epochs == own
            picked[mask] = global_order(size, seed + i, int(own))[positions[mask]]
        out[tags == i] = bases[i] + picked
    return out


@dataclass(frozen=True)
class WorkerShare:
    """Which part of a split one input pipeline reads: worker `index` of `count`.

    Without `even`, whole shards round robin (`shard_numbers`); with it, records: every
    count-th position of an epoch's order (`positions`), the same number for every worker:
    'drop' leaves out the last (records % count) positions, 'pad' wraps around to the start so
    each worker gets ceil(records / count) (works with fewer shards than workers).

    Raises:
        OptionError: a bad count, index or mode (on construction).
    """

    count: int = 1
    index: int = 0
    even: str | None = None

    def __post_init__(self) -> None:
        if self.even is not None and self.even not in EVEN_MODES:
            raise OptionError(f"even must be None, 'drop' or 'pad', got {self.even!r}")
        if self.count < 1 or not 0 <= self.index < self.count:
            raise OptionError(f"worker_index must be in 0..{self.count - 1} for {self.count} workers, got {self.index}")

    @property
    def is_part(self) -> bool:
        """More than one worker shares the split."""
        return self.count > 1

    def records(self, num_records: int, start: int = 0) -> int:
        """How many positions of an epoch this worker reads (`even` split; 'drop' by default),
        from position `start` on (the records all workers consumed before a resume)."""
        left = max(num_records - start, 0)
        return left // self.count if self.even != "pad" else -(-left // self.count)

    def positions(self, num_records: int, start: int = 0) -> np.ndarray:
        """The positions of an epoch's order this worker reads (`even` split; 'drop' by default).

        Worker i of N reads positions start + i, start + i + N, ...: after K batches of b records
        each, N workers together have read exactly the first start + N·K·b positions. That prefix
        is what makes a resume elastic: M workers continue from it (`start`), each reading every
        M-th of the positions left, and the epoch's records are read once, whatever N and M.
        """
        per_worker = self.records(num_records, start)
        return (start + np.arange(per_worker, dtype=np.int64) * self.count + self.index) % max(num_records, 1)

    def shard_numbers(self, num_shards: int) -> range:
        """The whole shards this worker reads (round robin).

        Raises:
            OptionError: fewer shards than workers.
        """
        if num_shards < self.count:
            raise OptionError(
                f"{num_shards} shards cannot be split across {self.count} workers (each worker reads whole "
                f"shards); convert again with shards={self.count} (--shards {self.count}) or a multiple of it, "
                "or read with ReadOptions(even=...)"
            )
        return range(self.index, num_shards, self.count)


def worker_positions(num_records: int, num_workers: int, worker_index: int, even: str = "drop") -> np.ndarray:
    """Which positions of an epoch's order worker `worker_index` of `num_workers` reads
    (`WorkerShare.positions`, for callers without a share at hand).

    Raises:
        OptionError: bad worker index or mode.
    """
    return WorkerShare(num_workers, worker_index, even).positions(num_records)


class GlobalOrderSampler:
    """Record numbers of one epoch of the global order for one worker; `set_epoch` moves on.

    Needs no torch: DataLoader takes any iterable with a length as its sampler. The order is
    the one `load(seed=seed, read=ReadOptions(shuffle="global"))` reads, so TensorFlow and
    PyTorch runs agree.
    """

    def __init__(
        self,
        num_records: int,
        seed: int,
        num_workers: int = 1,
        worker_index: int = 0,
        even: str = "drop",
        epoch: int = 0,
    ) -> None:
        self.num_records, self.seed, self.epoch = num_records, seed, epoch
        self.positions = WorkerShare(num_workers, worker_index, even).positions(num_records)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.positions)

    def order(self) -> np.ndarray:
        """This worker's record numbers for the current epoch."""
        return global_order(self.num_records, self.seed, self.epoch)[self.positions]

    def __iter__(self) -> Iterator[int]:
        return iter(self.order().tolist())


def buffer_shuffle(ds: Any, buffer: int, seed: int | None) -> Any:
    """`ds` (a tf.data.Dataset) through a shuffle buffer of `buffer` records, reshuffled each
    iteration; 0 leaves it in order (see `ReadOptions.buffer_size`)."""
    return ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True) if buffer else ds
