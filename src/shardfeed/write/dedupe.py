"""Duplicates found before the split: which later inputs are byte-for-byte copies of earlier ones
(`dedupe=True`), and which inputs are near-copies of each other (`split_groups='near'`,
`dedupe='near'`: their perceptual hashes within `near_radius` bits, write/near_duplicates.py)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Executor

from shardfeed.parallel import CHUNK_SIZE, map_ordered
from shardfeed.write import near_duplicates, perceptual_hash
from shardfeed.write.encode import EncodingSpec, hash_items, phash_items
from shardfeed.write.items import Discovery, Item
from shardfeed.write.options import ConvertOptions


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


def before_split(
    spec: EncodingSpec, discovery: Discovery, options: ConvertOptions, pool: Executor | None, workers: int
) -> tuple[list[tuple[str, str]], list[list[str]] | None]:
    """(dropped key, kept key) of the inputs `options.dedupe` and `options.label_conflicts` drop,
    and the near-duplicate groups when the options act on them (None when they don't)."""
    resolving = options.label_conflicts != "keep"
    exact = find_duplicates(spec, discovery, pool, workers) if options.dedupe or resolving else []
    groups = None
    if options.acts_on_near_duplicates and options.near_radius is not None:
        groups = near_groups(spec, discovery, pool, workers, options.near_radius)
    dropped = exact if options.dedupe else []
    if options.dedupe == "near" and groups is not None:
        dropped = near_drops(groups, dropped)
    dropped = same_label(dropped, discovery)
    if resolving:
        dropped += conflict_drops(_exact_groups(exact) + (groups or []), discovery, options.label_conflicts, dropped)
    return dropped, groups


def conflict_drops(
    groups: list[list[str]], discovery: Discovery, rule: str, dropped: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """(dropped key, a copy of it) for the images `rule` drops from groups whose images carry
    different labels: 'drop' every image of such a group, 'first' those labelled otherwise than
    the group's first key. Keys `dropped` already holds are left as they are."""
    label_of = {item.key: item.label for item in discovery.items}
    gone = {d for d, _ in dropped}
    out: dict[str, str] = {}
    for group in groups:
        members = sorted(k for k in group if k not in gone)
        if len({label_of.get(k) for k in members}) < 2:
            continue
        first = members[0]
        for key in members:
            if rule == "drop":
                out.setdefault(key, first if key != first else members[1])
            elif label_of.get(key) != label_of.get(first):
                out.setdefault(key, first)
    return sorted(out.items())


def _exact_groups(pairs: list[tuple[str, str]]) -> list[list[str]]:
    """Groups of exact copies from (copy, first key) pairs."""
    groups: dict[str, list[str]] = {}
    for copy, first in pairs:
        groups.setdefault(first, [first]).append(copy)
    return list(groups.values())


def same_label(dropped: list[tuple[str, str]], discovery: Discovery) -> list[tuple[str, str]]:
    """The (dropped, kept) pairs whose two images carry one label. Dropping a copy labelled
    otherwise would pick a label silently: such copies are all kept, and the conversion reports
    them as label conflicts (report.json `label_conflicts`, the summary, report.html)."""
    if not dropped:
        return dropped
    label_of = {item.key: item.label for item in discovery.items}
    return [(d, k) for d, k in dropped if label_of.get(d) == label_of.get(k)]


def near_groups(
    spec: EncodingSpec, discovery: Discovery, pool: Executor | None, workers: int, radius: int
) -> list[list[str]]:
    """The keys of each near-duplicate group among the inputs (sorted, groups ordered by their
    first key): every input hashed as its conversion will hash it, by the worker pool."""
    items = discovery.items
    chunks = (items[i : i + CHUNK_SIZE] for i in range(0, len(items), CHUNK_SIZE))
    tasks = ((None, (chunk, spec)) for chunk in chunks)
    hashes = itertools.chain.from_iterable(result for _, result in map_ordered(pool, phash_items, tasks, workers))
    keyed = [(item.key, h) for item, h in zip(items, hashes, strict=True) if h]
    values = perceptual_hash.as_array(h for _, h in keyed)
    groups = [sorted(keyed[x][0] for x in g) for g in near_duplicates.link(values, radius).groups()]
    return sorted(groups)


def near_drops(groups: list[list[str]], exact: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(dropped key, kept key) for `dedupe='near'`: the first key of each group is kept, as for
    exact copies (`exact`, which this includes: a copy whose hash is missing is still dropped)."""
    dropped = dict(exact)
    for group in groups:
        for key in group[1:]:
            dropped.setdefault(key, group[0])
    kept = {}
    for key, other in dropped.items():
        while other in dropped:  # an exact copy of an image that is itself a near-copy
            other = dropped[other]
        kept[key] = other
    return sorted(kept.items())
