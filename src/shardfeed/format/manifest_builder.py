"""manifest.json's data and its one builder: `convert`, `convert --append` and `adopt` each hand it the folder's
fixed facts (`Header`), then every shard with what it holds (`ShardFacts`), then the counts;
`ManifestBuilder.build` makes the JSON object format/manifest.py reads (`manifest.read`, whose
`Manifest` answers with these same types).

    Header      source, settings, labels, label offset, features, schema, label range
    ShardFacts  one shard: its split, its manifest entry (`ShardInfo`), the class counts
                and image statistics (`ImageStats`) of its records, and a detection shard's
                objects (`ObjectStats`: per class, per COCO size, images without any)
    Counts      skipped inputs, duplicate groups, dropped copies, label conflicts

An append continues the folder's manifest (`ManifestBuilder.continuing`): its shards, statistics
and conversions stay, the new generation's are added, and the fields this builder does not make
(the generations, near-duplicate counts, label-conflict counts) are carried over unless given
again. docs/reference/manifest.md documents every field; tests/test_manifest_builder.py checks the
page against what the three writers write.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shardfeed.format import layout
from shardfeed.format.annotations import COCO_SIZES
from shardfeed.format.tasks import DEFAULT_TASK
from shardfeed.version import __version__

FORMAT_NAME = "shardfeed"
ADOPTED = "adopted"  # source.kind of a folder `shardfeed adopt` described (records another program wrote)
MANIFEST_VERSION = 1


@dataclass(frozen=True)
class ShardInfo:
    """A shard's manifest entry: its file and index file (inside the folder), records, bytes
    and the SHA-256 of its bytes."""

    file: str
    index_file: str
    num_records: int
    num_bytes: int
    sha256: str


@dataclass(frozen=True)
class ObjectStats:
    """A detection split's (or shard's) objects: per class, per COCO size, the images with none,
    and the most in one image (what a fixed-shape batch pads to: `DecodeOptions.max_objects`)."""

    instances: Mapping[str, int] = field(default_factory=dict)  # class name -> objects
    sizes: Mapping[str, int] = field(default_factory=dict)  # 'small' / 'medium' / 'large' -> objects
    without_objects: int = 0  # images with no object
    most: int | None = None  # objects in the image with the most (None: written before it was counted)

    def plus(self, other: ObjectStats) -> ObjectStats:
        """Both together (the most not known if either does not know it)."""
        return ObjectStats(
            dict(Counter(self.instances) + Counter(other.instances)),
            dict(Counter(self.sizes) + Counter(other.sizes)),
            self.without_objects + other.without_objects,
            None if self.most is None or other.most is None else max(self.most, other.most),
        )

    def fields(self) -> dict[str, Any]:
        """A split's fields for these facts."""
        most = {"max_objects_per_image": self.most} if self.most is not None else {}
        return {
            "instance_counts": dict(sorted(self.instances.items())),
            "box_sizes": {name: self.sizes.get(name, 0) for name, _ in COCO_SIZES},
            "images_without_objects": self.without_objects,
            **most,
        }

    @classmethod
    def of_split(cls, split: Mapping[str, Any]) -> ObjectStats | None:
        """The statistics a written split holds (None: not a detection split)."""
        if "instance_counts" not in split:
            return None
        return cls(
            split["instance_counts"],
            split.get("box_sizes", {}),
            split.get("images_without_objects", 0),
            split.get("max_objects_per_image"),
        )


@dataclass(frozen=True)
class SplitInfo:
    """A split as the manifest holds it (`Manifest.split`): totals, class counts, its shards."""

    name: str
    num_records: int
    num_bytes: int
    class_counts: dict[str, int]
    shards: list[ShardInfo]
    objects: ObjectStats | None = None  # a detection split's objects

    @classmethod
    def of_manifest(cls, name: str, raw: Mapping[str, Any]) -> SplitInfo:
        """The split `name` as a written manifest holds it (`raw`: its entry)."""
        shards = [ShardInfo(**shard) for shard in raw["shards"]]
        counts = dict(raw["class_counts"])
        return cls(name, raw["num_records"], raw["num_bytes"], counts, shards, ObjectStats.of_split(raw))


HEADER = frozenset(("source", "settings", "labels", "label_offset", "features", "schema", "label_range", "task"))
MADE = HEADER | {
    "format",
    "version",
    "created_by",
    "splits",
    "conversions",
    "image_formats",
    "image_max_side",
    "image_short_sides",
    "num_skipped",
    "num_duplicates",
    "num_dropped_duplicates",
    "num_dropped_label_conflicts",
    "num_label_conflicts",
    "report",
}  # the fields `ManifestBuilder.build` makes; a continued manifest's others are carried over


