"""verify: read every record of every shard and check it against the manifest.

Checks the manifest against itself first (split totals = sums of their shards' counts, bytes and
class counts; `manifest.inconsistencies`), reporting every disagreement where other commands
refuse at the first. Then, per shard (in parallel, without TensorFlow): the file exists, its size and SHA-256 match
the manifest, every record's framing and CRCs, every record parses, every image decodes and has
its recorded size, its SHA-256 matches image/key/sha256, labels are in range and match their
class text, the record count matches, and the DALI index matches the records. Per split: class
counts match. In the folder: stray temporary files and unfinished-conversion leftovers.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO, cast

from shardfeed.deprecation import renamed
from shardfeed.format import fileio, layout, manifest, schema, tfrecord
from shardfeed.format.example_proto import parse_example
from shardfeed.format.schema import ForeignKeys
from shardfeed.format.tasks import DEFAULT_TASK, task_of
from shardfeed.parallel import WorkerPool
from shardfeed.read import foreign
from shardfeed.read.shardset import is_converted_folder
from shardfeed.tools.foreign_scan import AdoptOptions, ShardTask, read_schema, scan_all
from shardfeed.write.images import check_stored_image
from shardfeed.write.images.masks import check_stored_mask


@dataclass(frozen=True)
class Problem:
    """One thing wrong, located as precisely as possible."""

    message: str
    shard: str | None = None
    record: int | None = None

    def __str__(self) -> str:
        where = self.shard or "dataset"
        if self.record is not None:
            where += f" record {self.record}"
        return f"{where}: {self.message}"


@dataclass
class VerifyReport:
    path: str
    problems: list[Problem] = field(default_factory=list)
    shards: int = 0
    records: int = 0
    images_decoded: int = 0
    seconds: float = 0.0
    foreign: bool = False  # TFRecords another program wrote: no manifest to check against
    near_duplicates: dict[str, Any] | None = None  # the manifest's counts (not problems: report.json lists them)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def summary(self) -> str:
        if self.foreign:
            head = (
                f"{self.path}: {self.shards} files, {self.records} records, framing, CRCs and feature types checked "
                "(no manifest: `shardfeed adopt` it, then verify decodes every image against the manifest)"
            )
        else:
            shards = f"{self.shards} shard{'s' * (self.shards != 1)}"
            head = f"{self.path}: {shards}, {self.records} records, {self.images_decoded} images decoded"
        near = self.near_duplicates
        note = (
            f"\n  near-duplicates: {near['groups']} groups of {near['images']} images, {near['leaks']} across splits "
            "(report.json)"
            if near
            else ""
        )
        if self.ok:
            return f"{head}: OK ({self.seconds:.1f}s){note}"
        lines = [f"{head}: {len(self.problems)} problems{note}"] + [f"  {p}" for p in self.problems[:200]]
        if len(self.problems) > 200:
            lines.append(f"  ... and {len(self.problems) - 200} more (see --json)")
        return "\n".join(lines)


@dataclass(frozen=True)
class _ShardTask:
    folder: str
    split: str
    file: str
    index_file: str
    num_records: int
    num_bytes: int
    sha256: str
    compression: str | None
    labels: list[str] | None
    label_offset: int
    decode: bool
    keys: schema.Schema
    task: str = DEFAULT_TASK  # what each record holds of `labels`: one, a list, a mask, objects (format/tasks.py)


@dataclass
class _ShardOutcome:
    problems: list[Problem] = field(default_factory=list)
    records: int = 0
    decoded: int = 0
    class_counts: Counter[str] = field(default_factory=Counter)
    instance_counts: Counter[str] = field(default_factory=Counter)  # detection: objects per class


@renamed(foreign_keys="foreign")
def verify(
    path: str | Sequence[str],
    *,
    workers: int | None = None,
    decode: bool = True,
    progress: bool = True,
    foreign: ForeignKeys | None = None,
) -> VerifyReport:
    """Checks a converted folder completely; see the module docstring for what is checked.

    Args:
        path: the converted folder, or other people's TFRecords (a folder, glob or list: their
            framing, CRCs and feature types are checked, record by record; `adopt` them to
            check them against a manifest).
        workers: processes checking shards in parallel (default: all cores).
        decode: decode every image (default); False checks framing, parsing and hashes only.
        progress: a progress bar on stderr.
        foreign: for other people's TFRecords, their image/label keys and label offset (old name
            `foreign_keys=`, which took an `AdoptOptions`: its keys are used).
    """
    if isinstance(foreign, AdoptOptions):  # the old way: foreign_keys=AdoptOptions(...)
        foreign = foreign.foreign
    if not is_converted_folder(path):
        return _verify_foreign(path, AdoptOptions(foreign=foreign), workers, progress)
    assert isinstance(path, str)  # narrowed: a converted folder is a path here
    start = time.monotonic()
    m = manifest.read(path, check=False)
    report = VerifyReport(path, near_duplicates=m.near_duplicates)
    report.problems.extend(_stray_files(path))
    unusable = manifest.structure_problems(m.data)
    report.problems.extend(Problem(f"manifest.json: {p}") for p in unusable or manifest.total_problems(m.data))
    if unusable:
        report.seconds = time.monotonic() - start
        return report
    tasks = [
        _ShardTask(
            path,
            split,
            s.file,
            s.index_file,
            s.num_records,
            s.num_bytes,
            s.sha256,
            m.compression,
            m.labels,
            m.label_offset,
            decode,
            m.keys,
            m.header.task,
        )
        for split in m.split_names
        for s in m.split(split).shards
    ]
    counts: dict[str, Counter[str]] = {split: Counter() for split in m.split_names}
    instances: dict[str, Counter[str]] = {split: Counter() for split in m.split_names}
    from tqdm import tqdm

    workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    # The pool is started before the progress bar: workers forked while Ctrl-C arrives could
    # neither ignore it yet nor let the parent see it.
    with WorkerPool(workers) as pool:
        total = sum(t.num_records for t in tasks)
        with tqdm(total=total, unit="rec", desc="verify", disable=not progress) as bar:
            outcomes = pool.map(verify_shard, tasks) if pool is not None else map(verify_shard, tasks)
            for task, outcome in zip(tasks, outcomes, strict=True):
                _collect(report, counts, task, outcome, bar)
                instances[task.split].update(outcome.instance_counts)
    report.problems += _count_problems(m, counts, instances)
    report.seconds = time.monotonic() - start
    return report


def _count_problems(
    m: manifest.Manifest, counts: dict[str, Counter[str]], instances: dict[str, Counter[str]]
) -> list[Problem]:
    """Where the records' counts differ from the manifest's: images per class (one class per
    image), objects per class (detection)."""
    problems = []
    for split in m.split_names:
        objects = m.split(split).objects
        if objects is not None and instances[split] != Counter({k: v for k, v in objects.instances.items() if v}):
            problems.append(
                Problem(
                    f"split {split!r}: objects per class {dict(instances[split])} differ from the manifest's "
                    f"{dict(objects.instances)}"
                )
            )
        expected = Counter(m.split(split).class_counts)
        if m.labels is not None and task_of(m.header.task).one_label and counts[split] != expected:
            problems.append(
                Problem(
                    f"split {split!r}: class counts {dict(counts[split])} differ from the manifest's {dict(expected)}"
                )
            )
    return problems


def _verify_foreign(path: str | Sequence[str], keys: AdoptOptions, workers: int | None, progress: bool) -> VerifyReport:
    """Other people's TFRecords read through once with adopt's scan: damaged records and
    records whose image or label feature has the wrong type, each by file, record and byte."""
    start = time.monotonic()
    files, compression = foreign.find_files(path)
    schema_found = read_schema(files, compression, keys)
    tasks = [ShardTask(f, compression, schema_found, None) for f in files]
    scans = scan_all(tasks, workers, progress)
    report = VerifyReport(path if isinstance(path, str) else ", ".join(path), foreign=True)
    report.shards, report.records = len(scans), sum(len(s.sizes) for s in scans)
    report.problems = [Problem(p) for s in scans for p in s.problems]
    report.seconds = time.monotonic() - start
    return report


def _collect(
    report: VerifyReport, counts: dict[str, Counter[str]], task: _ShardTask, outcome: _ShardOutcome, bar: Any
) -> None:
    report.shards += 1
    report.records += outcome.records
    report.images_decoded += outcome.decoded
    report.problems.extend(outcome.problems)
    counts[task.split].update(outcome.class_counts)
    bar.update(task.num_records)


def _stray_files(folder: str) -> list[Problem]:
    problems = []
    for name in fileio.listdir(folder):
        if name.endswith(layout.INCOMPLETE):
            problems.append(Problem(f"stray temporary file {name!r} (left by an interrupted write; delete it)"))
    if fileio.exists(fileio.join(folder, layout.WORK_DIR)):
        problems.append(Problem("leftover work folder '.shardfeed' from an interrupted conversion"))
    return problems


def verify_shard(task: _ShardTask) -> _ShardOutcome:
    """Checks one shard completely (runs in a worker process)."""
    out = _ShardOutcome()
    path = fileio.join(task.folder, task.file)
    if not fileio.exists(path):
        out.problems.append(Problem("shard file is missing", task.file))
        return out
    kind = fileio.special_kind(path)
    if kind:  # a FIFO would block this worker forever, a device never end
        out.problems.append(Problem(kind, task.file))
        return out
    offsets: list[tuple[int, int]] = []
    with fileio.open_binary(path, "rb") as raw:
        tee = fileio.HashingReader(raw)  # streamed: memory stays at one record, whatever the shard size
        stream: Any = gzip.GzipFile(fileobj=cast(BinaryIO, tee), mode="rb") if task.compression == "gzip" else tee
        try:
            for index, (offset, record) in enumerate(tfrecord.iter_records(stream, name=task.file)):
                offsets.append((offset, len(record) + tfrecord.FRAMING_BYTES))
                _check_record(task, index, record, out)
        except (tfrecord.CorruptRecordError, EOFError, OSError) as e:
            out.problems.append(Problem(str(e).split(": ", 1)[-1], task.file, len(offsets)))
        tee.drain()
    if tee.size != task.num_bytes:
        out.problems.insert(0, Problem(f"file has {tee.size} bytes, the manifest says {task.num_bytes}", task.file))
    elif tee.sha256.hexdigest() != task.sha256:
        out.problems.insert(0, Problem("file SHA-256 differs from the manifest's", task.file))
    out.records = len(offsets)
    if len(offsets) != task.num_records:
        out.problems.append(Problem(f"{len(offsets)} records read, the manifest says {task.num_records}", task.file))
    index_path = fileio.join(task.folder, task.index_file)
    if not fileio.exists(index_path):
        out.problems.append(Problem(f"index file {task.index_file} is missing", task.file))
    else:
        try:
            listed = tfrecord.read_index(index_path, task.num_records)
        except tfrecord.CorruptRecordError as e:
            reason = tfrecord.unreadable(e.__cause__ or e)
            out.problems.append(Problem(f"index file {task.index_file} cannot be read ({reason})", task.file))
        else:
            if listed != offsets:
                out.problems.append(Problem(f"index file {task.index_file} does not match the records", task.file))
    return out


def _beyond_one_label(task: _ShardTask, features: dict[str, list[Any]]) -> str | None:
    """What is wrong with a record's multi-label ids or objects (the task's `record_problem`), or
    its mask (decoded when `task.decode`), or None."""
    spec, classes = task_of(task.task), len(task.labels or [])
    if problem := spec.record_problem(features, classes, task.label_offset):
        return problem
    if spec.mask_feature is not None and task.decode:
        height, width = (int((features.get(k) or [0])[0]) for k in (schema.HEIGHT, schema.WIDTH))
        return check_stored_mask((features.get(spec.mask_feature) or [None])[0], height, width, classes)
    return None


def _check_record(task: _ShardTask, index: int, record: bytes, out: _ShardOutcome) -> None:
    try:
        features = schema.canonical(parse_example(record), task.keys)
    except ValueError as e:
        out.problems.append(Problem(str(e), task.file, index))
        return

    def one(key: str) -> Any:
        values = features.get(key)
        return values[0] if values else None

    image = one(schema.ENCODED)
    if image is None:
        out.problems.append(Problem(f"record has no {task.keys.image_key}", task.file, index))
        return
    if one(schema.SHA256) not in (None, hashlib.sha256(image).hexdigest().encode()):
        out.problems.append(Problem(f"image bytes do not match {schema.SHA256}", task.file, index))
    if task.labels is not None and task_of(task.task).one_label:
        label, text = one(schema.LABEL), one(schema.TEXT)
        if label is None or not 0 <= label - task.label_offset < len(task.labels):
            out.problems.append(
                Problem(
                    f"label {label} is outside 0..{len(task.labels) - 1} (+offset {task.label_offset})",
                    task.file,
                    index,
                )
            )
        else:
            name = task.labels[label - task.label_offset]
            if text is not None and text.decode() != name:
                out.problems.append(
                    Problem(
                        f"label {label} is {name!r} in the label map but the record says {text.decode()!r}",
                        task.file,
                        index,
                    )
                )
            out.class_counts[name] += 1
    if problem := _beyond_one_label(task, features):
        out.problems.append(Problem(problem, task.file, index))
    elif task_of(task.task).objects and task.labels is not None:
        stored = features.get(schema.OBJECT_LABEL, [])  # one below the offset is no class (adopt reports it)
        out.instance_counts.update(task.labels[v - task.label_offset] for v in stored if v >= task.label_offset)
    if task.decode:
        fmt = (one(schema.FORMAT) or b"JPEG").decode()
        problem = check_stored_image(
            image, fmt, one(schema.HEIGHT) or 0, one(schema.WIDTH) or 0, one(schema.CHANNELS) or 3
        )
        out.decoded += 1
        if problem:
            out.problems.append(Problem(problem, task.file, index))
