"""Other people's TFRecords: which files a path, glob or list names, and how many records each holds.

Files are counted once and the counts kept in a small sidecar file next to them
(`.shardfeed-counts.json`), re-counted only when a file's size or modification time changes.
"""

from __future__ import annotations

import contextlib
import glob as globlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shardfeed.errors import CorruptRecordError, SourceError
from shardfeed.format import fileio, layout, manifest, storage, tfrecord
from shardfeed.format.example_proto import single_int64

# files beside TFRecords that are not records (.pbtxt: the OD API's label_map.pbtxt)
NOT_RECORDS = (layout.INDEX_SUFFIX, ".json", ".txt", ".pbtxt", layout.INCOMPLETE)


def find_files(path: str | Sequence[str], *, compression: str | None = None) -> tuple[list[str], str | None]:
    """The TFRecord files a path, glob or list names, and their compression ('gzip' when every
    file ends in .gz and none was given).

    Raises:
        SourceError: nothing matches, or the path names images or an unconverted/unfinished folder.
    """
    patterns = [path] if isinstance(path, str) else list(path)
    files: list[str] = []
    for pattern in patterns:
        if fileio.is_remote(pattern):
            files.extend(fileio.glob(pattern))
        elif os.path.isdir(pattern):
            if fileio.exists(fileio.join(pattern, layout.WORK_DIR)):
                raise manifest.not_converted(pattern)
            # Only regular files that are not images or known side files: a folder of shards
            # often sits beside its image tree and labels.txt (TF-slim's layout).
            candidates = [
                os.path.join(pattern, n)
                for n in sorted(os.listdir(pattern))
                if not n.startswith(".")
                and not n.endswith(NOT_RECORDS)
                and not n.lower().endswith(manifest.IMAGE_SUFFIXES)
                and os.path.isfile(os.path.join(pattern, n))
            ]
            if not candidates and manifest.holds_images(pattern):
                raise manifest.not_converted(pattern)
            files.extend(candidates)
        else:
            files.extend(sorted(globlib.glob(pattern)) or ([pattern] if os.path.isfile(pattern) else []))
    files = [f for f in files if not f.endswith(NOT_RECORDS)]
    if not files:
        if isinstance(path, str) and os.path.isdir(path):
            raise manifest.not_converted(path)
        raise SourceError(_nothing_there(path))
    if all(f.lower().endswith(manifest.IMAGE_SUFFIXES) for f in files):
        raise SourceError(f"{path!r} names image files, not TFRecords: convert them first (`shardfeed convert`)")
    if compression is None and all(f.endswith(".gz") for f in files):
        compression = "gzip"
    return files, compression


SPLIT_WORDS = ("train", *manifest.HELD_OUT_SPLITS)
# Splits as other writers put them in shard names: `train-00000-of-00002` (Inception's
# build_image_data), `flowers_validation_00001-of-00005.tfrecord` (TF-slim),
# `mnist-test.tfrecord-00000-of-00001` (TFDS): the split is a whole word between separators.
_WORD = re.compile(r"[A-Za-z]+")


def split_in_name(file: str) -> str | None:
    """The one split word a shard file's name carries, or None (none, or two different ones)."""
    words = {w for w in _WORD.findall(os.path.basename(file).lower()) if w in SPLIT_WORDS}
    return words.pop() if len(words) == 1 else None


def splits_of_files(folder: str, files: list[str], pattern: str | None = None) -> dict[str, str | None]:
    """{file: the split its name carries}: by `pattern` (a regex searched in the file name; its
    group named `split`, else its first group, else the whole match), or by `split_in_name`.
    None for every file when no name carries a split (one unsplit set).

    Raises:
        SourceError: some names carry a split and others do not (it lists what was seen), or
            `pattern` is not a valid regular expression.
    """
    if pattern is None:
        by_file = {f: split_in_name(f) for f in files}
    else:
        try:
            regex = re.compile(pattern)
        except re.error as e:
            raise SourceError(f"--split-pattern {pattern!r} is not a regular expression: {e}") from None
        by_file = {f: _matched_split(regex, os.path.basename(f)) for f in files}
    named = {s for s in by_file.values() if s is not None}
    unnamed = [os.path.basename(f) for f, s in by_file.items() if s is None]
    if named and unnamed:
        rule = f"the pattern {pattern!r}" if pattern else "their names"
        raise SourceError(
            f"cannot tell the splits of the TFRecords in {folder!r} apart: by {rule}, some files carry a split "
            f"({sorted(named)}) and others do not ({unnamed[:5]}); pass the files of one split as a glob or "
            "list, e.g. load('FOLDER/validation-*'), or give a split pattern (adopt --split-pattern)"
        )
    return by_file


