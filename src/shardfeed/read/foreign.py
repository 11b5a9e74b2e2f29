"""Other people's TFRecords: which files a path, glob or list names, and how many records each holds.

Files are counted once and the counts kept in a small sidecar file next to them
(`.shardfeed-counts.json`), re-counted only when a file's size or modification time changes.
"""

from __future__ import annotations

import contextlib
import glob as globlib
import json
import os
from collections.abc import Sequence
from typing import Any

from shardfeed.errors import SourceError
from shardfeed.format import fileio, manifest, tfrecord
from shardfeed.lazy import tensorflow

COUNTS_SIDECAR = ".shardfeed-counts.json"
NOT_RECORDS = (".idx", ".json", ".txt", ".incomplete")  # files beside TFRecords that are not records


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
            files.extend(sorted(tensorflow().io.gfile.glob(pattern)))
        elif os.path.isdir(pattern):
            if fileio.exists(fileio.join(pattern, manifest.WORK_DIR)) or manifest.holds_images(pattern):
                raise manifest.not_converted(pattern)
            files.extend(os.path.join(pattern, n) for n in sorted(os.listdir(pattern)) if not n.startswith("."))
        else:
            files.extend(sorted(globlib.glob(pattern)) or ([pattern] if os.path.isfile(pattern) else []))
    files = [f for f in files if not f.endswith(NOT_RECORDS)]
    if not files:
        if isinstance(path, str) and os.path.isdir(path):
            raise manifest.not_converted(path)
        raise SourceError(f"no TFRecord files match {path!r}")
    if all(f.lower().endswith(manifest.IMAGE_SUFFIXES) for f in files):
        raise SourceError(f"{path!r} names image files, not TFRecords: convert them first (`shardfeed convert`)")
    if compression is None and all(f.endswith(".gz") for f in files):
        compression = "gzip"
    return files, compression


def count_records(path: str, compression: str | None) -> int:
    """Records in a file, from the sidecar when the file has not changed since it was counted.

    Raises:
        CorruptRecordError: the file is corrupt (named, with the record).
    """
    sidecar = fileio.join(os.path.dirname(path) or ".", COUNTS_SIDECAR)
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
    if entry and entry["stamp"] == stamp:
        return int(entry["records"])
    count = sum(1 for _ in tfrecord.read_records(path, compression=compression))
    cache[name] = {"stamp": stamp, "records": count}
    with contextlib.suppress(OSError):  # a read-only data folder: count again next time
        fileio.write_text_atomic(sidecar, json.dumps(cache, sort_keys=True, indent=1))
    return count
