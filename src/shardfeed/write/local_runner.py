"""The local runner: shards encoded by a process pool on this machine and written here, in order.

Chunks of items are cut and submitted lazily (no per-item task list is ever built); results come
back in submission order, so each shard's records are written in plan order as they arrive.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Executor

from tqdm import tqdm

from shardfeed.write.encode import EncodedRecord, SkippedItem, encode_items
from shardfeed.write.planning import ShardPlan
from shardfeed.write.pool import CHUNK_SIZE, map_ordered
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
    check: Callable[[Results], None],
) -> dict[str, ShardResult]:
    """Writes the `pending` shards; `total` images in the whole plan (for the progress bar);
    `check` sees each chunk of results first (strict mode raises there)."""
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
    with bar:
        for i, group in itertools.groupby(_encoded(pending, target, pool, workers, bar, check), key=lambda p: p[0]):
            plan = pending[i]
            done[plan.file] = target.write(plan.split, plan.file, (r for _, r in group)).without_records()
    return done


def _encoded(
    pending: list[ShardPlan],
    target: WriteTarget,
    pool: Executor | None,
    workers: int,
    bar: tqdm,
    check: Callable[[Results], None],
) -> Iterator[tuple[int, EncodedRecord | SkippedItem]]:
    """(plan number, result) for every item of `pending`, in plan order."""
    tasks = (
        (i, (plan.items[j : j + CHUNK_SIZE], target.spec))
        for i, plan in enumerate(pending)
        for j in range(0, len(plan.items), CHUNK_SIZE)
    )
    for i, chunk in map_ordered(pool, encode_items, tasks, workers):
        bar.update(len(chunk))
        check(chunk)
        yield from ((i, r) for r in chunk)
