"""Which shard files a reader reads, how many records each holds, and the schema to parse them with.

Our own shards come with a manifest (read once: a `Manifest` can be passed instead of its
folder); other people's TFRecords are found and counted by read/foreign.py, and their schema is
read off their first record.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from shardfeed.errors import SourceError
from shardfeed.format import fileio, layout, manifest, tfrecord
from shardfeed.format.example_proto import parse_example
from shardfeed.format.schema import Schema, foreign_schema
from shardfeed.read import foreign
from shardfeed.read.order import WorkerShare

# a converted folder (or its manifest), other people's TFRecords, or a `read.mixture.Mixture` of folders
DataPath = str | Sequence[str] | manifest.Manifest | Any


@dataclass(frozen=True)
class ShardSet:
    """Files to read, their record counts, how they are compressed, and (for a converted folder)
    their sizes in bytes as written."""

    files: list[str]
    counts: list[int]
    compression: str | None
    manifest: manifest.Manifest | None = None
    sizes: list[int] | None = None
    label_range: tuple[int, int] | None = None  # foreign files: the lowest and highest stored label
    sha256s: list[str] | None = None  # a converted folder's, from its manifest
    split: str | None = None  # a converted folder's split these shards are (for log lines)

    @property
    def in_bucket(self) -> bool:
        """The shards live where TensorFlow cannot read them (s3://, gs://, ...): read through the cache."""
        return any(fileio.is_bucket(f) for f in self.files)

    @property
    def num_records(self) -> int:
        return sum(self.counts)

    def check_files(self) -> None:
        """Every local shard file exists and, in a converted folder, has the size it was written
        with (a missing one would otherwise only fail when its turn comes, possibly hours into
        training; a changed one would be read as far as it goes). One stat per shard; remote
        files are not checked: a request each.

        Raises:
            SourceError: naming the missing or changed files, and what to run.
        """
        missing, changed = [], []
        for i, file in enumerate(self.files):
            if fileio.is_remote(file):
                continue
            try:
                info = os.stat(file)
            except FileNotFoundError:
                missing.append(file)
                continue
            size = info.st_size
            if not stat.S_ISREG(info.st_mode):  # a FIFO would block the reader forever, a device never end
                changed.append(f"{file} is {fileio.special_kind(file)}")
            elif self.sizes is not None and size != self.sizes[i]:
                changed.append(f"{file} is {size:,} bytes, the manifest says {self.sizes[i]:,}")
        rewrite = self.manifest.rewrite_hint() if self.manifest is not None else "convert again (--overwrite)"
        fix = (
            f"the folder was changed after it was written: run `shardfeed verify`, then {rewrite}, "
            "or read the rest with ReadOptions(skip_corrupt=True)"
        )
        if missing:
            shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            raise SourceError(f"{len(missing)} of {len(self.files)} shard files are missing: {shown}; {fix}")
        if changed:
            more = f" ({len(changed) - 1} more differ)" if len(changed) > 1 else ""
            raise SourceError(f"shard {changed[0]}{more}; {fix}")

    def for_worker(self, share: WorkerShare) -> ShardSet:
        """The whole shards worker `share.index` of `share.count` reads (round robin).

        Raises:
            OptionError: fewer shards than workers.
        """
        picked = share.shard_numbers(len(self.files))
        return ShardSet(
            [self.files[i] for i in picked],
            [self.counts[i] for i in picked],
            self.compression,
            self.manifest,
            None if self.sizes is None else [self.sizes[i] for i in picked],
            sha256s=None if self.sha256s is None else [self.sha256s[i] for i in picked],
            split=self.split,
        )


def is_converted_folder(path: DataPath) -> TypeGuard[str | manifest.Manifest]:
    """A shardfeed conversion (a folder with manifest.json, or its manifest already read)."""
    if isinstance(path, manifest.Manifest):
        return True
    return isinstance(path, str) and fileio.exists(fileio.join(path, layout.MANIFEST))


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
        keys = m.keys
        images = m.image_stats
        return shards, dataclasses.replace(
            keys,
            label_key=keys.label_key if m.labels is not None else None,
            label_offset=m.label_offset,
            all_jpeg=set(images.formats) == {"JPEG"},
            max_side=images.max_side,
            short_sides=_short_sides(images.short_sides),
        )
    assert not isinstance(path, manifest.Manifest)  # narrows the type: is_converted_folder said so
    files, compression = _split_files(path, compression, split)
    first, record = next(
        ((f, r) for f in files for r in tfrecord.read_records(f, compression=compression)), (None, None)
    )
    if first is None or record is None:
        raise SourceError(f"the TFRecord files {files[:3]} hold no records")
    schema = foreign_schema(parse_example(record), first, image_key, label_key)
    counts = [foreign.count_records(f, compression, schema.label_key) for f in files]
    ranges = [c.labels for c in counts if c.labels is not None]
    label_range = (min(r[0] for r in ranges), max(r[1] for r in ranges)) if ranges else None
    return ShardSet(files, [c.records for c in counts], compression, label_range=label_range), schema


def _short_sides(counts: Mapping[str, int] | None) -> tuple[tuple[int, int], ...] | None:
    """The manifest's {side bucket: images} as sorted pairs (None for an older manifest)."""
    if counts is None:
        return None
    return tuple(sorted((int(bucket), int(n)) for bucket, n in counts.items()))


def from_manifest(path: str | manifest.Manifest, split: str) -> ShardSet:
    """The shards of one split of a shardfeed conversion (its folder, or its manifest)."""
    m = manifest.opened(path)
    info = m.split(split)
    counts, sizes = [s.num_records for s in info.shards], [s.num_bytes for s in info.shards]
    sha256s = [s.sha256 for s in info.shards]
    return ShardSet(m.shard_paths(split), counts, m.compression, m, sizes, sha256s=sha256s, split=split)


def from_files(path: str | Sequence[str], *, compression: str | None = None, split: str | None = None) -> ShardSet:
    """Foreign TFRecord files from a path, glob or list, counted once (read/foreign.py); for a
    folder whose file names carry splits, only `split`'s files (`foreign.files_of_split`).

    Raises:
        SourceError: nothing matches; the folder's splits cannot be told apart or lack `split`.
        CorruptRecordError: a file is corrupt (named, with the record).
    """
    files, compression = _split_files(path, compression, split)
    return ShardSet(files, [foreign.count_records(f, compression).records for f in files], compression)


def _split_files(path: str | Sequence[str], compression: str | None, split: str | None) -> tuple[list[str], str | None]:
    """The files of `split` (all of them for a glob or list) and their compression."""
    files, compression = foreign.find_files(path, compression=compression)
    if split is not None and isinstance(path, str) and os.path.isdir(path):
        files = foreign.files_of_split(path, files, split)
    return files, compression
