"""Write one shard: framed records under a temporary name, renamed when complete.

A shard is committed in three renames: the shard file, its DALI index (in `index/`), then its
partial manifest (in the work folder). Only a shard whose partial manifest exists counts as done,
so a crash at any point leaves nothing that looks complete.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shardfeed.format import fileio, layout, manifest, tfrecord
from shardfeed.format.manifest_builder import ImageStats, ObjectStats, ShardFacts, ShardInfo
from shardfeed.write import perceptual_hash
from shardfeed.write.encode import EncodedRecord, EncodingSpec, SkippedItem, Unhashed, encode_unhashed
from shardfeed.write.items import Item

# Perceptual hashes made together, after up to this many images: 7 us a hash in a worker against
# 12-13 us one after each decode (the NumPy calls run warm; 8 us 256 at a time). What waits is
# each image's small gray one: some 2 KB, at most perceptual_hash.KEPT_PIXELS (16 MB in all).
HASHED_AT_ONCE = 1024


@dataclass
class ShardResult:
    """What one written shard holds: the partial manifest merged into manifest.json."""

    split: str
    file: str
    index_file: str
    num_records: int = 0
    num_bytes: int = 0
    sha256: str = ""
    class_counts: dict[str, int] = field(default_factory=dict)
    formats: dict[str, int] = field(default_factory=dict)  # stored image format -> records
    max_side: int | None = None  # longest stored image side (None: written before it was counted)
    short_sides: dict[str, int] | None = None  # manifest.side_bucket of shorter sides -> records (ditto)
    # (key, source sha256, size and mtime_ns as listed, perceptual hash or None, annotations digest
    # or None); parts written before 0.10 hold the first two, before 0.12 the first four
    records: list[tuple[Any, ...]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    converted: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    skipped_annotations: list[tuple[str, int, str]] = field(default_factory=list)  # (image, annotation id, why)
    clipped_boxes: int = 0
    clipped_annotations: list[tuple[str, int, str]] = field(default_factory=list)  # (image, annotation id, how)
    instance_counts: dict[str, int] | None = None  # detection: class name -> objects written
    box_sizes: dict[str, int] | None = None  # and COCO size -> objects
    images_without_objects: int = 0
    most_objects: int | None = None  # and the most in one image (None: a part written before it was counted)

    def to_json(self) -> str:
        """The partial manifest's text. Its fields are plain values, lists and tuples: dumped as
        they are (`asdict` copied every record's tuple first: 37 us a record, measured)."""
        return json.dumps({f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, sort_keys=True)

    def facts(self) -> ShardFacts:
        """What the manifest records of this shard (`ManifestBuilder.add`)."""
        info = ShardInfo(self.file, self.index_file, self.num_records, self.num_bytes, self.sha256)
        images = ImageStats(self.formats, self.max_side, self.short_sides)
        objects = None
        if self.instance_counts is not None:
            objects = ObjectStats(
                self.instance_counts, self.box_sizes or {}, self.images_without_objects, self.most_objects
            )
        return ShardFacts(self.split, info, self.class_counts, images, tuple(why for _, why in self.converted), objects)

    def without_records(self) -> ShardResult:
        """This result without its per-record list, which stays on disk in the partial manifest
        (so the converter's memory does not grow with the number of images)."""
        return dataclasses.replace(self, records=[])

    @classmethod
    def from_json(cls, text: str) -> ShardResult:
        data: dict[str, Any] = json.loads(text)
        for key in ("records", "skipped", "converted", "warnings", "skipped_annotations", "clipped_annotations"):
            data[key] = [tuple(pair) for pair in data.get(key, [])]
        return cls(**data)


class _HashingWriter:
    """A binary sink that hashes and counts what passes through it."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.digest = hashlib.sha256()
        self.count = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.count += len(data)
        self.sink.write(data)  # some sinks (tf.io.gfile.GFile) return None, not a count
        return len(data)

    def flush(self) -> None:
        self.sink.flush()

    def close(self) -> None:
        self.sink.close()


def write_shard(
    output_dir: str,
    work_dir: str,
    split: str,
    file_name: str,
    results: Iterable[EncodedRecord | Unhashed | SkippedItem],
    *,
    class_names: list[str] | None,
    compression: str | None = None,
) -> ShardResult:
    """Writes the records of `results` (in order) as one shard and commits it; the perceptual
    hashes of `Unhashed` ones are made HASHED_AT_ONCE at a time, into the partial manifest.

    Skipped items are recorded in the shard's partial manifest, so every input is accounted for.
    """
    path = fileio.join(output_dir, file_name)
    tmp = layout.incomplete(path)
    result = ShardResult(split, file_name, layout.index_file(file_name), max_side=0)
    sizes: list[int] = []
    short_sides: dict[str, int] = {}
    sink = _HashingWriter(fileio.open_binary(tmp, "wb"))
    unhashed: list[tuple[int, perceptual_hash.Source]] = []  # (index in result.records, its source)
    try:
        stream: Any = gzip.GzipFile(filename="", mode="wb", fileobj=sink, mtime=0) if compression == "gzip" else sink
        for item in results:
            if isinstance(item, SkippedItem):
                result.skipped.append((item.key, item.reason))
                continue
            if isinstance(item, Unhashed):
                if item.source is not None:
                    unhashed.append((len(result.records), item.source))
                item = item.record
            stream.write(tfrecord.frame(item.data))
            sizes.append(len(item.data))
            result.records.append((item.key, item.source_sha256, *item.listed, item.phash, item.annotations))
            if class_names is not None:  # a class per image, or the classes its mask shows
                for name in [class_names[c] for c in item.classes or ((item.label,) if item.label >= 0 else ())]:
                    result.class_counts[name] = result.class_counts.get(name, 0) + 1
            result.formats[item.image_format] = result.formats.get(item.image_format, 0) + 1
            result.max_side = max(result.max_side or 0, item.max_side)
            bucket = str(manifest.side_bucket(item.short_side))
            short_sides[bucket] = short_sides.get(bucket, 0) + 1
            if item.conversion:
                result.converted.append((item.key, item.conversion))
            if item.warning:
                result.warnings.append((item.key, item.warning))
            result.skipped_annotations += [(item.key, i, why) for i, why in item.skipped_annotations]
            result.clipped_boxes += len(item.clipped_boxes)
            result.clipped_annotations += [(item.key, i, how) for i, how in item.clipped_boxes]
            if item.objects is not None and class_names is not None:
                _count_objects(result, item.objects, class_names)
            if len(unhashed) >= HASHED_AT_ONCE:
                _add_hashes(result, unhashed)
        _add_hashes(result, unhashed)
        if stream is not sink:
            stream.close()
        sink.close()
    except BaseException:
        sink.close()
        fileio.remove(tmp)
        raise
    result.num_records = len(sizes)
    result.short_sides = short_sides
    result.num_bytes = sink.count
    result.sha256 = sink.digest.hexdigest()
    fileio.rename(tmp, path)
    fileio.write_text_atomic(fileio.join(output_dir, layout.index_file(file_name)), tfrecord.format_index(sizes))
    fileio.write_text_atomic(part_path(work_dir, file_name), result.to_json())
    return result


def _count_objects(result: ShardResult, objects: tuple[tuple[int, str], ...], class_names: Sequence[str]) -> None:
    """A detection record's objects added to its shard's counts (per class, per COCO size, the
    most in one image)."""
    instances = result.instance_counts = result.instance_counts if result.instance_counts is not None else {}
    sizes = result.box_sizes = result.box_sizes if result.box_sizes is not None else {}
    for label, size in objects:
        instances[class_names[label]] = instances.get(class_names[label], 0) + 1
        sizes[size] = sizes.get(size, 0) + 1
    result.images_without_objects += not objects
    result.most_objects = max(result.most_objects or 0, len(objects))


def _add_hashes(result: ShardResult, unhashed: list[tuple[int, perceptual_hash.Source]]) -> None:
    """Makes the `unhashed` records' perceptual hashes, into their partial-manifest entries."""
    for (at, _), phash in zip(unhashed, perceptual_hash.of_sources([s for _, s in unhashed]), strict=True):
        result.records[at] = (*result.records[at][:4], phash, *result.records[at][5:])
    unhashed.clear()


@dataclass(frozen=True)
class WriteTarget:
    """Where and how a conversion's shards are written; one picklable value that the local runner
    and the Beam workers share, so both write byte-identical shards."""

    output_dir: str
    work_dir: str
    spec: EncodingSpec
    compression: str | None = None

    def write(
        self, split: str, file_name: str, results: Iterable[EncodedRecord | Unhashed | SkippedItem]
    ) -> ShardResult:
        """`write_shard` of `results` as `file_name`, committed."""
        return write_shard(
            self.output_dir,
            self.work_dir,
            split,
            file_name,
            results,
            class_names=self.spec.class_names,
            compression=self.compression,
        )

    def write_items(self, split: str, file_name: str, items: Sequence[Item]) -> ShardResult:
        """Encodes `items` here, one at a time, and writes them as `file_name` (the per-shard work
        of a Beam worker or of a local worker given a whole shard)."""
        return self.write(split, file_name, encode_unhashed(items, self.spec))

    def committed(self, file_name: str) -> ShardResult | None:
        """The shard's partial manifest (`without_records`), or None if it is not committed."""
        result = read_part(self.work_dir, file_name, self.output_dir)
        return None if result is None else result.without_records()


def part_path(work_dir: str, file_name: str) -> str:
    """Where the partial manifest of a shard is kept until the final merge."""
    return fileio.join(work_dir, "parts", file_name + ".json")


def read_part(work_dir: str, file_name: str, output_dir: str) -> ShardResult | None:
    """The partial manifest of a committed shard, or None if the shard must be (re)written."""
    path = part_path(work_dir, file_name)
    if not fileio.exists(path):
        return None
    result = ShardResult.from_json(fileio.read_bytes(path).decode())
    shard = fileio.join(output_dir, file_name)
    if not fileio.exists(shard) or fileio.size(shard) != result.num_bytes:
        return None
    return result
