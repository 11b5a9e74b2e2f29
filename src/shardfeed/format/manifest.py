"""manifest.json and labels.txt: what a finished conversion holds, read by every reader.

manifest.json is versioned and written last (a folder without it is unfinished) by one builder,
format/manifest_builder.py; `read` is its one reader, which refuses a manifest that contradicts
itself or names anything outside its folder. Every field: docs/reference/manifest.md (checked
against what convert, append and adopt write by tests/test_manifest_builder.py).
labels.txt: one `id:name` line per class, ids including label_offset.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from shardfeed.errors import ManifestError
from shardfeed.format import confinement, fileio, layout
from shardfeed.format.manifest_builder import (
    ADOPTED,
    FORMAT_NAME,
    MANIFEST_VERSION,
    Counts,
    Header,
    ImageStats,
    SplitInfo,
)
from shardfeed.format.schema import Schema
from shardfeed.format.tasks import task_of

# Names a held-out split goes by, in order of preference (.npz sources give train/test).
HELD_OUT_SPLITS = ("validation", "val", "valid", "test", "eval", "dev")


@dataclass(frozen=True)
class Manifest:
    """A parsed manifest.json; `path` is the folder it describes."""

    path: str
    data: dict[str, Any]

    @property
    def labels(self) -> list[str] | None:
        return self.data["labels"]

    @property
    def header(self) -> Header:
        """What the manifest says of the folder as a whole (source, settings, labels, features...)."""
        return Header.of_manifest(self.data)

    @property
    def source(self) -> dict[str, Any]:
        """What was converted: {kind, path (redacted), fingerprint, num_inputs}."""
        return dict(self.data["source"])

    @property
    def settings(self) -> dict[str, Any]:
        """The write settings (an adopted folder's: compression, name template, adopt options)."""
        return dict(self.data["settings"])

    @property
    def features(self) -> dict[str, str]:
        """Record keys -> feature type."""
        return dict(self.data.get("features") or {})

    @property
    def image_stats(self) -> ImageStats:
        """Stored formats, the longest side, shorter sides by size class (None: not counted)."""
        return ImageStats.of_manifest(self.data)

    @property
    def counts(self) -> Counts:
        """Skipped inputs, duplicate groups, dropped copies, label conflicts."""
        return Counts.of_manifest(self.data)

    @property
    def conversions(self) -> dict[str, int]:
        """Reason -> images re-encoded because TensorFlow could not use them as they were."""
        return dict(self.data.get("conversions") or {})

    @property
    def near_duplicates(self) -> dict[str, Any] | None:
        """The near-duplicate search's hash, radius and counts; None when it did not run."""
        return self.data.get("near_duplicates")

    @property
    def generations(self) -> list[dict[str, Any]] | None:
        """The folder's history once appended to (oldest first); None before."""
        return self.data.get("generations")

    @property
    def created_by(self) -> str:
        return str(self.data.get("created_by", "?"))

    @property
    def label_offset(self) -> int:
        return int(self.data.get("label_offset", 0))

    @property
    def adopted(self) -> bool:
        """The records were written by another program (`shardfeed adopt`), not by `convert`."""
        return self.data["source"].get("kind") == ADOPTED

    def stored_label_range(self) -> tuple[int, int] | None:
        """The first and last class ids the records store (adopt counts them; `convert` writes
        0..K-1 plus its label offset); None for unlabeled data."""
        return label_range(self.data)

    def rewrite_hint(self) -> str:
        """What writes this folder's manifest again after its shards changed."""
        if self.adopted:
            return f"`shardfeed adopt {self.path}` again"
        return "convert again (--overwrite)"

    @property
    def keys(self) -> Schema:
        """Which record features hold the image and label: ours, or (an adopted folder, a
        `--schema` preset) those the manifest's `schema` entry names."""
        return Schema.of_manifest(self.data.get("schema"))

    @property
    def compression(self) -> str | None:
        return self.data["settings"].get("compression")

    @property
    def split_names(self) -> list[str]:
        return list(self.data["splits"])

    def split(self, name: str) -> SplitInfo:
        """One split's shards and counts.

        Raises:
            ManifestError: the split does not exist (the message lists those that do).
        """
        if name not in self.data["splits"]:
            raise ManifestError(f"split {name!r} not in {self.path}; it has {self.split_names}")
        return SplitInfo.of_manifest(name, self.data["splits"][name])

    def main_split(self) -> str:
        """The split to show by default: train, else the held-out one, else the first."""
        return self.held_out_split(("train",)) or self.split_names[0]

    def held_out_split(self, order: tuple[str, ...] = HELD_OUT_SPLITS) -> str | None:
        """The first of `order` that exists (the split to validate or evaluate on), or None."""
        return next((name for name in order if name in self.data["splits"]), None)

    def shard_paths(self, split: str) -> list[str]:
        return [fileio.join(self.path, shard.file) for shard in self.split(split).shards]


def label_range(data: dict[str, Any]) -> tuple[int, int] | None:
    """`Manifest.stored_label_range` of a manifest's data (for writers holding the dict)."""
    if data.get("labels") is None:
        return None
    if data.get("label_range"):
        return data["label_range"][0], data["label_range"][1]
    offset = int(data.get("label_offset", 0))
    return offset, offset + len(data["labels"]) - 1


def side_bucket(side: int) -> int:
    """The size class of an image side for `image_short_sides`: the largest 2^k or 1.5 * 2^k
    that is at most `side` (0 for 0). Half-octave classes: a lower bound off by at most a third."""
    if side < 2:
        return max(side, 0)
    power = 1 << (side.bit_length() - 1)
    return power + power // 2 if side >= power + power // 2 else power


def dumps(data: dict[str, Any]) -> str:
    """Canonical JSON text (sorted keys, fixed indent) so equal manifests are equal bytes."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write(output_dir: str, data: dict[str, Any]) -> None:
    fileio.write_text_atomic(fileio.join(output_dir, layout.MANIFEST), dumps(data))


def write_labels(output_dir: str, labels: list[str] | None, label_offset: int) -> None:
    """labels.txt, `id:name` per line (nothing for unlabeled data)."""
    if labels is None:
        return
    text = "".join(f"{i + label_offset}:{name}\n" for i, name in enumerate(labels))
    fileio.write_text_atomic(fileio.join(output_dir, layout.LABELS), text)


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff")


def not_converted(folder: str) -> ManifestError:
    """The error for a folder without a manifest, saying what it is and what to run.

    One rule for every reader (info, verify, show, load, train, bench): a folder of images is
    told how to convert, an unfinished conversion how to finish, anything else what is missing.
    """
    if fileio.exists(fileio.join(folder, layout.WORK_DIR)):
        return ManifestError(
            f"{folder!r} holds an unfinished conversion (no {layout.MANIFEST} yet): re-run the same "
            "`shardfeed convert` command to finish it"
        )
    if not fileio.exists(folder):
        return ManifestError(f"{folder!r} does not exist; pass a folder written by `shardfeed convert`")
    if holds_records(folder):
        return ManifestError(
            f"{folder!r} holds TFRecords another program wrote (no {layout.MANIFEST}): `load` reads them as they are; "
            f"for every other command run `shardfeed adopt {folder}` first (with --image-key/--label-key/"
            "--label-offset when they differ from ImageNet's keys and 0-based labels)"
        )
    if holds_images(folder):
        return ManifestError(
            f"{folder!r} is a folder of images, not a converted folder (no {layout.MANIFEST}): convert it first, "
            f"e.g. `shardfeed convert {folder} OUT`, then use OUT"
        )
    return ManifestError(
        f"no {layout.MANIFEST} in {folder!r}: it is not a converted folder; "
        f"run `shardfeed convert SOURCE {folder}` first"
    )


def holds_records(folder: str, limit: int = 200) -> bool:
    """Whether the first `limit` entries of `folder` include a TFRecord file (its first 12 bytes
    are a record header whose length checksum holds)."""
    from shardfeed.format import tfrecord

    if not fileio.isdir(folder) or fileio.is_remote(folder):
        return False
    for name in sorted(fileio.listdir(folder))[:limit]:
        path = fileio.join(folder, name)
        if name.startswith(".") or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            if tfrecord.is_record_header(f.read(12)):
                return True
    return False


def holds_images(folder: str, limit: int = 200) -> bool:
    """Whether image files sit in `folder` or its immediate subfolders (the first `limit` names)."""
    if not fileio.isdir(folder):
        return False
    names = sorted(fileio.listdir(folder))[:limit]
    if _has_image(names):
        return True
    subfolders = [fileio.join(folder, n) for n in names if not n.startswith(".")]
    return any(fileio.isdir(sub) and _has_image(sorted(fileio.listdir(sub))[:limit]) for sub in subfolders)


def _has_image(names: list[str]) -> bool:
    return any(n.lower().endswith(IMAGE_SUFFIXES) for n in names)


REQUIRED = ("source", "settings", "labels", "splits")
MAX_MANIFEST_DEPTH = 32  # JSON nesting: a manifest's deepest value is 5 levels down
MAX_MANIFEST_BYTES = 512 * 2**20  # a manifest of a million shards is ~300 MB; anything larger is not one
SHARD_FIELDS = frozenset(("file", "index_file", "num_records", "num_bytes", "sha256"))
COUNTS = ("num_records", "num_bytes")
FIX = (
    "run `shardfeed verify {folder}` to see every problem; `shardfeed convert SOURCE {folder} --overwrite` "
    "writes it again"
)


def inconsistencies(data: dict[str, Any]) -> list[str]:
    """Where a manifest contradicts itself (an edited or damaged manifest.json): missing fields,
    and split totals that are not the sums of their shards' counts and bytes or of their class
    counts. Checked from the manifest alone, so every reader can afford it."""
    return structure_problems(data) or total_problems(data)


def structure_problems(data: dict[str, Any]) -> list[str]:
    """Fields a reader needs that are missing or of the wrong type (the manifest cannot be used
    at all)."""
    missing = [f"field {key!r} is missing" for key in REQUIRED if key not in data]
    if missing:
        return missing
    if not isinstance(data["splits"], dict):
        return [f"'splits' is a JSON {type(data['splits']).__name__}, not an object of splits"]
    problems = []
    for name, split in data["splits"].items():
        shards = split.get("shards") if isinstance(split, dict) else None
        if not isinstance(shards, list):
            problems.append(f"splits.{name} has no shard list")
            continue
        broken = [i for i, shard in enumerate(shards) if not isinstance(shard, dict) or not set(shard) >= SHARD_FIELDS]
        if broken:
            problems.append(f"splits.{name}: shard entries {broken} lack some of {sorted(SHARD_FIELDS)}")
            continue
        counts = [(i, key) for i, shard in enumerate(shards) for key in COUNTS if not _is_count(shard[key])]
        counts += [(-1, key) for key in COUNTS if key in split and not _is_count(split[key])]
        problems += [f"splits.{name}{_at(i)}.{key} is not a whole number" for i, key in counts]
        classes = split.get("class_counts") or {}
        if not isinstance(classes, dict) or not all(_is_count(n) for n in classes.values()):
            problems.append(f"splits.{name}.class_counts is not an object of whole numbers")
    return problems


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _at(index: int) -> str:
    return "" if index < 0 else f".shards[{index}]"


def entry_problems(data: dict[str, Any]) -> list[str]:
    """Names in a manifest that could reach outside its folder (it may come from someone else:
    a downloaded dataset, a shared bucket): split names that are not plain names, shard and
    index entries that are absolute, URLs or climb out with '..' (`confinement`), class names
    with control characters (a terminal runs the escape sequences `info` would print). Readers
    refuse such a manifest before they open anything it names."""
    labels = data["labels"] if isinstance(data["labels"], list) else []
    problems = [r for r in (confinement.text_refusal(str(n)) for n in labels) if r]  # escapes reach terminals
    for name, split in data["splits"].items():
        refusal = confinement.split_refusal(name)
        if refusal:
            problems.append(refusal)
            continue
        for i, shard in enumerate(split["shards"]):
            for key in ("file", "index_file"):
                refusal = confinement.entry_refusal(shard[key])
                if refusal:
                    problems.append(f"splits.{name}.shards[{i}].{key}: {refusal}")
    return problems


def total_problems(data: dict[str, Any]) -> list[str]:
    """Split totals that disagree with their shards' counts and bytes or with their class counts."""
    problems = []
    for name, split in data["splits"].items():
        for field_name in ("num_records", "num_bytes"):
            total = sum(int(shard[field_name]) for shard in split["shards"])
            if split.get(field_name) != total:
                given = split.get(field_name)
                problems.append(f"splits.{name}.{field_name} is {given} but its shards' {field_name} add up to {total}")
        classes = split.get("class_counts") or {}
        one_each = task_of(data.get("task")).one_label  # an image of the other tasks shows several classes
        if data["labels"] is not None and one_each and classes and sum(classes.values()) != split.get("num_records"):
            problems.append(
                f"splits.{name}.class_counts add up to {sum(classes.values())} but splits.{name}.num_records is "
                f"{split.get('num_records')}"
            )
    return problems


def read(path: str, *, check: bool = True) -> Manifest:
    """Reads the manifest of a converted folder (or of the manifest file itself).

    Args:
        check: refuse a manifest that contradicts itself (`inconsistencies`); `verify` passes
            False to report every problem instead.

    Raises:
        ManifestError: missing, unfinished, not a regular file, not ours, written by an unknown
            format version, naming a split or file outside its folder (always: it may come from
            someone else), or (with `check`) inconsistent: the first problem, with the fix.
    """
    folder = path[: -len(layout.MANIFEST) - 1] if path.endswith(layout.MANIFEST) else path
    file = fileio.join(folder, layout.MANIFEST)
    if not fileio.exists(file):
        raise not_converted(folder)
    try:
        data = json.loads(fileio.read_regular(file, MAX_MANIFEST_BYTES, "a manifest of a million shards takes"))
    except fileio.UnusableFileError as e:
        raise ManifestError(f"{file} cannot be read as a manifest: {e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ManifestError(
            f"{file} is not valid JSON ({e}): it was damaged or edited; `shardfeed convert SOURCE {folder} "
            "--overwrite` writes it again"
        ) from None
    if confinement.too_deep(data, MAX_MANIFEST_DEPTH):  # before anything walks it: a RecursionError in every reader
        raise ManifestError(
            f"{file} is not a shardfeed manifest: its JSON nests deeper than {MAX_MANIFEST_DEPTH} levels"
        )
    if not isinstance(data, dict):
        raise ManifestError(f"{file} is not a shardfeed manifest (a JSON {type(data).__name__}, not an object)")
    if data.get("format") != FORMAT_NAME:
        raise ManifestError(f"{file} is not a shardfeed manifest (format={data.get('format')!r})")
    if data.get("version") != MANIFEST_VERSION:
        raise ManifestError(
            f"{file} has manifest version {data.get('version')!r}; this shardfeed reads version "
            f"{MANIFEST_VERSION}. Upgrade shardfeed, or convert the data again."
        )
    unusable = structure_problems(data)
    unsafe = [] if unusable else entry_problems(data)
    if unsafe:
        more = f" (and {len(unsafe) - 1} more)" if len(unsafe) > 1 else ""
        raise ManifestError(
            f"{file} names something outside its folder or unprintable, refused: {unsafe[0]}{more}; a converted "
            "folder's manifest lists plain names inside the folder (convert the source again if it was edited)"
        )
    problems = (unusable or total_problems(data)) if check else []
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ManifestError(f"{file} is inconsistent: {problems[0]}{more}; {FIX.format(folder=folder)}")
    return Manifest(folder, data)


def opened(source: str | Manifest) -> Manifest:
    """The manifest of a converted folder, or `source` itself when it is one already read (so a
    caller holding the manifest never makes a reader read it again)."""
    return source if isinstance(source, Manifest) else read(source)