def _matched_split(regex: re.Pattern[str], name: str) -> str | None:
    match = regex.search(name)
    if match is None:
        return None
    if "split" in regex.groupindex:
        return match.group("split")
    return match.group(1) if regex.groups else match.group(0)


def files_of_split(folder: str, files: list[str], split: str) -> list[str]:
    """The files of `folder` that hold `split`, told by their names.

    A folder whose file names all carry a split is read per split: reading them all (as before)
    trained on validation data silently. Names that carry no split at all are one unsplit set,
    read whole whatever `split` says. A mix cannot be told apart safely and is refused.

    Raises:
        SourceError: `split` is not among the splits the names carry, or some names carry a
            split and others do not (the message lists what was seen).
    """
    by_file = splits_of_files(folder, files)
    named = {s for s in by_file.values() if s is not None}
    if not named:
        return files
    if split not in named:
        raise SourceError(
            f"no {split!r} split in {folder!r}: its file names carry the splits {sorted(named)}; pass one of those"
        )
    return [f for f, s in by_file.items() if s == split]


@dataclass(frozen=True)
class FileCount:
    """A file's record count and, when a label feature was named, its lowest and highest label."""

    records: int
    labels: tuple[int, int] | None = None


def count_records(path: str, compression: str | None, label_key: str | None = None) -> FileCount:
    """Records in a file (and the range of `label_key`'s values), from the sidecar when the file
    has not changed since it was counted. The labels come from the same pass (about 5 us a record
    more than counting alone), so a 1-based set can be told without a second read.

    Raises:
        CorruptRecordError: the file is corrupt (named, with the record).
    """
    sidecar = fileio.join(os.path.dirname(path) or ".", layout.FOREIGN_COUNTS)
    stat = os.stat(path) if not fileio.is_remote(path) else None
    stamp = [fileio.size(path), stat.st_mtime_ns if stat else 0]
    cache: dict[str, Any] = {}
    if fileio.exists(sidecar):
        try:
            cache = json.loads(fileio.read_bytes(sidecar))
        except (ValueError, OSError):
            cache = {}
    name = os.path.basename(path)
    entry = cache.get(name)
    if entry and entry["stamp"] == stamp and (not label_key or label_key in entry.get("labels", {})):
        known = entry.get("labels", {}).get(label_key) if label_key else None
        return FileCount(int(entry["records"]), (known[0], known[1]) if known else None)
    count, low, high = 0, None, None
    for data in tfrecord.read_records(path, compression=compression):
        count += 1
        if label_key:
            label = _label_of(data, label_key)
            if label is not None:
                low = label if low is None else min(low, label)
                high = label if high is None else max(high, label)
    labels = (low, high) if low is not None and high is not None else None
    kept = entry.get("labels", {}) if entry and entry["stamp"] == stamp else {}
    if label_key:
        kept = {**kept, label_key: list(labels) if labels else None}
    cache[name] = {"stamp": stamp, "records": count, "labels": kept}
    with contextlib.suppress(OSError):  # a read-only data folder: count again next time
        fileio.write_text_atomic(sidecar, json.dumps(cache, sort_keys=True, indent=1))
    return FileCount(count, labels)


def _label_of(data: bytes, key: str) -> int | None:
    """One record's int64 `key` value, or None (absent, another type, unparsable)."""
    try:
        return single_int64(data, key)
    except CorruptRecordError:  # a bad record: counting is not the place to say so (the reader names it)
        return None


def one_based_warning(files: list[str], labels: tuple[int, int]) -> str:
    """The warning for foreign labels read without an offset whose lowest is above 0."""
    shown = ", ".join(os.path.basename(f) for f in files[:3]) + (" ..." if len(files) > 3 else "")
    return (
        f"labels in {shown} run {labels[0]}..{labels[1]} and none is 0: if they are 1-based (Inception's "
        "build_image_data.py, keras_imagenet), read them with ForeignKeys(label_offset=1) (--label-offset 1); "
        "pass label_offset=0 to say they are not"
    )


def _nothing_there(path: object) -> str:
    """Why nothing matched `path`: for a bucket URL, whether the bucket or the folder is missing
    (both said 'no TFRecord files match')."""
    if isinstance(path, str) and storage.is_url(path) and not any(c in path for c in "*?["):
        bucket = path.split("://", 1)[0] + "://" + path.split("://", 1)[1].split("/", 1)[0]
        try:
            if not fileio.exists(bucket):
                shown = storage.redact(bucket)
                return f"{storage.redact(path)}: the bucket {shown} does not exist (or these credentials cannot see it)"
            if not fileio.exists(path):
                return f"{storage.redact(path)} does not exist; pass a folder written by `shardfeed convert`"
        except OSError:
            pass
    return f"no TFRecord files match {path!r}"
