"""Split planning: seeded, stratified assignment of items to splits, and seeded ordering.

Pure functions over keys and labels; no I/O. Order is decided by a seeded hash of each item's
stable key, never by file-system or worker order, so it is reproducible anywhere.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from shardfeed.errors import OptionError
from shardfeed.write.items import Item

T = TypeVar("T", bound=Item)
DEFAULT_SPLIT = "train=0.8,validation=0.2"
UNLABELED_SPLIT = "test=1"
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")
SPLIT_RULES = ("stratified", "hash")


def parse_split_spec(spec: str | Mapping[str, float], *, custom_names: bool = False) -> dict[str, float]:
    """Fractions per split from 'train=0.8,validation=0.2' (or percentages, or a mapping).

    A name that looks like a misspelling of a split name readers know (`misspelt`) is refused
    unless `custom_names`: 'valdation' would be written as its own split, and a trainer looking
    for 'validation' would find none.

    Raises:
        ValueError: malformed entry, bad name, a likely misspelling, non-positive fraction, or a
            total other than 1/100.
    """
    if isinstance(spec, str):
        pairs: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, sep, value = part.partition("=")
            if not sep:
                raise OptionError(f"split entry {part!r} must look like name=fraction, e.g. 'train=0.8,validation=0.2'")
            try:
                pairs[name.strip()] = float(value)
            except ValueError:
                raise OptionError(f"split fraction {value!r} for {name!r} is not a number") from None
    else:
        pairs = {str(k): float(v) for k, v in spec.items()}
    if not pairs:
        raise OptionError("split spec is empty; e.g. 'train=0.8,validation=0.2'")
    for name, fraction in pairs.items():
        if not _SPLIT_NAME.match(name):
            raise OptionError(f"split name {name!r} may only use letters, digits and '_'")
        if fraction <= 0:
            raise OptionError(f"split {name!r} has fraction {fraction}; every fraction must be > 0")
        meant = None if custom_names else misspelt(name)
        if meant is not None:
            raise OptionError(
                f"split name {name!r} looks like a misspelling of {meant!r}; write {meant!r}, or pass "
                "custom_split_names=True (--custom-split-names) to write a split of that name on purpose"
            )
    total = sum(pairs.values())
    if math.isclose(total, 100.0, abs_tol=1e-6):
        pairs = {k: v / 100.0 for k, v in pairs.items()}
    elif not math.isclose(total, 1.0, abs_tol=1e-6):
        raise OptionError(f"split fractions add up to {total:g}; they must add up to 1 (or 100)")
    return pairs


KNOWN_SPLITS = ("train", "validation", "val", "valid", "test", "eval", "dev")


def misspelt(name: str) -> str | None:
    """The known split name (KNOWN_SPLITS) `name` is probably a misspelling of, or None: close in
    spelling (difflib ratio >= 0.75) yet not that name in another case, nor that name with a
    suffix of digits or '_...' (train2, test_hard: deliberate variants)."""
    lower = name.lower()
    if lower in KNOWN_SPLITS or re.match(rf"^({'|'.join(KNOWN_SPLITS)})(\d+|_\w+)$", lower):
        return None
    close = difflib.get_close_matches(lower, KNOWN_SPLITS, n=1, cutoff=0.75)
    return close[0] if close else None


def order_key(seed: int, key: str) -> bytes:
    """The seeded sort key of an item: a hash of (seed, key)."""
    return hashlib.blake2b(f"{seed}\0{key}".encode(), digest_size=8).digest()


def seeded_order(items: Sequence[T], seed: int) -> list[T]:
    """Items in a pseudo-random order that depends only on the seed and the keys."""
    # Ties (a 64-bit collision) keep the input order, which callers give sorted by key.
    return sorted(items, key=lambda item: order_key(seed, item.key))


def allocate(count: int, fractions: Sequence[float]) -> list[int]:
    """Splits `count` into parts proportional to `fractions` (largest remainder, ties to the first)."""
    exact = [count * f for f in fractions]
    parts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(fractions)), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in by_remainder[: count - sum(parts)]:
        parts[i] += 1
    return parts


def assign_splits(
    items: Sequence[T], fractions: Mapping[str, float], *, seed: int, stratify: bool = True
) -> dict[str, list[T]]:
    """Assigns items to splits; with `stratify`, each class is split in the same proportions.

    Split sizes are those of the whole set (`allocate` over all items), as Keras'
    `validation_split` gives them; stratifying decides only which classes the items come from.
    Rounding each class on its own would give a validation split of 0 images from 10 classes of
    2 (each class: 1.6 train, 0.4 validation, rounded to 2 and 0), or 33% from classes of 3.
    """
    groups: dict[int, list[T]] = {}
    for item in items:
        groups.setdefault(item.label if stratify else 0, []).append(item)
    names = list(fractions)
    labels = sorted(groups)
    counts = stratified_counts([len(groups[label]) for label in labels], list(fractions.values()), labels, seed)
    out: dict[str, list[T]] = {name: [] for name in names}
    for label, row in zip(labels, counts, strict=True):
        members = seeded_order(groups[label], seed)
        start = 0
        for name, count in zip(names, row, strict=True):
            out[name].extend(members[start : start + count])
            start += count
    return out


def stratified_counts(
    sizes: Sequence[int], fractions: Sequence[float], labels: Sequence[int], seed: int
) -> list[list[int]]:
    """How many items of each class (row) go to each split (column): every row sums to its class
    size, every column to `allocate(total, fractions)`, and each cell is its exact share rounded
    up or down. Left-over items go to the largest fractional shares first (ties broken by a
    seeded hash of the class, so no class is always the one to give its items to a small split);
    whatever that greedy pass cannot place is placed row by row, which always completes because
    the rows and columns have the same total."""
    totals = allocate(sum(sizes), fractions)
    exact = [[size * f for f in fractions] for size in sizes]
    cells = [[math.floor(x) for x in row] for row in exact]
    row_need = [size - sum(row) for size, row in zip(sizes, cells, strict=True)]
    col_need = [total - sum(row[j] for row in cells) for j, total in enumerate(totals)]
    ranked = sorted(
        ((r, j) for r in range(len(sizes)) for j in range(len(fractions))),
        key=lambda rj: (-(exact[rj[0]][rj[1]] - cells[rj[0]][rj[1]]), order_key(seed, f"class {labels[rj[0]]}"), rj[1]),
    )
    for r, j in ranked:
        if row_need[r] > 0 and col_need[j] > 0 and exact[r][j] > cells[r][j]:
            cells[r][j] += 1
            row_need[r] -= 1
            col_need[j] -= 1
    for r in range(len(sizes)):
        for j in range(len(fractions)):
            moved = min(row_need[r], col_need[j])
            cells[r][j] += moved
            row_need[r] -= moved
            col_need[j] -= moved
    return cells


def assign_by_hash(items: Sequence[T], fractions: Mapping[str, float], *, seed: int) -> dict[str, list[T]]:
    """Assigns each item by a seeded hash of its key alone (the 'hash' split rule): the same key
    gets the same split in any set it is part of, so a growing dataset never moves an image."""
    names = list(fractions)
    bounds = list(itertools.accumulate(fractions.values()))
    out: dict[str, list[T]] = {name: [] for name in names}
    for item in items:
        u = int.from_bytes(order_key(seed, f"split\0{item.key}"), "big") / 2**64
        index = next((i for i, bound in enumerate(bounds) if u < bound), len(names) - 1)
        out[names[index]].append(item)
    return out


def group_presplit(items: Sequence[T]) -> dict[str, list[T]]:
    """Items grouped by the split their layout already gave them, splits in sorted order."""
    out: dict[str, list[T]] = {}
    for item in items:
        out.setdefault(item.split or "train", []).append(item)
    return {name: out[name] for name in sorted(out)}


def default_fractions(labelled: bool) -> dict[str, float]:
    """The split a conversion gets when none is given: train/validation, or all 'test' when unlabeled."""
    return parse_split_spec(DEFAULT_SPLIT if labelled else UNLABELED_SPLIT)


@dataclass
class GroupMoves:
    """How `assign_groups` split near-duplicate groups: groups and images kept whole, and by how
    many images each split ended up off the size the fractions give."""

    groups: int = 0
    images: int = 0
    drift: dict[str, int] = field(default_factory=dict)


def assign_groups(
    items: Sequence[T],
    fractions: Mapping[str, float],
    groups: Sequence[Sequence[str]],
    *,
    seed: int,
    stratify: bool,
    by_hash: bool = False,
) -> tuple[dict[str, list[T]], GroupMoves]:
    """Assigns items to splits with each group (of item keys) whole in one split.

    Units are the groups and the ungrouped items. Stratified (the default rule): each unit counts
    for the class most of its images have; per class, the split sizes are those
    `stratified_counts` gives for its images, and the units, largest first (seeded order among
    equals), each go to the split that still needs the most images of that class. Sizes then
    follow the fractions to within a group's size per class (`GroupMoves.drift` says by how
    much in all). With `by_hash`: each unit goes where the hash rule sends its first key."""
    by_key = {item.key: item for item in items}
    units = [[by_key[k] for k in g if k in by_key] for g in groups]
    units = [u for u in units if len(u) > 1]
    grouped = {item.key for u in units for item in u}
    moves = GroupMoves(groups=len(units), images=len(grouped))
    units += [[item] for item in items if item.key not in grouped]
    names = list(fractions)
    out: dict[str, list[T]] = {name: [] for name in names}
    if by_hash:
        heads = assign_by_hash([u[0] for u in units], fractions, seed=seed)
        unit_of = {u[0].key: u for u in units}
        for name, members in heads.items():
            out[name] = [item for head in members for item in unit_of[head.key]]
    else:
        strata: dict[int, list[list[T]]] = {}
        for u in units:
            label = min({i.label for i in u}, key=lambda x: (-sum(i.label == x for i in u), x)) if stratify else 0
            strata.setdefault(label, []).append(u)
        labels = sorted(strata)
        rows = stratified_counts([sum(map(len, strata[x])) for x in labels], list(fractions.values()), labels, seed)
        for label, row in zip(labels, rows, strict=True):
            need = list(row)
            for u in sorted(strata[label], key=lambda u: (-len(u), order_key(seed, u[0].key))):
                j = max(range(len(names)), key=lambda j: (need[j], -j))
                need[j] -= len(u)
                out[names[j]].extend(u)
    target = allocate(len(items), list(fractions.values()))
    moves.drift = {name: len(out[name]) - t for name, t in zip(names, target, strict=True) if len(out[name]) != t}
    return out, moves
