"""Other people's TFRecords read through once, for `adopt`: each record's framing, CRCs, image and
label features checked, and what the records hold counted (labels, class texts, formats, image
sides, feature types). Damage is collected as 'FILE: record N at byte B: why', never raised
mid-way, so one run lists every damaged record."""

from __future__ import annotations

import gzip
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, BinaryIO, cast

from shardfeed.errors import OptionError, SourceError
from shardfeed.format import fileio, image_limits, label_map, layout, manifest, schema, tfrecord
from shardfeed.format.annotations import is_pixel_area, size_name, stored_objects_problem
from shardfeed.format.confinement import text_refusal
from shardfeed.format.example_proto import parse_example
from shardfeed.format.image_format import sniff_format
from shardfeed.format.schema import ForeignKeys, Schema
from shardfeed.format.tasks import task_of
from shardfeed.parallel import WorkerPool

MAX_PROBLEMS = 20  # damaged records listed per shard (the rest counted)


@dataclass(frozen=True)
class AdoptOptions:
    """How to read the foreign records (what `convert` would have decided).

    Attributes:
        foreign: which features hold the image and the label, and the labels' base
            (`ForeignKeys`; default image/encoded, image/class/label, offset 0). An offset of 1
            is for Inception's build_image_data.py and keras_imagenet, whose labels run 1..K.
        split_pattern: a regex searched in each file name; its group `split` (else its first
            group) is the file's split. Default: the split word in the name (train-, validation_,
            -test.tfrecord); files whose names carry none are one split, 'train'.
        labels_file: class names, `id:name` per line with the stored ids (TF-slim's and our
            labels.txt) or one name per line for ids 0, 1, ... after the offset. Default: a
            labels.txt beside the shards when there is one, else image/class/text, else the ids.
        workers: processes reading shards (default: all cores).
        image_key, label_key, label_offset: deprecated; the same as `foreign=ForeignKeys(...)`.
    """

    foreign: ForeignKeys | None = None
    split_pattern: str | None = None
    labels_file: str | None = None
    workers: int | None = None
    image_key: str | None = None  # deprecated: foreign=
    label_key: str | None = None  # deprecated: foreign=
    label_offset: int | None = None  # deprecated: foreign=

    def __post_init__(self) -> None:
        ForeignKeys.fold(self, "AdoptOptions")
        if self.workers is not None and (not isinstance(self.workers, int) or self.workers < 1):
            raise OptionError(f"workers must be a positive integer, got {self.workers!r}")

    @property
    def keys(self) -> ForeignKeys:
        """The keys asked for (defaults: ours)."""
        return self.foreign or ForeignKeys()

    @property
    def offset(self) -> int:
        """The labels' base (0 unless given)."""
        return self.keys.label_offset or 0

    def recorded(self) -> dict[str, Any]:
        """What the manifest records (a re-run with other values adopts again)."""
        keys = self.keys
        return {
            "image_key": keys.image_key,
            "label_key": keys.label_key,
            "label_offset": self.offset,
            "split_pattern": self.split_pattern,
            "labels_file": self.labels_file,
        }


@dataclass(frozen=True)
class ShardTask:
    path: str
    compression: str | None
    keys: Schema
    text_key: str | None
    task: str = schema.CLASSIFICATION  # DETECTION: records of objects (the OD API's, Model Garden's)
    label_offset: int = 0  # DETECTION: an object labelled below it is no class (`ShardScan.below_offset`)


@dataclass
class ShardScan:
    """One shard read through: its bytes' hash and size, each record's size, and what the records
    hold (labels, class texts, formats, image sides, feature types)."""

    path: str
    num_bytes: int = 0
    sha256: str = ""
    sizes: list[int] = field(default_factory=list)
    labels: Counter[int] = field(default_factory=Counter)
    texts: dict[int, set[str]] = field(default_factory=dict)
    formats: Counter[str] = field(default_factory=Counter)
    max_side: int = 0
    short_sides: Counter[int] = field(default_factory=Counter)
    features: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    image_classes: Counter[int] = field(default_factory=Counter)  # detection: images showing each label
    object_sizes: Counter[str] = field(default_factory=Counter)  # detection: objects by COCO size
    without_objects: int = 0  # detection: images with none
    most_objects: int = 0  # detection: the most in one image
    below_offset: list[tuple[str, int, str]] = field(default_factory=list)  # (record, object, why): not a class


