"""Merging: the manifest from the shards' partial manifests, duplicate groups, and report.json."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from shardfeed.format import fileio, layout, manifest, storage
from shardfeed.format.manifest_builder import Counts, Header, ManifestBuilder
from shardfeed.format.tasks import task_of
from shardfeed.write import near_duplicates, perceptual_hash, shards
from shardfeed.write.items import Discovery
from shardfeed.write.options import ConvertOptions
from shardfeed.write.splits import GroupMoves


def merge_manifest(
    state: dict[str, Any],
    duplicates: list[dict[str, Any]],
    discovery: Discovery,
    options: ConvertOptions,
    results: list[shards.ShardResult],
    dropped: list[tuple[str, str]],
    near: list[dict[str, Any]] | None = None,
    moves: GroupMoves | None = None,
    report: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest from the partial manifests of all shards (`near`: the near-duplicate
    groups, None when they were not looked for; `moves`: how split_groups kept them together;
    `report`: the conversion's `report_of`, whose label conflicts and dropped copies it counts
    instead of finding them again)."""
    conflicts = report["label_conflicts"] if report is not None else label_conflicts(duplicates, near, discovery)
    entries = report["dropped_duplicates"] if report is not None else dropped_entries(dropped, discovery)
    header = Header(
        state["source"],
        state["settings"],
        discovery.class_names,
        options.label_base(discovery.task),
        task_of(discovery.task).feature_types(discovery.class_names is not None, options.keys)
        | dict(discovery.object_features),
        None if options.keys.is_ours else options.keys.record_keys(),
        task=discovery.task,
    )
    builder = ManifestBuilder(header)
    for result in results:
        builder.add(result.facts())
    counts = Counts(
        skipped=len(discovery.skipped) + sum(len(r.skipped) for r in results),
        duplicates=len(duplicates),
        dropped_duplicates=len(dropped),
        dropped_label_conflicts=sum("label_conflict" in e for e in entries),
        label_conflicts=len(conflicts),
        skipped_annotations=sum(len(r.skipped_annotations) for r in results),
        clipped_boxes=sum(r.clipped_boxes for r in results),
    )
    return builder.build(counts, **near_counts(near, options.near_radius, moves))


def label_conflicts(
    duplicates: list[dict[str, Any]], near: list[dict[str, Any]] | None, discovery: Discovery
) -> list[dict[str, Any]]:
    """The duplicate and near-duplicate groups whose images carry different labels: the same
    photo taught as two classes, the most harmful duplicate there is. Exact copies first, each
    with its files and their class names in order."""
    if discovery.class_names is None or not (duplicates or near):
        return []  # nothing grouped: no map of every input's label to build at the serial end
    names = discovery.class_names
    label_of = {item.key: item.label for item in discovery.items}
    out: list[dict[str, Any]] = []
    exact = {frozenset(g["files"]) for g in duplicates}
    for kind, groups in (("exact", duplicates), ("near", near or [])):
        for group in groups:
            if kind == "near" and frozenset(group["files"]) in exact:  # exact copies, said once
                continue
            labels = [label_of.get(f, -1) for f in group["files"]]
            known = {x for x in labels if 0 <= x < len(names)}
            if len(known) > 1:
                shown = [names[x] if 0 <= x < len(names) else "?" for x in labels]
                out.append({"kind": kind, "files": group["files"], "labels": shown})
    return out


def near_counts(
    near: list[dict[str, Any]] | None, radius: int | None, moves: GroupMoves | None = None
) -> dict[str, Any]:
    """The manifest's near-duplicate fields: the hash and radius, groups, leaking groups, and
    what split_groups moved."""
    if near is None or radius is None:
        return {}
    counts: dict[str, Any] = {
        "hash": perceptual_hash.NAME,
        "radius": radius,
        "groups": len(near),
        "images": sum(len(g["files"]) for g in near),
        "leaks": sum(1 for g in near if g["leak"]),
    }
    if moves is not None:
        counts["kept_together"] = moved(moves)
    return {"near_duplicates": counts}


def moved(moves: GroupMoves) -> dict[str, Any]:
    """How `splits.assign_groups` split, for the manifest and report.json."""
    return {"groups": moves.groups, "images": moves.images, "drift": moves.drift}


