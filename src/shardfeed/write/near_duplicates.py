"""Near-duplicate groups: images whose perceptual hashes (write/perceptual_hash.py) differ in at
most `radius` bits, found without comparing all pairs.

An image's hash has two 64-bit halves, its whole frame's and its central window's; two images are
as far apart as the closest of whole vs whole and whole vs window either way (`distances`). The
search runs over all the halves at once, and each pair of halves found within the radius, but for
window vs window, pairs their two images (`search_images`).

The index is exact Hamming search by the pigeonhole principle: split the 64 bits into 4 blocks of
16. Two hashes within 3 bits agree exactly on some block; within 7 bits, some block differs in at
most 1 bit. So per block the hashes are sorted by that block's value, and each is compared with
the run of hashes whose block equals its own (radius <= 3) or its own with one of 16 bits flipped
(radius 4..7); every candidate is checked on all 64 bits. Memory is some 250 bytes a hash (500 an image) in
all (two blocks searched at once on two cores), and the candidate pairs are checked in bounded
chunks; time grows with the sum of squared run sizes, about N^2 / 65536 per block and probe for
evenly spread hashes (docs/benchmarks/near_duplicates.md: 1.3 M images of two halves, 41 s, 640 MB).

Groups are the connected components of the pairs found (`link`: a union-find over the distinct
hashes, fed the pairs a chunk at a time), so a chain of small edits can join images further apart
than `radius`; each group lists its first pairs with their distances. Memory stays bounded by the
number of hashes however many pairs there are (5,000 copies of a placeholder image make 12.5 M; a
still camera's frames, a dense cluster of distinct hashes). A group whose members fall in more
than one split is a leak: validation holds a near-copy of a training image.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np

from shardfeed.errors import OptionError
from shardfeed.write import perceptual_hash

BLOCK_BITS = 16
BLOCKS = 64 // BLOCK_BITS
MAX_RADIUS = 2 * BLOCKS - 1  # 7: within it some block differs in at most one bit
DEFAULT_RADIUS = 6  # measured: docs/benchmarks/near_duplicates.md, "near-duplicates"
CHUNK_PAIRS = 1 << 20  # candidate pairs checked at once (some 50 MB of temporaries)
THREADED_FROM = 100_000
PROBED_TOGETHER_BELOW = 4096  # fewer hashes: a block's 17 probes are expanded in one pass (`_Runs.probe`)
PAIRS_SHOWN = 50  # pairs listed per group in report.json
KEPT_PAIRS = 1 << 20  # pairs kept for the report; beyond, only those that join groups (`link`)


def close_pairs(hashes: np.ndarray, radius: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, distance), i < j, of every pair of images at most `radius` bits apart (`hashes`:
    uint64, one an image or (whole, window) rows, `distances`), sorted by (i, j): all of them in
    memory (`link` keeps memory bounded where there are many)."""
    rows = _as_rows(hashes)
    found: list[np.ndarray] = []
    search_images(rows, radius, found.append)
    return _decoded(found, rows)


def _as_rows(hashes: np.ndarray) -> np.ndarray:
    """Hashes as contiguous (N, halves) uint64 rows: one hash an image, or (whole, window)."""
    rows = np.asarray(hashes, dtype=np.uint64)
    return np.ascontiguousarray(rows[:, None] if rows.ndim == 1 else rows)


