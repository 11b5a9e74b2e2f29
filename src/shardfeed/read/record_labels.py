"""Every record's label, in record-number order, for samplers that choose records by class.

The manifest counts classes per split but does not say which record holds which class. The
labels are read once (one sequential pass over the split's shards, parsing only the label: about
15 us a record) and kept beside the shards in `index/<split>.labels.npy`, stamped with the
shards' SHA-256s so a changed split is read again. A read-only folder is read again per process.
"""

from __future__ import annotations

import contextlib
import hashlib
import io

import numpy as np

from shardfeed.errors import CorruptRecordError
from shardfeed.format import fileio, layout, manifest, schema, tfrecord
from shardfeed.format.example_proto import parse_example, single_int64

_CACHE: dict[tuple[str, str, str], np.ndarray] = {}


def record_labels(m: manifest.Manifest, split: str) -> np.ndarray:
    """The stored label of every record of `split` (int64, record-number order).

    Raises:
        CorruptRecordError: a record without a label (named by shard and record).
    """
    info = m.split(split)
    stamp = hashlib.sha256("".join(s.sha256 for s in info.shards).encode()).hexdigest()
    key = (m.path, split, stamp)
    if key in _CACHE:
        return _CACHE[key]
    path = fileio.join(m.path, layout.labels_file(split))
    labels = _load(path, stamp)
    if labels is None or len(labels) != info.num_records:
        labels = _read(m, split)
        with contextlib.suppress(OSError):  # a read-only folder: read again next time
            buffer = io.BytesIO()
            np.savez(buffer, labels=labels, stamp=np.array(stamp))
            fileio.write_bytes_atomic(path, buffer.getvalue())
    _CACHE[key] = labels
    return labels


def _load(path: str, stamp: str) -> np.ndarray | None:
    if not fileio.exists(path):
        return None
    try:
        with np.load(io.BytesIO(fileio.read_bytes(path))) as data:
            return data["labels"] if str(data["stamp"]) == stamp else None
    except (OSError, ValueError, KeyError):
        return None


def _read(m: manifest.Manifest, split: str) -> np.ndarray:
    label_key = m.keys.label_key or schema.LABEL
    out = []
    for file in m.shard_paths(split):
        for number, data in enumerate(tfrecord.read_records(file, compression=m.compression)):
            try:
                label = single_int64(data, label_key)
            except CorruptRecordError as e:
                raise CorruptRecordError(f"shard {file} record {number}: {e}") from e
            if label is None:
                raise CorruptRecordError(f"shard {file} record {number} has no {label_key} label")
            out.append(label)
    return np.array(out, np.int64)


def record_classes(m: manifest.Manifest, split: str) -> list[np.ndarray]:
    """The classes of every object of each record of a detection `split` (record-number order;
    an image without objects has none), kept for the process (one pass over the shards)."""
    info = m.split(split)
    stamp = hashlib.sha256("".join(s.sha256 for s in info.shards).encode()).hexdigest()
    key = (m.path, f"{split}\0objects", stamp)
    if key not in _OBJECT_CACHE:
        _OBJECT_CACHE[key] = [
            np.unique(np.asarray(parse_example(data).get(schema.OBJECT_LABEL, []), np.int64))
            for file in m.shard_paths(split)
            for data in tfrecord.read_records(file, compression=m.compression)
        ]
    return _OBJECT_CACHE[key]


_OBJECT_CACHE: dict[tuple[str, str, str], list[np.ndarray]] = {}