RECORDS_KEPT = 50_000  # `record_groups` keeps the parts it read up to this many records (some 20 MB)


def record_groups(
    work_dir: str, results: list[shards.ShardResult], radius: int | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Duplicate groups and near-duplicate groups (None: radius None) among the records of the
    partial manifests. Both first passes, a compact array each, share one read of the parts;
    only a grouping that finds something reads them again (the near-duplicates: only the parts
    that hold a grouped record), for the grouped records' names. Up to RECORDS_KEPT records,
    the parts are read once: a second read of 32 parts cost 1.2 ms of a 2,000-image conversion's
    serial end."""
    kept: dict[int, list[tuple[Any, ...]]] | None = {} if sum(r.num_records for r in results) <= RECORDS_KEPT else None

    def part(n: int) -> list[tuple[Any, ...]]:
        """The records of part n: read again, or kept from the first read."""
        if kept is None:
            return read_part(work_dir, results[n]).records
        if n not in kept:
            kept[n] = read_part(work_dir, results[n]).records
        return kept[n]

    def records() -> Iterator[tuple[str, str, str | None, str]]:
        for n, result in enumerate(results):
            for key, digest, *rest in part(n):
                yield key, digest, (rest[2] if len(rest) > 2 else None), result.split

    def names(wanted: set[int]) -> dict[int, tuple[str, str]]:
        """(key, split) of the records at the `wanted` positions, from the parts that hold them."""
        found, start, at = {}, 0, np.sort(np.fromiter(wanted, np.int64, len(wanted)))
        for n, result in enumerate(results):
            first = np.searchsorted(at, start)
            if first < len(at) and at[first] < start + result.num_records:
                for p, (key, *_) in enumerate(part(n), start):
                    if p in wanted:
                        found[p] = (key, result.split)
            start += result.num_records
        return found

    hashed = radius is not None
    columns = np.fromiter(
        ((int(d[:16], 16), *(perceptual_hash.halves(h) if h and hashed else (0, 0))) for _, d, h, _ in records()),
        np.dtype((np.uint64, 3)),
    )
    duplicates = duplicate_groups_in(lambda: ((k, d, s) for k, d, _, s in records()), columns[:, 0])
    if radius is None:
        return duplicates, None
    near_records = lambda: ((k, h, s) for k, _, h, s in records())  # noqa: E731
    return duplicates, near_duplicates.groups_in(near_records, radius, columns[:, 1:], names)


def near_groups_in(
    records: Callable[[], Iterable[tuple[str, str | None, str]]], radius: int | None
) -> list[dict[str, Any]] | None:
    """`near_duplicates.groups_in` the (key, hash, split) records, or None when radius is None."""
    return None if radius is None else near_duplicates.groups_in(records, radius)


def duplicate_groups_in(
    records: Callable[[], Iterable[tuple[str, str, str]]], prefixes: np.ndarray | None = None
) -> list[dict[str, Any]]:
    """`groups_of` the (key, source sha256, split) records `records()` yields, in memory bounded
    by some 16 bytes a record: a first pass puts 8-byte digest prefixes into one compact array to
    find candidate duplicates (`prefixes`: that array, made by the caller), a second keeps just
    those records."""
    flat = prefixes if prefixes is not None else np.fromiter((int(d[:16], 16) for _, d, _ in records()), np.uint64)
    values, counts = np.unique(flat, return_counts=True)
    repeated = set(values[counts > 1].tolist())
    if not repeated:
        return []
    return groups_of(r for r in records() if int(r[1][:16], 16) in repeated)


def joining(groups: list[dict[str, Any]], new_keys: set[str]) -> int:
    """How many of the (duplicate or near-duplicate) groups hold both new and older files."""
    return sum(1 for g in groups if set(g["files"]) & new_keys and set(g["files"]) - new_keys)


def groups_of(records: Iterable[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """Duplicate groups among (key, source sha256, split) records: every digest held by more than
    one key, with its splits, `leak` when they differ."""
    by_hash: dict[str, list[tuple[str, str]]] = {}
    for key, digest, split in records:
        by_hash.setdefault(digest, []).append((key, split))
    groups = []
    for digest in sorted(by_hash):
        members = sorted(by_hash[digest])
        if len(members) > 1:
            group_splits = sorted({s for _, s in members})
            groups.append(
                {
                    "sha256": digest,
                    "files": [k for k, _ in members],
                    "splits": group_splits,
                    "leak": len(group_splits) > 1,
                }
            )
    return groups


def read_part(work_dir: str, result: shards.ShardResult) -> shards.ShardResult:
    """A shard's partial manifest, with its per-record (key, source sha256, size, mtime_ns) list."""
    return shards.ShardResult.from_json(fileio.read_bytes(shards.part_path(work_dir, result.file)).decode())


def write_report(output_dir: str, report: dict[str, Any], moves: GroupMoves | None = None) -> None:
    """report.json (`report_of`'s report): every input that is not in a shard as it was, with
    the reason; and what split_groups moved."""
    if moves is not None:
        report["near_duplicates_kept_together"] = moved(moves)
    fileio.write_text_atomic(fileio.join(output_dir, layout.REPORT), manifest.dumps(report))


def report_of(
    duplicates: list[dict[str, Any]],
    discovery: Discovery,
    results: list[shards.ShardResult],
    dropped: list[tuple[str, str]],
    near: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """What report.json says of one conversion (`write_report`)."""
    skipped = sorted(discovery.skipped + [s for r in results for s in r.skipped])
    return {
        "source": storage.redact(discovery.root),
        "skipped": [{"file": k, "reason": why} for k, why in skipped],
        "converted": [{"file": k, "reason": why} for k, why in sorted(c for r in results for c in r.converted)],
        "warnings": [{"file": k, "warning": w} for k, w in sorted(x for r in results for x in r.warnings)],
        "duplicates": duplicates,
        "label_conflicts": label_conflicts(duplicates, near, discovery),
        "dropped_duplicates": dropped_entries(dropped, discovery),
        **({} if near is None else {"near_duplicates": near}),
        **_annotation_report(results),
    }


def _annotation_report(results: list[shards.ShardResult]) -> dict[str, Any]:
    """report.json's `skipped_annotations` (each object not written: its image, its id in the
    source, why) and their count by reason, and `clipped_annotations` (each box written clipped
    to its image by more than object_checks.CLIP_TOLERANCE: its image, id, how far out), for a
    source with objects; nothing for others."""
    skipped = sorted(s for r in results for s in r.skipped_annotations)
    clipped = sorted(c for r in results for c in r.clipped_annotations)
    out: dict[str, Any] = {}
    if skipped:
        by_reason = Counter(_reason_kind(why) for _, _, why in skipped)
        out["skipped_annotations"] = [{"file": key, "annotation": i, "reason": why} for key, i, why in skipped]
        out["skipped_annotations_by_reason"] = dict(sorted(by_reason.items()))
    if clipped:
        out["clipped_annotations"] = [{"file": key, "annotation": i, "reason": how} for key, i, how in clipped]
    return out


def _reason_kind(reason: str) -> str:
    """A skip reason without its numbers ('box [..]: wholly outside the 640 x 480 image' ->
    'wholly outside the image'; 'area nan: ...' -> '...'), to count skips by kind."""
    text = reason.split(": ", 1)[-1] if reason.startswith(("box ", "area ")) else reason
    return " ".join(w for w in text.split() if not any(c.isdigit() for c in w) and w != "x")


def dropped_entries(dropped: list[tuple[str, str]], discovery: Discovery) -> list[dict[str, Any]]:
    """report.json's `dropped_duplicates`: each dropped input and the copy it duplicates; where
    the two carried different labels (dropped by `label_conflicts`), both labels, dropped first."""
    names = discovery.class_names
    label_of = {item.key: item.label for item in discovery.items} if names and dropped else {}
    out = []
    for key, kept in sorted(dropped):
        entry: dict[str, Any] = {"file": key, "duplicate_of": kept}
        ours, theirs = label_of.get(key, -1), label_of.get(kept, -1)
        if names and ours != theirs and 0 <= ours < len(names) and 0 <= theirs < len(names):
            entry["label_conflict"] = [names[ours], names[theirs]]
        out.append(entry)
    return out
