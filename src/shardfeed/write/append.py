"""`convert --append`: a finished conversion grows by a generation of new shards.

    source now   -> items whose key no generation has converted (new), and the rest (known)
    known        -> those whose size or modification time differ from when they were converted
                    (every one with checksum=True) are hashed again: changed bytes under an old
                    key are reported, never rewritten
    new          -> planned with the folder's own settings and split rule into shards named
                    with the generation after the split: train-g0001-00000-of-00004
    shards       -> written and committed as `convert` writes them (resumable: .shardfeed/ holds
                    the append's state; old shards and the manifest are untouched until the end)
    manifest     -> the old one, each split's shard list extended, `generations` (the history),
                    report.json with the new skips, conversions, changes and duplicate groups over
                    every generation; written last

An image keeps its split because appendable folders split by a rule that looks at the key alone:
the 'hash' split rule, or the source's own split folders. Each generation's inputs (key, SHA-256
of the source bytes, split, and the file's size and modification time in ns when listed) are kept
in index/inputs-gNNNN.json.gz (write/inputs_list.py), which is how the next append knows what was
converted and whether its bytes changed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol

from shardfeed.errors import ConvertError
from shardfeed.format import fileio, image_limits, layout, manifest, tfds_metadata
from shardfeed.format.manifest_builder import Header, ManifestBuilder
from shardfeed.write import folder_state, merge, perceptual_hash, shards
from shardfeed.write.dedupe import source_hashes
from shardfeed.write.encode import EncodingSpec
from shardfeed.write.folder_state import as_flags
from shardfeed.write.inputs_list import Known, read_known, write_inputs
from shardfeed.write.items import Discovery, Item, annotation_digest
from shardfeed.write.options import ConvertOptions
from shardfeed.write.planning import ShardPlan, plan_shards


def appendable(discovery: Discovery, options: ConvertOptions) -> bool:
    """Whether a conversion's splits survive growth: a pre-split source kept as it is, or the
    'hash' rule (a lone split divided by fractions is neither)."""
    return (discovery.presplit and options.split is None) or options.split_rule == "hash"


def unchanged_by_listing(item: Item, listed: tuple[int, int] | None) -> bool:
    """Whether `item` is listed with the size and modification time it was converted with (a
    file rewritten with other bytes changes one of them, unless a tool restored the time)."""
    return listed is not None and item.mtime_ns != 0 and listed == (item.size, item.mtime_ns)


@dataclass
class AppendOutcome:
    """What an append did, for the summary."""

    generation: int
    added: dict[str, int] = field(default_factory=dict)
    known: int = 0
    reread: int = 0  # known inputs read and hashed to check their bytes
    changed: list[dict[str, str]] = field(default_factory=list)
    duplicates_of_existing: int = 0
    near_copies_of_existing: int = 0  # near-duplicate groups joining new images to converted ones
    old_hash: str | None = None  # another version's perceptual hash some converted images have
    shards_written: int = 0
    shards_resumed: int = 0

    def summary(self, output_dir: str, m: manifest.Manifest) -> str:
        """The lines `convert --append` prints."""
        if not self.added:
            lines = [f"{output_dir}: nothing new to append ({self.known:,} images already converted)."]
        else:
            added = ", ".join(f"{name} {n:,}" for name, n in sorted(self.added.items()))
            lines = [
                f"Appended generation {self.generation} to {output_dir}: {sum(self.added.values()):,} new images "
                f"({added}) in {self.shards_written + self.shards_resumed} shards; {self.known:,} already converted "
                "were left as they are",
            ]
            lines += [f"  {name}: {m.split(name).num_records:,} records in all" for name in m.split_names]
            if self.shards_resumed:
                lines.append(f"  resumed: {self.shards_resumed} shards were already complete")
            if self.duplicates_of_existing:
                lines.append(
                    f"  {self.duplicates_of_existing} new images repeat the bytes of converted ones (report.json "
                    "'duplicates', with leak flags)"
                )
            if self.near_copies_of_existing:
                lines.append(f"  {self.near_copies_of_existing} near-duplicate groups join new and converted images")
            if self.old_hash:
                lines.append(f"  near-duplicates: converted images with {self.old_hash} hashes were not compared")
            if tfds_metadata.reason_not_written(m.data) is None:
                entries = [e["name"] for e in tfds_metadata.dataset_info(m.data, "")["splits"]]
                whole = ", ".join(
                    "+".join(e for e in entries if e == name or e.startswith(name + "_g")) for name in m.split_names
                )
                lines.append(f"  TFDS reads each generation as a split of its own; whole splits: {whole}")
        if self.known:
            lines.append(
                f"  checked: {self.known - self.reread:,} converted images unchanged by size and modification time, "
                f"{self.reread:,} read again for their bytes" + ("" if self.reread else " (--checksum reads them all)")
            )
        annotations = sum(1 for c in self.changed if "now_annotations" in c)
        if len(self.changed) > annotations:
            lines.append(
                f"  warning: {len(self.changed) - annotations} converted images have changed bytes in the source; "
                "their records keep the old ones (report.json 'changed'); convert anew to take the new ones"
            )
        if annotations:
            lines.append(
                f"  warning: {annotations} converted images have changed annotations (objects, labels or mask) in "
                "the source; their records keep the old ones (report.json 'changed'); convert anew to take the new ones"
            )
        return "\n".join(lines)


class ShardWriter(Protocol):
    """What an append needs of the conversion that runs it (write/convert.py): its folder, options
    and worker count, and its shard writing (which resumes what an interrupted run committed)."""

    output_dir: str
    options: ConvertOptions

    @property
    def workers(self) -> int: ...

    def write_all(
        self, plans: list[ShardPlan], spec: EncodingSpec, pool: Executor | None
    ) -> tuple[list[shards.ShardResult], int]: ...


class Append:
    """One `convert --append` run over a finished folder (the conversion supplies the writing)."""

    def __init__(
        self, conversion: ShardWriter, discovery: Discovery, state: dict[str, Any], pool: Executor | None
    ) -> None:
        self.conversion, self.discovery, self.state, self.pool = conversion, discovery, state, pool
        self.out, self.options = conversion.output_dir, conversion.options
        self.work_dir = folder_state.work_dir(self.out)
        self.old = manifest.read(self.out)
        self.old_report = _read_report(self.out)  # read once: the dropped copies, then merged into anew
        self.history = history(self.old)
        self.generation = len(self.history)

    def run(self) -> AppendOutcome:
        """Checks, plans, writes and merges the next generation (nothing when nothing is new)."""
        self._check()
        spec = EncodingSpec.of(self.discovery, self.options)
        known, old_hash = read_known(self.out, self.history)
        dropped = {e["file"] for e in self.old_report.get("dropped_duplicates", [])}
        new = [i for i in self.discovery.items if i.key not in known and i.key not in dropped]  # dropped stay so
        outcome = AppendOutcome(self.generation, known=len(self.discovery.items) - len(new), old_hash=old_hash)
        unsure = [
            i
            for i in self.discovery.items
            if i.key in known and (self.options.checksum or not unchanged_by_listing(i, known[i.key][2]))
        ]
        outcome.reread = len(unsure)
        outcome.changed = self._changed(unsure, known, spec) + self._annotations_changed(known, spec)
        self._clean_unfinished()
        if not new:
            self._record_changes(outcome)
            return outcome
        options = dataclasses.replace(
            self.options, name_template=layout.generation_template(self.options.template, self.generation)
        )
        plans = plan_shards(dataclasses.replace(self.discovery, items=new), options).shards
        folder_state.start(self.out, {**self.state, "append": self.generation})
        results, resumed = self.conversion.write_all(plans, spec, self.pool)
        outcome.shards_written, outcome.shards_resumed = len(results) - resumed, resumed
        for r in results:
            outcome.added[r.split] = outcome.added.get(r.split, 0) + r.num_records
        self._finish(results, known, outcome)
        return outcome

    def _check(self) -> None:
        """Refuses an append that could move an image's split or shift a label.

        Raises:
            ConvertError: other settings, a split rule that depends on the whole set, other classes,
                or a folder written before its inputs were listed.
        """
        previous = {"source": self.state["source"], "settings": self.old.settings}
        labelled = self.discovery.class_names is not None
        if not folder_state.same_conversion(previous, self.state, labelled=labelled):
            difference = folder_state.describe_difference(previous, self.state, labelled=labelled)
            raise ConvertError(
                f"{self.out!r} was converted with other settings ({difference}); an append uses the folder's own "
                "settings (those not given are taken from it): pass the same options, or none of those that differ"
            )
        if not appendable(self.discovery, self.options):
            source, flags = self.discovery.root, as_flags(self.old.settings, self.old.header.task)
            raise ConvertError(
                f"{self.out!r} was split with the 'stratified' rule, which sizes the splits over the whole set: with "
                "more images some old ones would belong to another split, so it cannot grow. Once: `shardfeed "
                f"convert {source} {self.out} --overwrite --split-rule hash{flags}` (converts everything again; each "
                "image's split then comes from its key alone, so some change split now); from then on `shardfeed "
                f"convert {source} {self.out} --append` adds new images"
            )
        if self.discovery.class_names != self.old.labels:
            added = sorted(set(self.discovery.class_names or []) - set(self.old.labels or []))
            gone = sorted(set(self.old.labels or []) - set(self.discovery.class_names or []))
            raise ConvertError(
                f"the source's classes differ from {self.out!r}'s (new: {added}, gone: {gone}): the class ids of the "
                "written records would no longer match the label map; convert the whole source anew"
            )
        missing = [g for g in range(self.generation) if not fileio.exists(fileio.join(self.out, layout.inputs_file(g)))]
        if missing:
            raise ConvertError(
                f"{self.out!r} has no list of the inputs of generation {missing[0]} ({layout.inputs_file(missing[0])}; "
                "written since shardfeed 0.9): convert anew to append later"
            )

    def _changed(self, items: list[Item], known: Known, spec: EncodingSpec) -> list[dict[str, str]]:
        """Known keys whose source bytes are no longer what was converted (hashed in the pool)."""
        hashes = source_hashes(items, spec, self.pool, self.conversion.workers)
        return [
            {"file": item.key, "converted_sha256": known[item.key][0], "now_sha256": digest or "unreadable"}
            for item, digest in zip(items, hashes, strict=True)
            if digest != known[item.key][0]
        ]

    def _annotations_changed(self, known: Known, spec: EncodingSpec) -> list[dict[str, str]]:
        """Known keys whose objects, labels or mask file are no longer what was converted (an
        image's annotations change without its bytes: a COCO file edited, a mask redrawn)."""
        out = []
        for item in self.discovery.items:
            before = known[item.key][4] if item.key in known else None
            if before is None:  # one class id, or converted before digests were kept
                continue
            mask = None
            if item.mask_key is not None:
                try:
                    mask = fileio.read_regular(
                        fileio.join(spec.base, item.mask_key), image_limits.max_file_bytes(spec.image.max_pixels)
                    )
                except (OSError, fileio.UnusableFileError):
                    mask = b""
            now = annotation_digest(item, mask)
            if now != before:
                out.append({"file": item.key, "converted_annotations": before, "now_annotations": now or "none"})
        return out

    def _clean_unfinished(self) -> None:
        """Removes what an interrupted append of another source or generation left: shards it
        committed that no manifest names (a matching one is resumed by `write_all` instead)."""
        state_file = fileio.join(self.work_dir, layout.STATE)
        if not fileio.exists(state_file):
            return
        previous = json.loads(fileio.read_bytes(state_file))
        if previous == json.loads(manifest.dumps({**self.state, "append": self.generation})):
            return
        in_manifest = {s.file for name in self.old.split_names for s in self.old.split(name).shards}
        for name in folder_state.unfinished_shards(self.out) - in_manifest:
            for path in (fileio.join(self.out, name), fileio.join(self.out, layout.index_file(name))):
                if fileio.exists(path):
                    fileio.remove(path)
        fileio.rmtree(self.work_dir)

    def _finish(self, results: list[shards.ShardResult], known: Known, outcome: AppendOutcome) -> None:
        """Inputs list, report, TFDS metadata, then the manifest (last); the work folder goes."""
        new_rows = write_inputs(self.out, self.work_dir, results, self.generation)
        duplicates = merge.duplicate_groups_in(
            lambda: ((k, d, s) for rows in (known, new_rows) for k, (d, s, *_) in rows.items())
        )
        near = merge.near_groups_in(
            lambda: ((k, h, s) for rows in (known, new_rows) for k, (_, s, _, h, _) in rows.items()),
            self.options.near_radius,
        )
        new_keys = set(new_rows)
        outcome.duplicates_of_existing = merge.joining(duplicates, new_keys)
        outcome.near_copies_of_existing = merge.joining(near or [], new_keys)
        report = self._write_report(results, duplicates, outcome, near)
        data = self._merged_manifest(results, duplicates, outcome, near, skipped=len(report["skipped"]))
        tfds_metadata.write(self.out, data)
        manifest.write(self.out, data)
        fileio.rmtree(self.work_dir)

    def _merged_manifest(
        self,
        results: list[shards.ShardResult],
        duplicates: list[dict[str, Any]],
        outcome: AppendOutcome,
        near: list[dict[str, Any]] | None,
        *,
        skipped: int,
    ) -> dict[str, Any]:
        """The old manifest with the new generation's shards, counts and history entry (and
        near-duplicate counts over every generation, when they were looked for)."""
        old = self.old.data
        builder = ManifestBuilder.continuing(
            old, dataclasses.replace(Header.of_manifest(old), source=self.state["source"])
        )
        for result in results:
            builder.add(result.facts())
        # report.json's count of skipped files (a file skipped again is one file); what was dropped stays
        counts = dataclasses.replace(self.old.counts, skipped=skipped, duplicates=len(duplicates))
        new_skipped = sum(len(r.skipped) for r in results) + len(self.discovery.skipped)
        entry = self._entry(outcome, results, new_skipped)
        return builder.build(
            counts, generations=[*self.history, entry], **merge.near_counts(near, self.options.near_radius)
        )

    def _entry(self, outcome: AppendOutcome, results: list[shards.ShardResult], skipped: int) -> dict[str, Any]:
        """This generation in the manifest's history."""
        return {
            "generation": self.generation,
            "time": _utc(time.time()),
            "source": self.state["source"],
            "records": dict(sorted(outcome.added.items())),
            "shards": dict(sorted(Counter(r.split for r in results).items())),
            "skipped": skipped,
            "known": outcome.known,
            "reread": outcome.reread,
            "changed": len(outcome.changed),
            "hash": perceptual_hash.NAME if self.options.near_radius is not None else None,
        }

    def _write_report(
        self,
        results: list[shards.ShardResult],
        duplicates: list[dict[str, Any]],
        outcome: AppendOutcome,
        near: list[dict[str, Any]] | None,
    ) -> dict[str, Any]:
        """report.json: the old entries, this generation's skips and conversions, the changed
        files, and duplicate and near-duplicate groups over every generation (returned as written)."""
        old = self.old_report
        new = merge.report_of(duplicates, self.discovery, results, [], near)
        report = {
            **new,
            "skipped": _union(old.get("skipped", []), new["skipped"]),
            "converted": _union(old.get("converted", []), new["converted"]),
            "warnings": _union(old.get("warnings", []), new["warnings"]),
            "dropped_duplicates": old.get("dropped_duplicates", []),
            "changed": _union(old.get("changed", []), outcome.changed),
        }
        fileio.write_text_atomic(fileio.join(self.out, layout.REPORT), manifest.dumps(report))
        return report

    def _record_changes(self, outcome: AppendOutcome) -> None:
        """With nothing new, only report.json learns of changed files."""
        if not outcome.changed:
            return
        report = {**self.old_report, "changed": _union(self.old_report.get("changed", []), outcome.changed)}
        fileio.write_text_atomic(fileio.join(self.out, layout.REPORT), manifest.dumps(report))


def history(m: manifest.Manifest) -> list[dict[str, Any]]:
    """The folder's generations, oldest first; a folder never appended to is generation 0."""
    if m.generations:
        return list(m.generations)
    path = fileio.join(m.path, layout.MANIFEST)
    mtime = os.path.getmtime(path) if not fileio.is_remote(path) else None
    return [
        {
            "generation": 0,
            "time": _utc(mtime) if mtime else None,
            "source": m.source,
            "records": {name: m.split(name).num_records for name in m.split_names},
            "shards": {name: len(m.split(name).shards) for name in m.split_names},
            "skipped": m.counts.skipped,
            "known": 0,
            "reread": 0,
            "changed": 0,
            "hash": (m.near_duplicates or {}).get("hash"),
        }
    ]


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _union(old: Iterable[dict[str, Any]], new: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Report entries of both lists, each once (a file skipped again is not listed twice)."""
    seen: dict[str, dict[str, Any]] = {}
    for entry in [*old, *new]:
        seen[json.dumps(entry, sort_keys=True)] = entry
    return [seen[k] for k in sorted(seen)]


def _read_report(output_dir: str) -> dict[str, Any]:
    path = fileio.join(output_dir, layout.REPORT)
    return json.loads(fileio.read_bytes(path)) if fileio.exists(path) else {}