def distances(rows: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Bits apart of images i and j (`perceptual_hash.distance`): whole vs whole and, where the
    rows hold a window half, whole vs window either way; the fewest."""
    d = np.bitwise_count(rows[i, 0] ^ rows[j, 0])
    if rows.shape[1] > 1:
        d = np.minimum(d, np.bitwise_count(rows[i, 0] ^ rows[j, 1]))
        d = np.minimum(d, np.bitwise_count(rows[i, 1] ^ rows[j, 0]))
    return d.astype(np.int64)


def _decoded(found: list[np.ndarray], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, distance), sorted by (i, j), of the pair codes i * n + j in `found`, each once (a
    pair can be found in two blocks or by two halves; not np.unique: it imports numpy.ma, 10 ms)."""
    codes = np.sort(np.concatenate(found)) if found else np.zeros(0, np.int64)
    codes = codes[np.concatenate(([True], codes[1:] != codes[:-1]))] if len(codes) else codes
    i, j = np.divmod(codes, len(rows))
    return i, j, distances(rows, i, j)


def search_images(rows: np.ndarray, radius: int, sink: Callable[[np.ndarray], object]) -> None:
    """`search` for images (`rows`, `_as_rows`): calls `sink` with the pairs of images at most
    `radius` bits apart as codes i * n + j (i < j) over the images; a pair can come more than
    once. Two halves an image: every half is searched, as one array (the wholes, then the
    windows), and a pair of halves within the radius pairs their images unless both are windows
    (which says no more than the wholes do) or both are one image's."""
    n = len(rows)
    if rows.shape[1] == 1:
        search(np.ascontiguousarray(rows[:, 0]), radius, sink)
        return

    def images(codes: np.ndarray) -> None:
        a, b = np.divmod(codes, 2 * n)
        keep = ((a < n) | (b < n)) & (a % n != b % n)
        a, b = a[keep] % n, b[keep] % n
        if len(a):
            sink(np.minimum(a, b) * n + np.maximum(a, b))

    search(np.ascontiguousarray(rows.T).reshape(-1), radius, images)


def search(hashes: np.ndarray, radius: int, sink: Callable[[np.ndarray], object]) -> None:
    """Calls `sink` with the pairs of `hashes` (uint64, contiguous) at most `radius` bits apart,
    as codes i * n + j (i < j), at most CHUNK_PAIRS at a time, one call at a time; a pair can
    come twice (from two blocks). From THREADED_FROM hashes the blocks are searched on up to
    BLOCKS threads (NumPy's sorts, gathers and comparisons release the GIL: 1.9x quicker on two
    cores at 1.3 M hashes, for twice the temporaries; at 10,000 the threads only contend, so
    fewer are searched here, on this thread)."""
    if not 0 <= radius <= MAX_RADIUS:
        raise OptionError(f"radius must be in 0..{MAX_RADIUS} bits, got {radius}")
    threads = min(BLOCKS, os.cpu_count() or 1) if len(hashes) >= THREADED_FROM else 1
    lock = threading.Lock()

    def one_block(block: int) -> None:
        for codes in _block_pairs(hashes, block, radius):
            if len(codes):
                with lock:
                    sink(codes)

    if threads == 1:
        for block in range(BLOCKS):
            one_block(block)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one_block, range(BLOCKS)))


def _block_pairs(hashes: np.ndarray, block: int, radius: int) -> Iterator[np.ndarray]:
    """The pairs within `radius` that agree on `block` exactly (radius < BLOCKS) or but for one
    bit (`_Runs.probe`)."""
    keys = ((hashes >> np.uint64(BLOCK_BITS * block)) & np.uint64(0xFFFF)).astype(np.int64)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    # where each block value's run starts in `ordered` (a table of 65,537: a gather per probe
    # instead of two binary searches: 2.5x quicker at 10,000 hashes, docs/benchmarks/near_duplicates.md)
    starts = np.concatenate(([0], np.cumsum(np.bincount(ordered, minlength=1 << BLOCK_BITS))))
    runs = _Runs(hashes, order, ordered, starts, radius)
    flips = [0] if radius < BLOCKS else [0, *(1 << b for b in range(BLOCK_BITS))]
    if len(hashes) < PROBED_TOGETHER_BELOW:
        yield from runs.probe(flips)
    else:
        for flip in flips:
            yield from runs.probe([flip])


