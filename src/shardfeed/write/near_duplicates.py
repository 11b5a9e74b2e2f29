"""Near-duplicate groups: images whose perceptual hashes (write/perceptual_hash.py) differ in at
most `radius` bits, found without comparing all pairs.

The index is exact Hamming search by the pigeonhole principle: split the 64 bits into 4 blocks of
16. Two hashes within 3 bits agree exactly on some block; within 7 bits, some block differs in at
most 1 bit. So per block the hashes are sorted by that block's value, and each is compared with
the run of hashes whose block equals its own (radius <= 3) or its own with one of 16 bits flipped
(radius 4..7); every candidate is checked on all 64 bits. Memory is some 110 bytes a hash for
each block searched at once (two on two cores), and the candidate pairs are checked in bounded
chunks; time grows with the sum of squared run sizes, about N^2 / 65536 per block and probe for
evenly spread hashes (docs/benchmarks.md: 1.3 M hashes).

Groups are the connected components of the pairs found (a union-find), so a chain of small edits
can join images further apart than `radius`: each group lists its pairs with their distances. A
group whose members fall in more than one split is a leak: validation holds a near-copy of a
training image.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from shardfeed.errors import OptionError

BLOCK_BITS = 16
BLOCKS = 64 // BLOCK_BITS
MAX_RADIUS = 2 * BLOCKS - 1  # 7: within it some block differs in at most one bit
DEFAULT_RADIUS = 6  # measured: docs/benchmarks.md, "near-duplicates"
CHUNK_PAIRS = 1 << 20  # candidate pairs checked at once (some 50 MB of temporaries)
THREADED_FROM = 100_000
PAIRS_SHOWN = 50  # pairs listed per group in report.json


def close_pairs(hashes: np.ndarray, radius: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, distance), i < j, of every pair of `hashes` (uint64) at most `radius` bits apart,
    sorted by (i, j). From THREADED_FROM hashes the blocks are searched on up to BLOCKS threads
    (NumPy's sorts, gathers and comparisons release the GIL: 1.9x quicker on two cores at 1.3 M
    hashes, for twice the temporaries; at 10,000 the threads only contend)."""
    if not 0 <= radius <= MAX_RADIUS:
        raise OptionError(f"radius must be in 0..{MAX_RADIUS} bits, got {radius}")
    hashes = np.ascontiguousarray(hashes, dtype=np.uint64)
    threads = min(BLOCKS, os.cpu_count() or 1) if len(hashes) >= THREADED_FROM else 1
    with ThreadPoolExecutor(threads) as pool:
        blocks = pool.map(lambda block: _block_pairs(hashes, block, radius), range(BLOCKS))
        found = [pairs for block in blocks for pairs in block if len(pairs)]
    if not found:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    pairs = np.sort(np.concatenate(found))  # (not np.unique: it imports numpy.ma, 10 ms)
    pairs = pairs[np.concatenate(([True], pairs[1:] != pairs[:-1]))]  # a pair found in two blocks
    i, j = pairs // len(hashes), pairs % len(hashes)
    return i, j, np.bitwise_count(hashes[i] ^ hashes[j]).astype(np.int64)


def _block_pairs(hashes: np.ndarray, block: int, radius: int) -> list[np.ndarray]:
    """The pairs within `radius` that agree on `block` exactly (radius < BLOCKS) or but for one
    bit (`_probe`)."""
    keys = ((hashes >> np.uint64(BLOCK_BITS * block)) & np.uint64(0xFFFF)).astype(np.int64)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    # where each block value's run starts in `ordered` (a table of 65,537: a gather per probe
    # instead of two binary searches: 2.5x quicker at 10,000 hashes, docs/benchmarks.md)
    starts = np.concatenate(([0], np.cumsum(np.bincount(ordered, minlength=1 << BLOCK_BITS))))
    runs = _Runs(hashes, order, ordered, starts, radius)
    flips = [] if radius < BLOCKS else [1 << b for b in range(BLOCK_BITS)]
    return [pairs for flip in [0, *flips] for pairs in runs.probe(flip)]