@dataclass(frozen=True)
class ImageStats:
    """What the stored images are: records per stored format, the longest side, and records per
    shorter-side bucket (`manifest.side_bucket`; as strings, JSON's keys). None: not counted (a
    shard written before shardfeed counted it), and then the folder's total is not written."""

    formats: Mapping[str, int] = field(default_factory=dict)
    max_side: int | None = 0
    short_sides: Mapping[str, int] | None = field(default_factory=dict)

    def plus(self, other: ImageStats) -> ImageStats:
        """Both together (a statistic either side did not count stays uncounted)."""
        short = (
            None
            if self.short_sides is None or other.short_sides is None
            else _summed(self.short_sides, other.short_sides)
        )
        longest = None if self.max_side is None or other.max_side is None else max(self.max_side, other.max_side)
        return ImageStats(_summed(self.formats, other.formats), longest, short)

    def fields(self) -> dict[str, Any]:
        """The manifest's image_formats, image_max_side and image_short_sides (those counted)."""
        out: dict[str, Any] = {"image_formats": dict(sorted(self.formats.items()))}
        if self.max_side is not None:
            out["image_max_side"] = self.max_side
        if self.short_sides is not None:
            out["image_short_sides"] = dict(sorted(self.short_sides.items()))
        return out

    @classmethod
    def of_manifest(cls, data: Mapping[str, Any]) -> ImageStats:
        """The statistics a written manifest holds."""
        return cls(data.get("image_formats", {}), data.get("image_max_side"), data.get("image_short_sides"))


@dataclass(frozen=True)
class ShardFacts:
    """One shard as the manifest knows it: one shape for the shard writer's results
    (`shards.ShardResult.facts`) and the adopted shards' scans (`foreign_scan.ShardScan`)."""

    split: str
    info: ShardInfo
    class_counts: Mapping[str, int]
    images: ImageStats
    conversions: tuple[str, ...] = ()  # why each re-encoded image was ("cmyk, progressive": two reasons)
    objects: ObjectStats | None = None  # a detection shard's objects


@dataclass(frozen=True)
class Header:
    """What a manifest says of the folder as a whole, fixed before its shards are added.

    Attributes:
        source: what was converted ({kind, path (redacted), fingerprint, num_inputs}).
        settings: the write settings (what decides the bytes; not the worker count).
        labels: class names, index = id before label_offset; None for unlabeled data.
        label_offset: added to ids in the label feature.
        features: record keys -> type.
        schema: which features hold image, label and dimensions when they are not ours
            (`Schema.record_keys`; adopted folders, `--schema` presets); None: ours.
        label_range: the first and last stored class id, where read off the records (adopted
            folders); None: 0..K-1 plus the offset, as `convert` writes them.
        task: what the records hold beside the image (`tasks.TASKS`): 'classification' (a
            class id; not written, the default) or 'segmentation' (a mask of class ids, `labels`
            naming them).
    """

    source: Mapping[str, Any]
    settings: Mapping[str, Any]
    labels: list[str] | None
    label_offset: int
    features: Mapping[str, str]
    schema: Mapping[str, Any] | None = None
    label_range: tuple[int, int] | None = None
    task: str = DEFAULT_TASK

    @classmethod
    def of_manifest(cls, data: Mapping[str, Any]) -> Header:
        """The header a written manifest holds."""
        found = data.get("label_range")
        return cls(
            data["source"],
            data["settings"],
            data["labels"],
            int(data.get("label_offset", 0)),
            data.get("features", {}),
            data.get("schema"),
            (found[0], found[1]) if found else None,
            data.get("task", DEFAULT_TASK),
        )

    def fields(self) -> dict[str, Any]:
        """The manifest's fields for these facts."""
        out: dict[str, Any] = {
            "source": dict(self.source),
            "settings": dict(self.settings),
            "labels": self.labels,
            "label_offset": self.label_offset,
            "features": dict(sorted(self.features.items())),
        }
        if self.schema is not None:
            out["schema"] = dict(self.schema)
        if self.label_range is not None:
            out["label_range"] = list(self.label_range)
        if self.task != DEFAULT_TASK:  # left out: what a manifest without one holds
            out["task"] = self.task
        return out