class _Runs:
    """One block's hashes sorted by the block's value, with the table of where each value's run
    starts, probed for the pairs whose values differ by a given bit (or agree)."""

    def __init__(self, hashes: np.ndarray, order: np.ndarray, ordered: np.ndarray, starts: np.ndarray, radius: int):
        self.hashes, self.order, self.ordered, self.radius = hashes, order, ordered, radius
        self.starts, self.ends = starts[:-1], starts[1:]

    def probe(self, flips: list[int]) -> Iterator[np.ndarray]:
        """Pairs (as i * n + j, i < j) within `radius` among each hash and the later ones in
        sorted order whose block value is its own XOR a flip: for flip 0 the rest of its own run;
        else, probed from the hashes with the flip's bit clear only (their partners sort later),
        so each pair is seen once. Only the probes that find a run are expanded. Probing the 17
        flips together costs 0.6x as much at 2,000 hashes (call overheads), 2.3x at 10,000."""
        n = len(self.ordered)
        targets = [self._targets(flip) for flip in flips]
        at, lo, hi = (
            targets[0] if len(targets) == 1 else (np.concatenate(parts) for parts in zip(*targets, strict=True))
        )
        found = np.flatnonzero(hi > lo)
        at, lo, counts = at[found], lo[found], (hi - lo)[found]
        ends = np.cumsum(counts)
        start = 0
        while start < len(counts):
            stop = max(int(np.searchsorted(ends, (ends[start - 1] if start else 0) + CHUNK_PAIRS, "right")), start + 1)
            c = counts[start:stop]
            a = np.repeat(at[start:stop], c)
            b = np.repeat(lo[start:stop] - (np.cumsum(c) - c), c) + np.arange(len(a))
            ia, ib = self.order[a], self.order[b]
            close = np.bitwise_count(self.hashes[ia] ^ self.hashes[ib]) <= self.radius
            ia, ib = ia[close], ib[close]
            yield np.minimum(ia, ib) * n + np.maximum(ia, ib)
            start = stop

    def _targets(self, flip: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(probing hash, first, end) in sorted order of the runs one flip probes (`probe`)."""
        if flip == 0:
            at = np.arange(len(self.ordered))
            return at, at + 1, self.ends[self.ordered]
        at = np.flatnonzero((self.ordered & flip) == 0)
        target = self.ordered[at] | flip
        return at, self.starts[target], self.ends[target]


class Links(NamedTuple):
    """How a set of hashes hangs together (`link`)."""

    group: np.ndarray  # per hash, its group: the smallest index in it (itself where it has no near-copy)
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray]  # (i, j, distance) of pairs that join groups
    farthest: np.ndarray  # per hash, the largest distance to any hash it is paired with

    def groups(self) -> list[list[int]]:
        """The groups of more than one hash (sorted indices, ordered by their first)."""
        grouped = np.flatnonzero(np.bincount(self.group)[self.group] > 1)
        order = grouped[np.argsort(self.group[grouped], kind="stable")]
        cuts = np.flatnonzero(np.diff(self.group[order])) + 1
        return [g.tolist() for g in np.split(order, cuts)] if len(order) else []


def link(hashes: np.ndarray, radius: int) -> Links:
    """The near-duplicate groups of images (`hashes`: as `close_pairs` takes them): the connected
    components of their pairs within `radius`, in memory bounded by the number of images, however
    many pairs there are.

    Equal hashes are searched once (5,000 copies of one placeholder image among 100,000 made
    12.5 M pairs: 5 GB and 30 s when every pair was kept); the pairs of the distinct ones are
    streamed into a union-find (`_Forest`), and kept for the report only up to KEPT_PAIRS, then
    only those that join two groups. A hash is paired with the first hash equal to it (distance 0)."""
    hashes = _as_rows(hashes)
    if hashes.shape[1] == 1:  # np.unique(axis=0) sorts rows as bytes: some 3x slower
        values, first, inverse = np.unique(hashes[:, 0], return_index=True, return_inverse=True)
        values = values[:, None]
    else:
        values, first, inverse = np.unique(hashes, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    forest = _Forest(values)
    search_images(values, radius, forest.add)
    roots = forest.roots()
    smallest = np.full(len(values), len(hashes), np.int64)
    np.minimum.at(smallest, roots, first)
    group = smallest[roots][inverse]
    vi, vj, d = forest.kept()
    copies = np.flatnonzero(first[inverse] != np.arange(len(hashes)))
    i = np.concatenate((first[vi], first[inverse[copies]]))
    j = np.concatenate((first[vj], copies))
    distance = np.concatenate((d, np.zeros(len(copies), np.int64)))
    return Links(group, (np.minimum(i, j), np.maximum(i, j), distance), forest.farthest[inverse])


class _Forest:
    """Connected components of pairs that arrive in chunks (`add`): a label per hash, pointing
    towards its component's smallest index (union by the smaller root, pointer jumping), and the
    pairs kept up to KEPT_PAIRS, then one for each component a join ends (at most one a hash).
    Pairs are joined CHUNK_PAIRS at a time, as each join passes over every label."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values
        self.labels = np.arange(len(values))
        self.farthest = np.zeros(len(values), np.int64)
        self.pending: list[np.ndarray] = []
        self.waiting = 0  # pairs pending
        self.found: list[np.ndarray] = []
        self.count = 0

    def add(self, codes: np.ndarray) -> None:
        """Takes pairs (codes i * n + j) to join."""
        self.pending.append(codes)
        self.waiting += len(codes)
        if self.waiting >= CHUNK_PAIRS:
            self._join()

    def _join(self) -> None:
        """Joins the pending pairs, and keeps them while there are few (`kept`)."""
        if not self.pending:
            return
        codes = np.concatenate(self.pending)
        self.pending, self.waiting = [], 0
        i, j = np.divmod(codes, len(self.values))
        distance = distances(self.values, i, j)
        np.maximum.at(self.farthest, i, distance)
        np.maximum.at(self.farthest, j, distance)
        if self.count + len(codes) > KEPT_PAIRS:  # one pair for each root this join hooks
            ri, rj = self._compressed()[i], self.labels[j]
            joining = np.flatnonzero(ri != rj)
            _, one = np.unique(np.maximum(ri, rj)[joining], return_index=True)
            codes = codes[joining[one]]
        self.found.append(codes)
        self.count += len(codes)
        while len(i):
            labels = self._compressed()
            ri, rj = labels[i], labels[j]
            apart = ri != rj
            i, j, ri, rj = i[apart], j[apart], ri[apart], rj[apart]
            np.minimum.at(self.labels, np.maximum(ri, rj), np.minimum(ri, rj))

    def _compressed(self) -> np.ndarray:
        """The labels, each pointing at its component's root (pointer jumping)."""
        while not np.array_equal(up := self.labels[self.labels], self.labels):
            self.labels = up
        return self.labels

    def roots(self) -> np.ndarray:
        """Every hash's component: its smallest index."""
        self._join()
        return self._compressed()

    def kept(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(i, j, distance) of the pairs kept, each once."""
        self._join()
        return _decoded(self.found, self.values)


def groups_in(
    records: Callable[[], Iterable[tuple[str, str | None, str]]],
    radius: int,
    hashes: np.ndarray | None = None,
    names: Callable[[set[int]], dict[int, tuple[str, str]]] | None = None,
) -> list[dict[str, Any]]:
    """Near-duplicate groups among the (key, perceptual hash or None, split) records `records()`
    yields, for report.json: each with its files, splits, `leak` when they span splits, its pairs'
    distances (the first PAIRS_SHOWN) and the largest. Two passes over `records()`: the hashes
    into one uint64 array of halves first (`perceptual_hash.as_array`, 0: none; `hashes`: that
    array, made by the caller), then only
    the grouped records' keys and splits (memory bounded by some 50 bytes a record, not by its key;
    `names`: the (key, split) of the records at the positions asked, found by the caller)."""
    every = _as_rows(hashes if hashes is not None else perceptual_hash.as_array(h for _, h, _ in records()))
    where = np.flatnonzero(every[:, 0])  # 0: no hash (a hash has 32 bits set, never none)
    links = link(every[where], radius)
    grouped = links.groups()
    if not grouped:
        return []
    wanted = {int(where[x]): x for g in grouped for x in g}
    if names is None:
        named = {wanted[p]: (key, split) for p, (key, _, split) in enumerate(records()) if p in wanted}
    else:
        named = {wanted[p]: name for p, name in names(set(wanted)).items()}
    shown = _pairs_shown(links, named)
    out = []
    for g in grouped:
        members = sorted(named[x] for x in g)
        group_splits = sorted({s for _, s in members})
        out.append(
            {
                "files": [k for k, _ in members],
                "splits": group_splits,
                "leak": len(group_splits) > 1,
                "max_distance": int(links.farthest[g].max()),
                "pairs": shown[g[0]],
            }
        )
    return sorted(out, key=lambda g: g["files"])


def _pairs_shown(links: Links, named: dict[int, tuple[str, str]]) -> dict[int, list[list[Any]]]:
    """Per group (by its first index), its first PAIRS_SHOWN pairs [file, file, distance] in
    the order of their names: chosen by rank in NumPy, so a group of a million pairs costs no
    million names."""
    i, j, d = links.pairs
    rank = np.zeros(len(links.group), np.int64)
    by_name = sorted(named, key=lambda x: named[x][0])
    rank[by_name] = np.arange(len(by_name))
    low, high, group = np.minimum(rank[i], rank[j]), np.maximum(rank[i], rank[j]), links.group[i]
    order = np.lexsort((d, high, low, group))
    starts = np.flatnonzero(np.concatenate(([True], group[order][1:] != group[order][:-1])))
    place = np.arange(len(order)) - np.repeat(starts, np.diff(np.append(starts, len(order))))
    shown: dict[int, list[list[Any]]] = {}
    for k in order[place < PAIRS_SHOWN].tolist():
        first, second = sorted((named[int(i[k])][0], named[int(j[k])][0]))
        shown.setdefault(int(group[k]), []).append([first, second, int(d[k])])
    return shown
