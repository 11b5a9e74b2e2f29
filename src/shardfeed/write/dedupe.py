"""Exact-duplicate removal (`dedupe=True`): which later inputs are byte-for-byte copies of earlier ones."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Executor

from shardfeed.write.encode import EncodingSpec, hash_items
from shardfeed.write.items import Discovery, Item
from shardfeed.write.pool import CHUNK_SIZE, map_ordered


def source_hashes(items: list[Item], spec: EncodingSpec, pool: Executor | None, workers: int) -> Iterator[str | None]:
    """SHA-256 of each item's source bytes (None if unreadable), in order, read and hashed by the
    worker pool in chunks."""
    chunks = (items[i : i + CHUNK_SIZE * 4] for i in range(0, len(items), CHUNK_SIZE * 4))
    tasks = ((None, (chunk, spec)) for chunk in chunks)
    return itertools.chain.from_iterable(result for _, result in map_ordered(pool, hash_items, tasks, workers))


def find_duplicates(
    spec: EncodingSpec, discovery: Discovery, pool: Executor | None, workers: int
) -> list[tuple[str, str]]:
    """Returns (dropped key, kept key) for each later exact copy of an earlier input.

    Only inputs whose size some other input shares are read and hashed (exact copies have
    equal sizes), so a folder with few duplicates costs a stat per file, not a second read.
    """
    sizes = Counter(item.size for item in discovery.items)
    candidates = [item for item in discovery.items if sizes[item.size] > 1]
    hashes = source_hashes(candidates, spec, pool, workers)
    first: dict[str, str] = {}
    dropped = []
    for item, digest in zip(candidates, hashes, strict=True):
        if digest is None:
            continue
        if digest in first:
            dropped.append((item.key, first[digest]))
        else:
            first[digest] = item.key
    return dropped
