"""adopt: what a converted folder has, for TFRecords another program wrote, without rewriting them.

    shardfeed adopt data/flowers-tfrecords                 # in place: manifest.json, index/ beside them
    shardfeed adopt 'data/*.tfrec' --out data/adopted      # hard links (copies across filesystems) in OUT

Every record is read once: its framing and CRCs checked, its image and label features checked
against the schema read off the first record, its label, class text and image header counted.
The manifest written (`source.kind` 'adopted', a `schema` entry naming the keys, the label range
and offset) makes every command read the folder as a converted one: info, verify, show, report,
bench, train, IndexedRecords, global shuffle, exact resume, even splits. Damaged records are
listed by file, record and byte, and nothing is written. Re-running on an unchanged folder writes
nothing; a shard whose size or SHA-256 changed is named, and the folder is adopted again.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

from shardfeed.deprecation import renamed
from shardfeed.errors import ManifestError, SourceError
from shardfeed.format import fileio, folder_lock, layout, manifest, schema, storage, tfds_metadata, tfrecord
from shardfeed.format.manifest_builder import (
    Counts,
    Header,
    ImageStats,
    ManifestBuilder,
    ObjectStats,
    ShardFacts,
    ShardInfo,
)
from shardfeed.format.schema import Schema
from shardfeed.format.tasks import task_of
from shardfeed.read import foreign
from shardfeed.tools.foreign_scan import (
    AdoptOptions,
    ShardScan,
    ShardTask,
    class_names,
    refuse_damage,
    scan_all,
    schema_and_task,
)

__all__ = ["AdoptOptions", "AdoptResult", "adopt"]

UNSPLIT = "train"  # the split of files whose names carry none


@dataclass
class AdoptResult:
    """What `adopt` did: the folder now readable, whether anything was written, what changed since
    the last adoption, and warnings (a likely 1-based label set, files left as they were)."""

    folder: str
    written: bool
    splits: dict[str, int]
    changes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        counts = ", ".join(f"{name} {n:,}" for name, n in self.splits.items())
        if not self.written:
            head = f"{self.folder}: unchanged since it was adopted ({counts} records); nothing written"
        else:
            head = f"adopted {self.folder}: {counts} records"
        lines = [head, *(f"  changed: {c}" for c in self.changes), *(f"  warning: {w}" for w in self.warnings)]
        return "\n".join(lines)


@renamed(out="output_dir")
def adopt(
    source: str | list[str],
    output_dir: str | None = None,
    options: AdoptOptions | None = None,
    *,
    progress: bool = True,
) -> AdoptResult:
    """Makes TFRecords another program wrote readable as a converted folder (module docstring).

    Args:
        source: a folder of TFRecords (adopted in place unless `output_dir` is given), or a glob or list
            of files (then `output_dir` is needed).
        output_dir: a folder to hold hard links to the files (copies when links cannot be made)
            and the manifest; the source is left untouched (old name `out=`).
        options: keys, label offset, split rule (`AdoptOptions`).
        progress: a progress bar on stderr.

    Raises:
        SourceError: damaged records (each named by file, record and byte), features of the wrong
            type, labels below the offset, splits that cannot be told apart, a glob without `output_dir`.
        ManifestError: the folder is a shardfeed conversion already.
    """
    options = options or AdoptOptions()
    in_place = isinstance(source, str) and os.path.isdir(source)
    if output_dir is None and not in_place:
        raise SourceError(f"{source!r} is not one folder: pass --out DIR (output_dir=) for the adopted folder")
    folder = output_dir or cast(str, source)
    previous = _previous_adoption(folder)
    files, compression = foreign.find_files(source)
    _check_names(files)
    splits = foreign.splits_of_files(str(source), files, options.split_pattern)
    fileio.makedirs(folder)
    with folder_lock.hold(folder):
        if previous is not None:
            changes = _changes(previous, files, options)
            if not changes:
                counts = {name: previous.split(name).num_records for name in previous.split_names}
                return AdoptResult(folder, False, counts)
        else:
            changes = []
        keys, task = schema_and_task(files, compression, options)
        spec = task_of(task)
        text_key = spec.text_key if keys.label_key is not None or not spec.one_label else None
        tasks = [ShardTask(f, compression, keys, text_key, task, options.offset) for f in files]
        scans = scan_all(tasks, options.workers, progress)
        refuse_damage(scans)
        labels, warnings = class_names(scans, files, keys, options)
        data = _manifest(source, files, splits, scans, keys, labels, compression, options, task)
        if output_dir is not None:
            _link_files(files, output_dir)
        for scan in scans:
            name = os.path.basename(scan.path)
            fileio.makedirs(fileio.join(folder, layout.INDEX_DIR))
            fileio.write_text_atomic(fileio.join(folder, layout.index_file(name)), tfrecord.format_index(scan.sizes))
        warnings += _write_side_files(folder, data, previous)
        below = [entry for scan in scans for entry in scan.below_offset]
        if below:
            warnings.append(
                f"{len(below):,} objects are labelled below the label offset {options.offset} (first: {below[0][0]}, "
                f"object {below[0][1]}): no class, left out by every reader; report.json lists them"
            )
        _write_report(folder, data, warnings, below)
        manifest.write(folder, data)
    counts = {name: info["num_records"] for name, info in data["splits"].items()}
    return AdoptResult(folder, True, counts, changes, warnings)


def _previous_adoption(folder: str) -> manifest.Manifest | None:
    """The manifest of an earlier adoption of `folder`, or None.

    Raises:
        ManifestError: `folder` is a shardfeed conversion (it needs no adopting).
    """
    if not fileio.exists(fileio.join(folder, layout.MANIFEST)):
        return None
    m = manifest.read(folder, check=False)
    if not m.adopted:
        raise ManifestError(
            f"{folder!r} is a shardfeed conversion already (its manifest.json was written by `shardfeed convert`); "
            "every command reads it as it is: nothing to adopt"
        )
    return m


def _check_names(files: list[str]) -> None:
    """One folder holds the adopted files by name: two files of the same name would collide."""
    seen: dict[str, str] = {}
    for f in files:
        name = os.path.basename(f)
        if name in seen:
            raise SourceError(f"two files are named {name!r} ({seen[name]} and {f}); adopt them into separate folders")
        seen[name] = f


def _changes(previous: manifest.Manifest, files: list[str], options: AdoptOptions) -> list[str]:
    """What differs from the earlier adoption: options, files added or gone, sizes, SHA-256s."""
    before, now = previous.settings.get("adopt") or {}, options.recorded()
    changes = [f"{k} {before.get(k)!r} -> {now[k]!r}" for k in now if before.get(k) != now[k]]
    known = {s.file: s for name in previous.split_names for s in previous.split(name).shards}
    current = {os.path.basename(f): f for f in files}
    changes += [f"{name}: new file" for name in sorted(set(current) - set(known))]
    changes += [f"{name}: gone" for name in sorted(set(known) - set(current))]
    for name in sorted(set(known) & set(current)):
        size = fileio.size(current[name])
        if size != known[name].num_bytes:
            changes.append(f"{name}: {known[name].num_bytes:,} -> {size:,} bytes")
        elif _sha256(current[name]) != known[name].sha256:
            changes.append(f"{name}: same size, other bytes (SHA-256 differs)")
    return changes


def _sha256(path: str) -> str:
    with fileio.open_binary(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()  # type: ignore[arg-type]


def _manifest(
    source: str | list[str],
    files: list[str],
    splits: dict[str, str | None],
    scans: list[ShardScan],
    keys: Schema,
    labels: list[str] | None,
    compression: str | None,
    options: AdoptOptions,
    task: str = schema.CLASSIFICATION,
) -> dict[str, Any]:
    """The manifest of the adopted folder (the fields `convert` writes, `source.kind` 'adopted')."""
    ordered = sorted(zip(files, scans, strict=True), key=lambda pair: os.path.basename(pair[0]))
    facts = [_facts(file, scan, splits[file] or UNSPLIT, labels, options.offset, task) for file, scan in ordered]
    all_labels = sorted({label for s in scans for label in s.labels})
    features: dict[str, str] = {}
    for s in scans:
        features = {**s.features, **features}
    by_split: dict[str, list[ShardInfo]] = {}  # split by split, as the manifest lists them
    for fact in facts:
        by_split.setdefault(fact.split, []).append(fact.info)
    listing = "".join(f"{s.file}:{s.sha256}\n" for shards in by_split.values() for s in shards)
    names = {os.path.basename(f) for f in files}
    header = Header(
        source={
            "kind": manifest.ADOPTED,
            "path": storage.redact(source) if isinstance(source, str) else [storage.redact(s) for s in source],
            "fingerprint": hashlib.sha256(listing.encode()).hexdigest(),
            "num_inputs": sum(len(s.sizes) for s in scans),
        },
        settings={
            "compression": compression,
            "name_template": layout.SHARD_TEMPLATE if all(layout.shard_name_fields(n) for n in names) else None,
            "adopt": options.recorded(),
        },
        labels=labels,
        label_offset=options.offset if labels is not None else 0,
        features=features,
        schema=keys.record_keys(),
        label_range=(all_labels[0], all_labels[-1]) if all_labels else None,
        task=task,
    )
    builder = ManifestBuilder(header)
    for fact in facts:
        builder.add(fact)
    return builder.build(Counts())


def _facts(
    file: str, scan: ShardScan, split: str, labels: list[str] | None, label_offset: int, task: str
) -> ShardFacts:
    """What the manifest records of one adopted shard (a detection shard: images showing each
    class, and its objects)."""
    name = os.path.basename(file)
    info = ShardInfo(name, layout.index_file(name), len(scan.sizes), scan.num_bytes, scan.sha256)
    detection = task_of(task).target == "objects"
    class_counts: Counter[str] = Counter()
    if labels is not None:
        for label, n in (scan.image_classes if detection else scan.labels).items():
            class_counts[labels[label - label_offset]] += n
    short = {str(k): v for k, v in sorted(scan.short_sides.items())}
    images = ImageStats(dict(scan.formats), scan.max_side, short)
    objects = None
    if detection and labels is not None:
        instances = {labels[label - label_offset]: n for label, n in scan.labels.items()}
        objects = ObjectStats(instances, dict(scan.object_sizes), scan.without_objects, scan.most_objects)
    return ShardFacts(split, info, class_counts, images, objects=objects)


def _link_files(files: list[str], out: str) -> None:
    """Each file into `out` under its name: a hard link, or a copy where links cannot be made
    (another filesystem, a filesystem without them). A file already there and the same is kept."""
    for f in files:
        if fileio.is_remote(f) or fileio.is_remote(out):
            fileio.copy_atomic(f, fileio.join(out, f.rsplit("/", 1)[-1]))
            continue
        target = os.path.join(out, os.path.basename(f))
        if os.path.exists(target):
            if os.path.samefile(f, target):
                continue
            os.remove(target)
        try:
            os.link(f, target)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                raise
            fileio.copy_atomic(f, target)


def _write_report(folder: str, data: dict[str, Any], warnings: list[str], below: list[tuple[str, int, str]]) -> None:
    """report.json as `convert` writes it (nothing skipped or converted: the records are used as
    they are), with adopt's warnings and the objects labelled below the offset (`below`: record,
    object, why) as skipped annotations, so `shardfeed report` reads an adopted folder too."""
    report = {
        "source": data["source"]["path"],
        "skipped": [],
        **(
            {"skipped_annotations": [{"file": w, "annotation": i, "reason": why} for w, i, why in below]}
            if below
            else {}
        ),
        "converted": [],
        "warnings": [{"file": "", "warning": w} for w in warnings],
        "duplicates": [],
        "dropped_duplicates": [],
    }
    fileio.write_text_atomic(fileio.join(folder, layout.REPORT), manifest.dumps(report))


def _labels_text(data: dict[str, Any]) -> str:
    return "".join(f"{i + data['label_offset']}:{n}\n" for i, n in enumerate(data["labels"] or []))


def _write_side_files(folder: str, data: dict[str, Any], previous: manifest.Manifest | None) -> list[str]:
    """labels.txt (unless one another program wrote is there: TF-slim's is kept) and the TFDS
    metadata where the schema allows; warnings for what was left alone."""
    warnings = []
    labels_path = fileio.join(folder, layout.LABELS)
    if data["labels"] is not None:
        existing = fileio.read_bytes(labels_path).decode(errors="replace") if fileio.exists(labels_path) else None
        ours = existing is None or (previous is not None and existing == _labels_text(previous.data))
        if ours:
            manifest.write_labels(folder, data["labels"], data["label_offset"])
        elif existing != _labels_text(data):
            warnings.append(f"{labels_path} was there already and is left as it is (the manifest holds the names)")
    reason = tfds_metadata.reason_not_written(data)
    if reason is None:
        with contextlib.suppress(OSError):
            tfds_metadata.write(folder, data)
    return warnings
