"""Reading order without TensorFlow: the seeded global permutation, even worker splits, samplers.

`global_order` is shared by `IndexedRecords` (PyTorch, JAX/Grain) and `load` with
`ReadConfig(shuffle="global")`, so every framework sees the same order for a (seed, epoch);
`worker_positions` cuts an epoch into even per-worker parts; `buffer_shuffle` is the tf.data
shuffle buffer both `load` pipelines use.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

EVEN_MODES = ("drop", "pad")
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, vectorised (a stable, well-mixed 64-bit hash)."""
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        return x ^ (x >> np.uint64(31))


def global_order(num_records: int, seed: int, epoch: int) -> np.ndarray:
    """The record numbers of one epoch in shuffled order: a pure function of (seed, epoch).

    Records are sorted by a 64-bit hash of (seed, epoch, record number). Written out here rather
    than taken from NumPy's Generator, whose streams may change between NumPy versions; a golden
    test pins the order.
    """
    salt = _splitmix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], np.uint64))[0]
    salt = _splitmix64(np.array([salt ^ np.uint64(epoch & 0xFFFFFFFFFFFFFFFF)], np.uint64))[0]
    keys = _splitmix64(np.arange(num_records, dtype=np.uint64) ^ salt)
    return np.argsort(keys, kind="stable").astype(np.int64)


def worker_positions(num_records: int, num_workers: int, worker_index: int, even: str = "drop") -> np.ndarray:
    """Which positions of an epoch's order worker `worker_index` reads: every num_workers-th.

    Every worker gets the same count: 'drop' leaves out the last (num_records % num_workers)
    positions, 'pad' wraps around to the start so each worker gets ceil(num_records / num_workers).

    Raises:
        ValueError: bad worker index or mode.
    """
    if even not in EVEN_MODES:
        raise ValueError(f"even must be one of {list(EVEN_MODES)}, got {even!r}")
    if num_workers < 1 or not 0 <= worker_index < num_workers:
        raise ValueError(f"worker_index must be in 0..{num_workers - 1} for {num_workers} workers, got {worker_index}")
    per_worker = num_records // num_workers if even == "drop" else -(-num_records // num_workers)
    return (np.arange(per_worker, dtype=np.int64) * num_workers + worker_index) % max(num_records, 1)


class GlobalOrderSampler:
    """Record numbers of one epoch of the global order for one worker; `set_epoch` moves on.

    Needs no torch: DataLoader takes any iterable with a length as its sampler. The order is
    the one `load(seed=seed, read=ReadConfig(shuffle="global"))` reads, so TensorFlow and
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
        self.positions = worker_positions(num_records, num_workers, worker_index, even)

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
    iteration; 0 leaves it in order (see `ReadConfig.buffer_size`)."""
    return ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True) if buffer else ds