def read_schema(files: list[str], compression: str | None, options: AdoptOptions) -> Schema:
    """The schema read off the first record (types checked: `schema.foreign_schema`)."""
    return schema_and_task(files, compression, options)[0]


def schema_and_task(files: list[str], compression: str | None, options: AdoptOptions) -> tuple[Schema, str]:
    """The schema and what the records hold (`records_task`), both read off the first record: a
    record of objects without an image label has no label key; a label key given means one class
    per image."""
    firsts = _first_records(files, compression)
    # objects in any file's first record: a split of images without objects may have been
    # written without the object keys (a test split the OD API refused as lacking image/class/label)
    path, record = next(((f, r) for f, r in firsts if task_of(records_task(r)).objects), firsts[0])
    label_key = options.keys.label_key
    task = schema.CLASSIFICATION if label_key else records_task(record)
    if label_key is None and task_of(task).objects:
        label_key = ""  # its classes are per object
    return schema.foreign_schema(record, path, options.keys.image_key, label_key), task


def records_task(record: dict[str, list[Any]]) -> str:
    """What a parsed record holds: detection when it has the object keys the OD API and Model
    Garden write (boxes and their labels) and no image label, else classification."""
    objects = all(key in record for key in (*schema.BOX_KEYS, schema.OBJECT_LABEL))
    return schema.DETECTION if objects and schema.LABEL not in record else schema.CLASSIFICATION


def _first_records(files: list[str], compression: str | None) -> list[tuple[str, dict[str, list[Any]]]]:
    """(file, its first record parsed) of each file that holds one, in order.

    Raises:
        SourceError: no file holds a record.
    """
    firsts = []
    for f in files:
        first = next(iter(tfrecord.read_records(f, compression=compression)), None)
        if first is not None:
            firsts.append((f, parse_example(first)))
    if not firsts:
        raise SourceError(f"the TFRecord files {files[:3]} hold no records")
    return firsts


def scan_all(tasks: list[ShardTask], workers: int | None, progress: bool) -> list[ShardScan]:
    """Every shard scanned, in parallel processes, in `tasks` order."""
    from tqdm import tqdm

    workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    with WorkerPool(workers) as pool:
        results = pool.map(scan_shard, tasks) if pool is not None else map(scan_shard, tasks)
        return list(tqdm(results, total=len(tasks), unit="shard", desc="adopt", disable=not progress))


def scan_shard(task: ShardTask) -> ShardScan:
    """Reads one shard through (runs in a worker process); damage and wrong records go to
    `problems` as 'FILE: record N at byte B: why'."""
    scan = ShardScan(task.path)
    with fileio.open_binary(task.path, "rb") as raw:
        tee = fileio.HashingReader(raw)
        stream: Any = gzip.GzipFile(fileobj=cast(BinaryIO, tee), mode="rb") if task.compression == "gzip" else tee
        offset = 0
        try:
            for offset, data in tfrecord.iter_records(stream, name=task.path):
                _scan_record(task, scan, data, offset)
                scan.sizes.append(len(data))
        except (tfrecord.CorruptRecordError, EOFError, OSError) as e:
            scan.problems.append(str(e))
        tee.drain()
    scan.num_bytes, scan.sha256 = tee.size, tee.sha256.hexdigest()
    return scan