class _Runs:
    """One block's hashes sorted by the block's value, with the table of where each value's run
    starts, probed for the pairs whose values differ by a given bit (or agree)."""

    def __init__(self, hashes: np.ndarray, order: np.ndarray, ordered: np.ndarray, starts: np.ndarray, radius: int):
        self.hashes, self.order, self.ordered, self.radius = hashes, order, ordered, radius
        self.starts, self.ends = starts[:-1], starts[1:]

    def probe(self, flip: int) -> list[np.ndarray]:
        """Pairs (as i * n + j, i < j) within `radius` among each hash and the later ones in
        sorted order whose block value is its own XOR `flip`: for flip 0 the rest of its own run;
        else, probed from the hashes with the `flip` bit clear only (their partners sort later),
        so each pair is seen once. Only the probes that find a run are expanded."""
        n = len(self.ordered)
        if flip == 0:
            at = np.arange(n)
            lo, hi = at + 1, self.ends[self.ordered]
        else:
            at = np.flatnonzero((self.ordered & flip) == 0)
            target = self.ordered[at] | flip
            lo, hi = self.starts[target], self.ends[target]
        found = np.flatnonzero(hi > lo)
        at, lo, counts = at[found], lo[found], (hi - lo)[found]
        ends = np.cumsum(counts)
        out, start = [], 0
        while start < len(counts):
            stop = max(int(np.searchsorted(ends, (ends[start - 1] if start else 0) + CHUNK_PAIRS, "right")), start + 1)
            c = counts[start:stop]
            a = np.repeat(at[start:stop], c)
            b = np.repeat(lo[start:stop] - (np.cumsum(c) - c), c) + np.arange(len(a))
            ia, ib = self.order[a], self.order[b]
            close = np.bitwise_count(self.hashes[ia] ^ self.hashes[ib]) <= self.radius
            ia, ib = ia[close], ib[close]
            out.append(np.minimum(ia, ib) * n + np.maximum(ia, ib))
            start = stop
        return out


def components(n: int, i: np.ndarray, j: np.ndarray) -> list[list[int]]:
    """The groups (sorted lists of indices, ordered by their first) joined by the pairs (i, j)."""
    parent: dict[int, int] = {}

    def root(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in zip(i.tolist(), j.tolist(), strict=True):
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, list[int]] = {}
    for x in parent:
        groups.setdefault(root(x), []).append(x)
    return sorted(sorted(g) for g in groups.values())


def groups_in(
    records: Callable[[], Iterable[tuple[str, str | None, str]]], radius: int, hashes: np.ndarray | None = None
) -> list[dict[str, Any]]:
    """Near-duplicate groups among the (key, perceptual hash or None, split) records `records()`
    yields, for report.json: each with its files, splits, `leak` when they span splits, its pairs'
    distances (the first PAIRS_SHOWN) and the largest. Two passes over `records()`: the hashes
    into one uint64 array first (0: none; `hashes`: that array, made by the caller), then only
    the grouped records' keys and splits (memory bounded by some 50 bytes a record, not by its key)."""
    every = hashes if hashes is not None else np.fromiter((int(h, 16) if h else 0 for _, h, _ in records()), np.uint64)
    where = np.flatnonzero(every)  # 0: no hash (a hash has 32 bits set, never none)
    i, j, d = close_pairs(every[where], radius)
    if not len(i):
        return []
    grouped = components(len(where), i, j)
    wanted = {int(where[x]) for g in grouped for x in g}
    named = {p: (key, split) for p, (key, _, split) in enumerate(records()) if p in wanted}
    by_root = {x: g[0] for g in grouped for x in g}
    edges: dict[int, list[tuple[int, int, int]]] = {}
    for a, b, dist in zip(i.tolist(), j.tolist(), d.tolist(), strict=True):
        edges.setdefault(by_root[a], []).append((a, b, dist))
    out = []
    for g in grouped:
        members = sorted(named[int(where[x])] for x in g)
        group_splits = sorted({s for _, s in members})
        names = [(sorted((named[int(where[a])][0], named[int(where[b])][0])), d) for a, b, d in edges[g[0]]]
        pairs = sorted((first, second, d) for (first, second), d in names)
        out.append(
            {
                "files": [k for k, _ in members],
                "splits": group_splits,
                "leak": len(group_splits) > 1,
                "max_distance": max(p[2] for p in pairs),
                "pairs": [list(p) for p in pairs[:PAIRS_SHOWN]],
            }
        )
    return sorted(out, key=lambda g: g["files"])
