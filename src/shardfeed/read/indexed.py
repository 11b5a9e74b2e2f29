"""Random access to converted shards through their index files, without TensorFlow.

`IndexedRecords` opens one split and reads any record by its global number (records numbered
shard after shard in manifest order) with CRC checks; its `order`/`sampler` walk the seeded
global order of `order.py`, the one `load` reads with shuffle="global", so PyTorch, JAX/Grain and
tf.data users see the same records in the same order.

    records = shardfeed.IndexedRecords("data/flowers", split="train")
    len(records), records.example(7)["image/class/label"], records.image(7).shape
    torch.utils.data.DataLoader(records.as_torch(), ...)   # __len__/__getitem__ -> (image, label)

Beyond one label, `records[i]` is (image, what the task holds): a detection folder's boxes and
labels, a segmentation folder's mask, a multi-label folder's k-hot vector (`target`).

Memory: 20 bytes per record for the index arrays (~26 MB for ImageNet-1k), never image data.
"""

from __future__ import annotations

import io
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from shardfeed.errors import CorruptRecordError, OptionError
from shardfeed.format import fileio, manifest, schema, tfrecord
from shardfeed.format.example_proto import parse_example
from shardfeed.format.tasks import task_of
from shardfeed.read import shardset
from shardfeed.read.options import ReadOptions
from shardfeed.read.order import GlobalOrderSampler
from shardfeed.read.pixels import decode_image
from shardfeed.read.remote.cache import ShardCache
from shardfeed.read.remote.feed import WAIT_FOR_ROOM, remote_shards
from shardfeed.read.targets import targets_of