def _scan_record(task: ShardTask, scan: ShardScan, data: bytes, offset: int) -> None:
    where = f"{task.path}: record {len(scan.sizes)} at byte {offset}"
    try:
        features = parse_example(data)
    except tfrecord.CorruptRecordError as e:
        _problem(scan, f"{where}: {e}")
        return
    for key, values in features.items():
        if values and key not in scan.features:
            scan.features[key] = schema.type_name(values[0])
    keys = task.keys
    image = features.get(keys.image_key)
    if not image or isinstance(image[0], float) != keys.pixels_as_floats:
        kind = "float pixels" if keys.pixels_as_floats else "encoded image bytes"
        _problem(scan, f"{where}: feature {keys.image_key!r} is {schema.describe(image or [])}, not {kind}")
        return
    if task_of(task.task).objects:
        if problem := _objects(scan, features, task.label_offset, where):
            _problem(scan, f"{where}: {problem}")
            return
    elif keys.label_key is not None:
        label = features.get(keys.label_key)
        if not label or len(label) != 1 or not isinstance(label[0], int):
            _problem(scan, f"{where}: feature {keys.label_key!r} is {schema.describe(label or [])}, not one int64")
            return
        scan.labels[label[0]] += 1
        text = features.get(task.text_key or "")
        if text and isinstance(text[0], bytes):
            scan.texts.setdefault(label[0], set()).add(text[0].decode(errors="replace"))
    if keys.pixels_as_floats:
        ours = schema.canonical(features, keys)
        size: tuple[int, int] | None = (int(ours[schema.WIDTH][0]), int(ours[schema.HEIGHT][0]))
        scan.formats["RAW"] += 1
    else:
        size = image_limits.header_size(image[0])
        scan.formats[(sniff_format(image[0]) or "unknown").upper()] += 1
    if size is not None:
        scan.max_side = max(scan.max_side, *size)
        scan.short_sides[manifest.side_bucket(min(size))] += 1
        if task_of(task.task).objects:  # each object's COCO size, in pixels of this image
            columns = [features.get(k, []) for k in schema.BOX_KEYS]
            for x0, y0, x1, y1 in zip(*columns, strict=True):
                area = (x1 - x0) * size[0] * (y1 - y0) * size[1]
                if is_pixel_area(area):  # a NaN box has no size (`verify` names it)
                    scan.object_sizes[size_name(area)] += 1


def _objects(scan: ShardScan, features: dict[str, list[Any]], offset: int, where: str) -> str | None:
    """A detection record's objects counted (per label, per image; their sizes once the image's
    is known, `_scan_record`), or what is wrong with them (`annotations.stored_objects_problem`;
    labels below 0). An object labelled below `offset` is no class: listed in `below_offset` (the
    readers leave it out), not counted, and the record adopted."""
    if problem := stored_objects_problem(features, 1 << 62, 0):
        return problem
    labels = features.get(schema.OBJECT_LABEL, [])
    texts = features.get(schema.OBJECT_TEXT, [])
    kept = []
    for index, label in enumerate(labels):
        if label < offset:
            scan.below_offset.append((where, index, f"label {label} is below the label offset {offset}: no class"))
            continue
        kept.append(label)
        scan.labels[label] += 1
        if len(texts) == len(labels):
            scan.texts.setdefault(label, set()).add(texts[index].decode(errors="replace"))
    scan.image_classes.update(set(kept))
    scan.without_objects += not kept
    scan.most_objects = max(scan.most_objects, len(kept))
    return None


def _problem(scan: ShardScan, message: str) -> None:
    if len(scan.problems) < MAX_PROBLEMS:
        scan.problems.append(message)
    elif len(scan.problems) == MAX_PROBLEMS:
        scan.problems.append(f"{scan.path}: more records like these (only the first {MAX_PROBLEMS} listed)")


def refuse_damage(scans: list[ShardScan]) -> None:
    """Nothing is written for a folder with damaged or unreadable records."""
    problems = [p for s in scans for p in s.problems]
    if problems:
        listed = "\n  ".join(problems[:50])
        more = f"\n  ... and {len(problems) - 50} more" if len(problems) > 50 else ""
        raise SourceError(
            f"{len(problems)} damaged or unreadable records; nothing was written (the shards stay as they are; "
            f"rewrite or remove these files, then adopt again):\n  {listed}{more}"
        )


