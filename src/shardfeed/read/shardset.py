"""Which shard files a reader reads, how many records each holds, and the schema to parse them with.

Our own shards come with a manifest (read once: a `Manifest` can be passed instead of its
folder); other people's TFRecords are found and counted by read/foreign.py, and their schema is
read off their first record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard

from shardfeed.errors import SourceError
from shardfeed.format import fileio, manifest, tfrecord
from shardfeed.format.example_proto import parse_example
from shardfeed.format.schema import Schema, foreign_schema
from shardfeed.read import foreign
from shardfeed.read.order import WorkerShare

DataPath = str | Sequence[str] | manifest.Manifest  # a converted folder (or its manifest), or TFRecords


@dataclass(frozen=True)
class ShardSet:
    """Files to read, their record counts, and how they are compressed."""

    files: list[str]
    counts: list[int]
    compression: str | None
    manifest: manifest.Manifest | None = None

    @property
    def num_records(self) -> int:
        return sum(self.counts)

    def for_worker(self, share: WorkerShare) -> ShardSet:
        """The whole shards worker `share.index` of `share.count` reads (round robin).

        Raises:
            OptionError: fewer shards than workers.
        """
        picked = share.shard_numbers(len(self.files))
        return ShardSet(
            [self.files[i] for i in picked], [self.counts[i] for i in picked], self.compression, self.manifest
        )


def is_converted_folder(path: DataPath) -> TypeGuard[str | manifest.Manifest]:
    """A shardfeed conversion (a folder with manifest.json, or its manifest already read)."""
    if isinstance(path, manifest.Manifest):
        return True
    return isinstance(path, str) and fileio.exists(fileio.join(path, manifest.MANIFEST_NAME))


def open_split(
    path: DataPath,
    split: str,
    *,
    image_key: str | None = None,
    label_key: str | None = None,
    compression: str | None = None,
) -> tuple[ShardSet, Schema]:
    """The shards of `split` and the schema to parse them with: our manifest's, or foreign files'
    with the schema read off their first record (`image_key`, `label_key`, `compression` apply
    to foreign files only).

    Raises:
        ManifestError: no such split (the message lists those there are).
        SourceError: foreign files that match nothing or hold no records.
    """
    if is_converted_folder(path):
        m = manifest.opened(path)
        shards = from_manifest(m, split)
        default = Schema()
        formats = m.data.get("image_formats") or {}
        return shards, Schema(
            label_key=default.label_key if m.labels is not None else None,
            label_offset=m.label_offset,
            all_jpeg=set(formats) == {"JPEG"},
            max_side=m.data.get("image_max_side"),
            short_sides=_short_sides(m.data.get("image_short_sides")),
        )
    assert not isinstance(path, manifest.Manifest)  # narrows the type: is_converted_folder said so
    shards = from_files(path, compression=compression)
    first = next((f for f, n in zip(shards.files, shards.counts, strict=True) if n), None)
    if first is None:
        raise SourceError(f"the TFRecord files {shards.files[:3]} hold no records")
    record = parse_example(next(iter(tfrecord.read_records(first, compression=shards.compression))))
    return shards, foreign_schema(record, first, image_key, label_key)


def _short_sides(counts: dict[str, int] | None) -> tuple[tuple[int, int], ...] | None:
    """The manifest's {side bucket: images} as sorted pairs (None for an older manifest)."""
    if counts is None:
        return None
    return tuple(sorted((int(bucket), int(n)) for bucket, n in counts.items()))


def from_manifest(path: str | manifest.Manifest, split: str) -> ShardSet:
    """The shards of one split of a shardfeed conversion (its folder, or its manifest)."""
    m = manifest.opened(path)
    info = m.split(split)
    return ShardSet(m.shard_paths(split), [s.num_records for s in info.shards], m.compression, m)


def from_files(path: str | Sequence[str], *, compression: str | None = None) -> ShardSet:
    """Foreign TFRecord files from a path, glob or list, counted once (read/foreign.py).

    Raises:
        SourceError: nothing matches.
        CorruptRecordError: a file is corrupt (named, with the record).
    """
    files, compression = foreign.find_files(path, compression=compression)
    return ShardSet(files, [foreign.count_records(f, compression) for f in files], compression)
