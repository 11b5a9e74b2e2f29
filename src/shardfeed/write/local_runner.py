"""The local runner: shards encoded and written by a process pool on this machine.

With enough shards to keep every worker busy, each worker encodes and writes whole shards (as the
Beam workers do), so the image bytes never cross a process boundary: only the shard's summary
comes back. Otherwise (few shards, or strict mode, which stops at the first bad input) chunks of
items are cut and submitted lazily (no per-item task list is ever built), results come back in
submission order, and this process writes each shard's records in plan order as they arrive.
Either way the shard bytes are the same: `WriteTarget.write` over the same records in order.
A worker that dies (an input that crashes native code) breaks the pool: the shards it may have
held are written from `isolation.isolated_results`, which reports the input that kills its
process, and a new pool writes the rest.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from concurrent.futures.process import BrokenProcessPool

from tqdm import tqdm

from shardfeed.parallel import CHUNK_SIZE, WorkerPool, map_ordered
from shardfeed.write import isolation
from shardfeed.write.encode import EncodedRecord, SkippedItem, encode_items
from shardfeed.write.planning import ShardPlan
from shardfeed.write.shards import ShardResult, WriteTarget

Results = list[EncodedRecord | SkippedItem]


def write_shards(
    pending: list[ShardPlan],
    target: WriteTarget,
    pool: Executor | None,
    *,
    workers: int,
    total: int,
    progress: bool,
    check: Callable[[Results], None] | None = None,
) -> dict[str, ShardResult]:
    """Writes the `pending` shards; `total` images in the whole plan (for the progress bar);
    `check`, when given, sees each chunk of results before it is written (strict mode raises
    there), which keeps the writing in this process."""
    bar = tqdm(
        total=total,
        initial=total - sum(len(p.items) for p in pending),
        unit="img",
        desc="convert",
        file=sys.stderr,
        disable=not progress,
        smoothing=0.1,
    )
    done: dict[str, ShardResult] = {}
    with bar, contextlib.ExitStack() as fresh_pools:
        while True:
            left = [plan for plan in pending if plan.file not in done]
            try:
                _write_pooled(left, target, pool, workers, bar, check, done)
                return done
            except BrokenProcessPool:  # a worker died: the input it held is found, the rest goes on
                assert pool is not None
                pool.shutdown(wait=True, cancel_futures=True)  # its workers gone: none still writes a shard
                done.update({p.file: r for p in left if (r := target.committed(p.file)) is not None})
                _isolate_suspects(left, target, workers, bar, check, done)
                pool = fresh_pools.enter_context(WorkerPool(workers))


def _write_pooled(
    pending: list[ShardPlan],
    target: WriteTarget,
    pool: Executor | None,
    workers: int,
    bar: tqdm,
    check: Callable[[Results], None] | None,
    done: dict[str, ShardResult],
) -> None:
    """Writes `pending` into `done` with `pool` (whole shards per worker, or chunks whose records
    this process writes: see the module docstring)."""
    if pool is not None and check is None and len(pending) >= 2 * workers and _shared(target.output_dir):
        tasks = ((i, (target, plan)) for i, plan in enumerate(pending))
        for i, result in map_ordered(pool, write_whole_shard, tasks, workers):
            bar.update(len(pending[i].items))
            done[pending[i].file] = result
        return
    for i, group in itertools.groupby(_encoded(pending, target, pool, workers, bar, check), key=lambda p: p[0]):
        plan = pending[i]
        done[plan.file] = target.write(plan.split, plan.file, (r for _, r in group)).without_records()


def _isolate_suspects(
    left: list[ShardPlan],
    target: WriteTarget,
    workers: int,
    bar: tqdm,
    check: Callable[[Results], None] | None,
    done: dict[str, ShardResult],
) -> None:
    """After a pool worker died: the shards that may have been in flight (the first two per
    worker not written: `map_ordered` keeps no more in flight) are written from
    `isolation.isolated_results`, which reports the item that kills its process."""
    for plan in [plan for plan in left if plan.file not in done][: 2 * workers]:
        results = list(isolation.isolated_results(plan.items, target.spec))
        if check is not None:
            check(results)
        bar.update(min(len(plan.items), bar.total - bar.n))  # chunks of it may have been counted
        done[plan.file] = target.write(plan.split, plan.file, iter(results)).without_records()


def _shared(output_dir: str) -> bool:
    """Whether files a worker process writes there are seen here (not so for ram://, which is
    memory of the process that writes it)."""
    return not output_dir.startswith("ram://")


def write_whole_shard(target: WriteTarget, plan: ShardPlan) -> ShardResult:
    """Encodes and writes one shard in this (worker) process; its summary without the records."""
    return target.write_items(plan.split, plan.file, plan.items).without_records()


def _encoded(
    pending: list[ShardPlan],
    target: WriteTarget,
    pool: Executor | None,
    workers: int,
    bar: tqdm,
    check: Callable[[Results], None] | None,
) -> Iterator[tuple[int, EncodedRecord | SkippedItem]]:
    """(plan number, result) for every item of `pending`, in plan order."""
    tasks = (
        (i, (plan.items[j : j + CHUNK_SIZE], target.spec))
        for i, plan in enumerate(pending)
        for j in range(0, len(plan.items), CHUNK_SIZE)
    )
    for i, chunk in map_ordered(pool, encode_items, tasks, workers):
        bar.update(len(chunk))
        if check is not None:
            check(chunk)
        yield from ((i, r) for r in chunk)