@dataclass(frozen=True)
class Counts:
    """How many inputs did not become records as they were, for the manifest (report.json lists
    each one). The label-conflict and annotation counts are written only when not zero."""

    skipped: int = 0
    duplicates: int = 0
    dropped_duplicates: int = 0
    dropped_label_conflicts: int = 0
    label_conflicts: int = 0
    skipped_annotations: int = 0  # objects not written (report.json says which and why)
    clipped_boxes: int = 0  # boxes written clipped to their image

    @classmethod
    def of_manifest(cls, data: Mapping[str, Any]) -> Counts:
        """The counts a written manifest holds."""
        return cls(
            data.get("num_skipped", 0),
            data.get("num_duplicates", 0),
            data.get("num_dropped_duplicates", 0),
            data.get("num_dropped_label_conflicts", 0),
            data.get("num_label_conflicts", 0),
            data.get("num_skipped_annotations", 0),
            data.get("num_clipped_boxes", 0),
        )

    def fields(self) -> dict[str, int]:
        """The manifest's num_* fields."""
        out = {
            "num_skipped": self.skipped,
            "num_duplicates": self.duplicates,
            "num_dropped_duplicates": self.dropped_duplicates,
        }
        if self.dropped_label_conflicts:
            out["num_dropped_label_conflicts"] = self.dropped_label_conflicts
        if self.label_conflicts:
            out["num_label_conflicts"] = self.label_conflicts
        if self.skipped_annotations:
            out["num_skipped_annotations"] = self.skipped_annotations
        if self.clipped_boxes:
            out["num_clipped_boxes"] = self.clipped_boxes
        return out


@dataclass
class _SplitTotals:
    """One split's entry as shards are added."""

    num_records: int = 0
    num_bytes: int = 0
    class_counts: Counter[str] = field(default_factory=Counter)
    shards: list[ShardInfo] = field(default_factory=list)
    objects: ObjectStats | None = None

    def json(self) -> dict[str, Any]:
        return {
            "num_records": self.num_records,
            "num_bytes": self.num_bytes,
            "class_counts": dict(sorted(self.class_counts.items())),
            **(self.objects.fields() if self.objects is not None else {}),
            "shards": [dataclasses.asdict(s) for s in self.shards],
        }


class ManifestBuilder:
    """Collects a folder's shards (in the order they are listed) into manifest.json's object."""

    def __init__(self, header: Header) -> None:
        self.header = header
        self.splits: dict[str, _SplitTotals] = {}
        self.images = ImageStats()
        self.conversions: Counter[str] = Counter()
        self.carried: dict[str, Any] = {}  # fields of a continued manifest this builder does not make
        self.created_by = f"shardfeed {__version__}"  # a continued manifest keeps its first writer's

    @classmethod
    def continuing(cls, data: Mapping[str, Any], header: Header) -> ManifestBuilder:
        """A builder that starts from a written manifest's `data` (an append): its shards, image
        statistics and conversions stay; the fields not made here are carried over (`build`
        replaces those given to it)."""
        builder = cls(header)
        for name, split in data["splits"].items():
            totals = builder.splits.setdefault(name, _SplitTotals())
            totals.num_records, totals.num_bytes = split["num_records"], split["num_bytes"]
            totals.class_counts.update(split["class_counts"])
            totals.shards = [ShardInfo(**shard) for shard in split["shards"]]
            totals.objects = ObjectStats.of_split(split)
        builder.images = ImageStats.of_manifest(data)
        builder.conversions.update(data.get("conversions", {}))
        builder.carried = {k: v for k, v in data.items() if k not in MADE}
        builder.created_by = data.get("created_by", builder.created_by)
        return builder

    def add(self, shard: ShardFacts) -> None:
        """One more shard, after those of its split added before it."""
        totals = self.splits.setdefault(shard.split, _SplitTotals())
        totals.num_records += shard.info.num_records
        totals.num_bytes += shard.info.num_bytes
        totals.class_counts.update(shard.class_counts)
        totals.shards.append(shard.info)
        if shard.objects is not None:
            totals.objects = shard.objects if totals.objects is None else totals.objects.plus(shard.objects)
        self.images = self.images.plus(shard.images)
        for reason in shard.conversions:  # ", "-joined reasons count once each
            self.conversions.update(reason.split(", "))

    def build(self, counts: Counts, **sections: Any) -> dict[str, Any]:
        """manifest.json's object: the header, the splits, the statistics, the counts, and the
        `sections` given (e.g. `near_duplicates=`, `generations=`; None leaves one out)."""
        data: dict[str, Any] = {
            "format": FORMAT_NAME,
            "version": MANIFEST_VERSION,
            "created_by": self.created_by,
            **self.carried,
            **self.header.fields(),
            "splits": {name: totals.json() for name, totals in self.splits.items()},
            "conversions": dict(sorted(self.conversions.items())),
            **self.images.fields(),
            **counts.fields(),
            "report": layout.REPORT,
        }
        for name, value in sections.items():
            if value is None:
                data.pop(name, None)
            else:
                data[name] = value
        return data


def _summed(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    """Counts of both."""
    return {k: a.get(k, 0) + b.get(k, 0) for k in sorted({*a, *b})}
