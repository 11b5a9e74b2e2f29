"""Planning: which items go to which split and shard, in what order. Pure: items and options in,
shard plans out; the same inputs and seed always give the same plan, whatever the worker count."""

from __future__ import annotations

from dataclasses import dataclass

from shardfeed.errors import ConvertError
from shardfeed.write import sharding, splits
from shardfeed.write.encode import EncodedRecord, EncodingSpec, encode_items
from shardfeed.write.items import Discovery, Item
from shardfeed.write.options import ConvertOptions


@dataclass(frozen=True)
class ShardPlan:
    """One shard to write: its split, file name and items in record order."""

    split: str
    file: str
    items: list[Item]


@dataclass(frozen=True)
class Planned:
    """The shards to write, and how near-duplicate groups were kept in one split (None: not asked)."""

    shards: list[ShardPlan]
    moves: splits.GroupMoves | None = None


def plan_shards(
    discovery: Discovery,
    options: ConvertOptions,
    *,
    dropped_keys: set[str] | None = None,
    groups: list[list[str]] | None = None,
) -> Planned:
    """Assigns items to splits and shards; with `groups` (near-duplicate groups of keys), each
    group's images to one split (`splits.keep_groups_together`). Pure: depends only on the items,
    the groups and the options."""
    items = [i for i in discovery.items if i.key not in (dropped_keys or set())]
    by_split, moves = _split_items(items, discovery, options, groups)
    counts = options.shards
    if isinstance(counts, dict) and set(counts) != set(by_split):
        raise ConvertError(f"shards given for splits {sorted(counts)} but the splits are {sorted(by_split)}")
    ratio = _size_ratio(items, EncodingSpec.of(discovery, options), options.seed) if counts is None else 1.0
    plans: list[ShardPlan] = []
    for split_name, members in by_split.items():
        ordered = splits.seeded_order(members, options.seed)
        parts: list[tuple[str | None, list[Item]]] = [(None, ordered)]
        if options.by_class and discovery.class_names is not None:
            parts = [
                (name, [i for i in ordered if i.label == label]) for label, name in enumerate(discovery.class_names)
            ]
        for label_name, group in parts:
            asked = counts[split_name] if isinstance(counts, dict) else counts
            count = _shard_count(group, asked if isinstance(asked, int) else None, options, ratio)
            for index, (start, end) in enumerate(sharding.shard_bounds(len(group), count)):
                name = sharding.shard_name(options.template, split_name, index, count, label_name)
                plans.append(ShardPlan(split_name, name, group[start:end]))
    names = [p.file for p in plans]
    if len(set(names)) != len(names):
        raise ConvertError(f"shard name template {options.template!r} gives two shards the same name")
    return Planned(plans, moves)


def _split_items(
    items: list[Item], discovery: Discovery, options: ConvertOptions, groups: list[list[str]] | None
) -> tuple[dict[str, list[Item]], splits.GroupMoves | None]:
    """Items by split: the source's own splits, or a seeded (stratified) assignment by fractions,
    with each near-duplicate group whole when `groups` are given. A source that holds one split
    only (a Hub dataset's lone train file or folder) is divided by the fractions when they are
    given, and kept as it is when they are not."""
    names = sorted({i.split for i in items if i.split}) if discovery.presplit else []
    if discovery.presplit and not (options.split is not None and len(names) == 1):
        if options.split is not None:
            raise ConvertError(
                f"the source is already split into {names}; drop the split option (split=None, --split) "
                "to keep those splits"
            )
        if groups is not None:
            raise ConvertError(
                "the source is already split, so split_groups='near' cannot move images between its splits; "
                "convert without it: near-copies across the splits are reported (report.json, leak flags)"
            )
        return splits.group_presplit(items), None
    fractions = options.split_fractions(labelled=discovery.class_names is not None)
    by_hash = options.split_rule == "hash"
    if groups is not None:
        return splits.assign_groups(
            items, fractions, groups, seed=options.seed, stratify=options.stratify, by_hash=by_hash
        )
    if by_hash:
        return splits.assign_by_hash(items, fractions, seed=options.seed), None
    return splits.assign_splits(items, fractions, seed=options.seed, stratify=options.stratify), None


def _shard_count(group: list[Item], asked: int | None, options: ConvertOptions, ratio: float) -> int:
    """Shards for one group: as asked (at most one per item), else from its estimated output bytes."""
    if asked is not None:
        return min(asked, len(group))
    size = options.shard_size if isinstance(options.shard_size, int) else None
    return sharding.num_shards(len(group), int(sum(i.size for i in group) * ratio), shard_size=size)


def _size_ratio(items: list[Item], spec: EncodingSpec, seed: int, sample: int = 16) -> float:
    """Output bytes per input byte, measured on a fixed sample when images are re-encoded."""
    if not spec.image.transforms or not items:
        return 1.0
    chosen = splits.seeded_order(items, seed)[:sample]
    encoded = [r for r in encode_items(chosen, spec) if isinstance(r, EncodedRecord)]
    source = sum(i.size for i in chosen if i.key in {r.key for r in encoded})
    return sum(len(r.data) for r in encoded) / source if source else 1.0