class IndexedRecords:
    """One split of a converted folder as a random-access sequence of records (no TensorFlow).

    Args:
        path: a converted folder (or its manifest, already read).
        split: which split.
        check_crc: verify each record's CRC32C (default; cheap with hardware CRC).
        transform: applied by `__getitem__` to each parsed example (default: (uint8 image HWC,
            0-based label, -1 when unlabeled; or the task's `target`)).
        max_open_files: for shards on TensorFlow's own filesystems (ram://), handles kept open at
            once (least recently used closed first). Local shards are read with a private pread
            per record, in parallel across threads, keeping no file open.
        cache: for a folder in a bucket (s3://, gs://, az://): the `ShardCache` its shards are
            fetched into, whole and verified against the manifest, on first use (default: the
            default cache folder, unbounded); a bounded one evicts the least recently read.
    """

    def __init__(
        self,
        path: str | manifest.Manifest,
        split: str = "train",
        *,
        check_crc: bool = True,
        transform: Callable[[dict[str, Any]], Any] | None = None,
        max_open_files: int = 64,
        cache: ShardCache | None = None,
    ) -> None:
        self.manifest = manifest.opened(path)
        spec = task_of(self.manifest.header.task)  # asked per record: read once
        self._one_label, self._targets = spec.one_label, targets_of(spec)
        self._classes = len(self.manifest.labels or [])
        self._label_offset = self.manifest.label_offset
        if self.manifest.compression == "gzip":
            raise OptionError(
                f"{self.manifest.path} has gzip-compressed shards, which cannot be read at random positions; "
                "convert again without compression (--compression)"
            )
        info = self.manifest.split(split)
        shards = shardset.from_manifest(self.manifest, split)
        shards.check_files()
        self.split = split
        self.keys = self.manifest.keys
        self._keys_are_ours = self.keys.is_ours  # asked per record
        self.files = [fileio.join(self.manifest.path, s.file) for s in info.shards]
        shard_ids, offsets, sizes = [], [], []
        for number, shard in enumerate(info.shards):
            pairs = tfrecord.read_index(fileio.join(self.manifest.path, shard.index_file), shard.num_records)
            if len(pairs) != shard.num_records:
                raise CorruptRecordError(
                    f"index file {shard.index_file} lists {len(pairs)} records, the manifest says "
                    f"{shard.num_records}; run `shardfeed verify`"
                )
            starts, lengths = _laid_end_to_end(
                pairs, shards.sizes[number] if shards.sizes else None, fileio.join(self.manifest.path, shard.index_file)
            )
            shard_ids.append(np.full(len(pairs), number, np.int32))
            offsets.append(starts)
            sizes.append(lengths)
        self.shard_ids = np.concatenate(shard_ids) if shard_ids else np.zeros(0, np.int32)
        self.shard_starts = np.cumsum([0] + [len(ids) for ids in shard_ids])[:-1]
        self.offsets = np.concatenate(offsets) if offsets else np.zeros(0, np.int64)
        self.sizes = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
        self.check_crc = check_crc
        self.transform = transform or self._image_and_label
        self.max_open_files = max(1, max_open_files)
        in_bucket = any(fileio.is_bucket(f) for f in self.files)
        self._remote = not in_bucket and any(fileio.is_remote(f) for f in self.files)
        self._cache = (cache or ReadOptions().shard_cache()) if in_bucket else None
        self._cached = remote_shards(shards) if in_bucket else []
        self._last_read: dict[str, int] = {}  # cached shard's sha256 -> read number (least recent evicted)
        self._reads = 0
        self._handles: OrderedDict[int, Any] = OrderedDict()
        self._pid = os.getpid()
        self._lock = threading.Lock()  # seek+read pairs on shared remote handles (tf.data threads)

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, index: int) -> Any:
        return self.transform(self.example(index))

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_handles"] = OrderedDict()  # file handles do not cross processes (DataLoader workers)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def record(self, index: int) -> bytes:
        """The serialized tf.train.Example of record `index` (negative counts from the end)."""
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"record {index} out of range for {len(self)} records")
        shard = int(self.shard_ids[index])
        offset, size = int(self.offsets[index]), int(self.sizes[index])
        if self._remote:
            with self._lock:
                handle = self._handle(shard)
                handle.seek(offset)
                blob = handle.read(size)
        else:
            local = self._local_file(shard)
            try:
                try:
                    blob = fileio.read_range(local, offset, size)
                except FileNotFoundError:
                    if self._cache is None:
                        raise
                    # evicted by another reader of the cache between the two calls: fetched again
                    blob = fileio.read_range(self._local_file(shard), offset, size)
            except OSError as e:
                raise CorruptRecordError(
                    f"shard {self.files[shard]} cannot be read ({e.strerror or e}); run `shardfeed verify`"
                ) from e
        within = index - int(self.shard_starts[shard])
        name = f"shard {self.files[shard]} record {within} (record {index} of split {self.split})"
        try:
            _, data = next(tfrecord.iter_records(io.BytesIO(blob), name=name, check_crc=self.check_crc), (0, None))
        except CorruptRecordError as e:  # its "record 0 at byte 0" counts within the one-record blob
            raise CorruptRecordError(f"{name}, byte {offset}: {str(e).rsplit(': ', 1)[-1]}") from e
        if data is None or len(blob) != size:
            raise CorruptRecordError(f"{name}: cut short at byte {offset}")
        return data

    def example(self, index: int, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
        """Record `index` parsed: {feature: value} (single values unwrapped); only the features of
        `keys` (stored keys) that it has, if given."""
        return {k: v[0] if len(v) == 1 else v for k, v in parse_example(self.record(index), keys).items()}

    def image(self, index: int) -> np.ndarray:
        """Record `index`'s image decoded to a uint8 [H, W, C] array."""
        return decode_image(self._ours(self.example(index)))

    def encoded(self, index: int) -> tuple[bytes, Any]:
        """Record `index`'s stored image bytes and class id (beyond one label: its `target`),
        from one parse."""
        if self._one_label and self._keys_are_ours:  # the two features alone
            example = self.example(index, (schema.ENCODED, schema.LABEL))
            return example[schema.ENCODED], self._class_id(example, index)
        example = self._ours(self.example(index))
        if not self._one_label:
            return example[schema.ENCODED], self.target(example)
        return example[schema.ENCODED], self._class_id(example, index)

    def label(self, index: int) -> int:
        """Record `index`'s class id (0..K-1).

        Raises:
            OptionError: the folder holds no one class per image (multi-label, segmentation):
                `example(index)` has what its records hold.
        """
        return self._class_id(self._ours(self.example(index)), index)

    def _class_id(self, example: dict[str, Any], index: int) -> int:
        if not self._one_label:
            raise OptionError(
                f"record {index} of {self.manifest.path} holds {self._targets.task} labels, not one class id: "
                f"read example({index})"
            )
        return int(example[schema.LABEL]) - self._label_offset

    def _ours(self, example: dict[str, Any]) -> dict[str, Any]:
        """An example under our keys (records of an adopted folder may use others: `schema.canonical`)."""
        if self._keys_are_ours:
            return example
        wrapped = {k: v if isinstance(v, list) else [v] for k, v in example.items()}
        return {k: v[0] if len(v) == 1 else v for k, v in schema.canonical(wrapped, self.keys).items()}

    def order(
        self, seed: int, epoch: int = 0, *, num_workers: int = 1, worker_index: int = 0, even: str = "drop"
    ) -> np.ndarray:
        """The record numbers this worker reads in `epoch`, in the global shuffled order."""
        return self.sampler(seed, num_workers=num_workers, worker_index=worker_index, even=even, epoch=epoch).order()

    def sampler(
        self, seed: int, *, num_workers: int = 1, worker_index: int = 0, even: str = "drop", epoch: int = 0
    ) -> GlobalOrderSampler:
        """A sampler for `torch.utils.data.DataLoader(records, sampler=...)` that walks the global
        order, with `set_epoch(e)` as torch's DistributedSampler (num_workers = world size,
        worker_index = rank)."""
        return GlobalOrderSampler(len(self), seed, num_workers, worker_index, even, epoch)

    def _image_and_label(self, example: dict[str, Any]) -> tuple[np.ndarray, Any]:
        """(uint8 image HWC, target): the class id (-1 unlabeled), or what the task holds
        (`target`)."""
        example = self._ours(example)
        return decode_image(example), self.target(example)

    def target(self, example: dict[str, Any]) -> Any:
        """What a parsed record holds beside its image, as `load` gives it (before any crop):
        detection {"boxes": float32 [N, 4] (xmin, ymin, xmax, ymax) in pixels of the stored
        image, "labels": int64 [N], "is_crowd": bool [N] (COCO's crowd regions, which training
        batches leave out: `DecodeOptions.crowd_targets`)}; segmentation the mask, uint8 [H, W] class ids (255:
        ignored); multi-label k-hot float32 [K]; else the class id (-1: unlabeled). Each task's is
        read/targets/'s `Targets.raw`."""
        return self._targets.raw(example, self._label_offset, self._classes)

    def as_torch(self) -> IndexedRecords:
        """This object: it already has the `__len__`/`__getitem__` a torch Dataset (or a Grain
        RandomAccessDataSource) needs, returning (image uint8 HWC, label) by default."""
        return self

    def _local_file(self, shard: int) -> str:
        """The shard's local file: itself, or its verified copy in the cache (fetched now if needed)."""
        if self._cache is None:
            return self.files[shard]
        remote = self._cached[shard]
        with self._lock:
            self._reads += 1
            self._last_read[remote.sha256] = self._reads
            if self._cache.holds(remote):
                return self._cache.path(remote)
            keep = {remote.sha256}
            rank = lambda sha: -self._last_read.get(sha, -1)  # noqa: E731 (never read here: first out)
            deadline = time.monotonic() + WAIT_FOR_ROOM
            while not self._cache.reserve(remote, keep, rank):
                if time.monotonic() > deadline:
                    raise OptionError(
                        f"the shard cache {self._cache.directory} ({self._cache.limit:,} bytes) had no room for "
                        f"{remote.url} ({remote.size:,} bytes) for {WAIT_FOR_ROOM:.0f} s; raise cache_limit"
                    )
                time.sleep(0.05)  # other processes' fetches in flight hold the room
            return self._cache.fetch(remote)

    def _handle(self, shard: int) -> Any:
        """An open handle on a shard (call with the lock held)."""
        if self._pid != os.getpid():  # forked into a worker process: reopen
            self._handles, self._pid = OrderedDict(), os.getpid()
        handle = self._handles.get(shard)
        if handle is not None:
            self._handles.move_to_end(shard)
            return handle
        while len(self._handles) >= self.max_open_files:
            self._handles.popitem(last=False)[1].close()
        handle = self._handles[shard] = fileio.open_binary(self.files[shard], "rb")
        return handle

    def close(self) -> None:
        """Closes the open shard files (reading again reopens them)."""
        with self._lock:
            while self._handles:
                self._handles.popitem()[1].close()


def _laid_end_to_end(pairs: list[tuple[int, int]], shard_bytes: int | None, name: str) -> tuple[np.ndarray, np.ndarray]:
    """An index file's (offset, framed size) pairs as arrays, once they are checked to lie end
    to end from byte 0 and to fill the shard's `shard_bytes` exactly (the manifest's size; None:
    not known): an index entry is how many bytes a read asks for, and an edited line claiming
    2^40 made `os.pread` allocate them.

    Raises:
        CorruptRecordError: naming the index file and its first entry that does not fit.
    """
    starts = np.array([p[0] for p in pairs], np.int64)
    lengths = np.array([p[1] for p in pairs], np.int64)
    expected = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(pairs) else starts
    limit = shard_bytes if shard_bytes is not None else np.iinfo(np.int64).max
    bad = np.flatnonzero((starts != expected) | (lengths < tfrecord.FRAMING_BYTES) | (lengths > limit - starts))
    if len(bad) or (shard_bytes is not None and len(pairs) and int(starts[-1] + lengths[-1]) != shard_bytes):
        record = int(bad[0]) if len(bad) else len(pairs) - 1
        offset, size = pairs[record]
        raise CorruptRecordError(
            f"index file {name}: record {record} ({offset} {size}) does not lie end to end within its shard"
            + (f" of {shard_bytes:,} bytes" if shard_bytes is not None else "")
            + "; run `shardfeed verify`"
        )
    return starts, lengths