def class_names(
    scans: list[ShardScan], files: list[str], keys: Schema, options: AdoptOptions
) -> tuple[list[str] | None, list[str]]:
    """The class names (index = stored id - offset) and warnings.

    Names come from the labels file, else from one image/class/text per label, else the ids.

    Raises:
        SourceError: labels below the offset; a label with two class texts; a name used twice.
    """
    if keys.label_key is None and not any(s.image_classes or s.without_objects for s in scans):
        return None, []
    counts: Counter[int] = sum((s.labels for s in scans), Counter())
    offset = options.offset
    if not counts:
        return [], []
    low, high = min(counts), max(counts)
    if low < offset:
        below = sum(n for label, n in counts.items() if label < offset)
        raise SourceError(
            f"{below:,} records have labels below the label offset {offset} (the lowest is {low}): with "
            f"--label-offset {offset} they would read as {low - offset}; adopt with --label-offset {max(low, 0)} "
            "or without one"
        )
    named = _labels_file(files, options)
    texts: dict[int, set[str]] = {}
    for s in scans:
        for label, names in s.texts.items():
            texts.setdefault(label, set()).update(names)
    clashing = {label: sorted(names) for label, names in texts.items() if len(names) > 1}
    if clashing and not named:
        label, found = next(iter(sorted(clashing.items())))
        raise SourceError(
            f"label {label} has more than one class text in {schema.TEXT} ({found}); pass a labels file "
            "(--labels FILE) naming each id"
        )
    top = max([high, *named]) if named else high
    names_list = [named.get(i) or (texts[i].pop() if i in texts else str(i)) for i in range(offset, top + 1)]
    twice = sorted(n for n, k in Counter(names_list).items() if k > 1)
    if twice:
        raise SourceError(f"class names {twice[:5]} stand for more than one label id; pass --labels FILE")
    warnings = []
    if offset == 0 and low >= 1:
        warnings.append(
            f"labels run {low}..{high} and none is 0: if they are 1-based (Inception's build_image_data.py, "
            "keras_imagenet), adopt again with --label-offset 1; as it is, class 0 has no records"
        )
    return names_list, warnings


def _labels_file(files: list[str], options: AdoptOptions) -> dict[int, str]:
    """{stored id: name} from --labels, else a labels.txt beside the shards, else the OD API's
    label_map.pbtxt beside them (its ids are the stored ids); empty when none."""
    path = options.labels_file
    if path is None:
        folder = os.path.dirname(files[0])
        beside = os.path.join(folder, layout.LABELS)
        path = beside if os.path.isfile(beside) else None
        if path is None and os.path.isfile(label_map_path := os.path.join(folder, label_map.FILE_NAME)):
            return _label_map(label_map_path)
    if path is None:
        return {}
    if path.endswith(".pbtxt"):
        return _label_map(path)
    try:
        lines = [line.strip() for line in fileio.read_bytes(path).decode().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise SourceError(f"labels file {path} cannot be read: {e}") from None
    pairs = [line.split(":", 1) for line in lines]
    if all(len(p) == 2 and p[0].strip().isdigit() for p in pairs):
        return {int(i): name.strip() for i, name in pairs}
    return {i + options.offset: name for i, name in enumerate(lines)}


def _label_map(path: str) -> dict[int, str]:
    """{id: name} of an OD API label map (format/label_map.py), read as a regular file of at most
    `label_map.MAX_BYTES`.

    Raises:
        SourceError: unreadable, too large, or not a label map, naming the file.
    """
    try:
        text = fileio.read_regular(path, label_map.MAX_BYTES, "a label map needs").decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise SourceError(f"label map {path} cannot be read: {e}") from None
    names = label_map.parse(text, path)
    for name in names.values():
        if refusal := text_refusal(name):
            raise SourceError(f"label map {path}: {refusal}")
    return names
