"""Random access to converted shards through their index files, without TensorFlow.

`IndexedRecords` opens one split and reads any record by its global number (records numbered
shard after shard in manifest order) with CRC checks; `global_order` is the seeded per-epoch
permutation shared by this reader and `load(shuffle="global")`, so PyTorch, JAX/Grain and
tf.data users see the same order; `worker_positions` cuts an epoch into even per-worker parts.

    records = shardfeed.IndexedRecords("data/flowers", split="train")
    len(records), records.example(7)["image/class/label"], records.image(7).shape
    torch.utils.data.DataLoader(records.as_torch(), ...)   # __len__/__getitem__ -> (image, label)

Memory: 20 bytes per record for the index arrays (~26 MB for ImageNet-1k), never image data.
"""

from __future__ import annotations

import io
import os
import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from shardfeed import fileio, manifest, tfrecord
from shardfeed.example_proto import parse_example

EVEN_MODES = ("drop", "pad")
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, vectorised (a stable, well-mixed 64-bit hash)."""
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        return x ^ (x >> np.uint64(31))


def global_order(num_records: int, seed: int, epoch: int) -> np.ndarray:
    """The record numbers of one epoch in shuffled order: a pure function of (seed, epoch).

    Records are sorted by a 64-bit hash of (seed, epoch, record number). Written out here rather
    than taken from NumPy's Generator, whose streams may change between NumPy versions; a golden
    test pins the order.
    """
    salt = _splitmix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], np.uint64))[0]
    salt = _splitmix64(np.array([salt ^ np.uint64(epoch & 0xFFFFFFFFFFFFFFFF)], np.uint64))[0]
    keys = _splitmix64(np.arange(num_records, dtype=np.uint64) ^ salt)
    return np.argsort(keys, kind="stable").astype(np.int64)


def worker_positions(num_records: int, num_workers: int, worker_index: int, even: str = "drop") -> np.ndarray:
    """Which positions of an epoch's order worker `worker_index` reads: every num_workers-th.

    Every worker gets the same count: 'drop' leaves out the last (num_records % num_workers)
    positions, 'pad' wraps around to the start so each worker gets ceil(num_records / num_workers).

    Raises:
        ValueError: bad worker index or mode.
    """
    if even not in EVEN_MODES:
        raise ValueError(f"even must be one of {list(EVEN_MODES)}, got {even!r}")
    if num_workers < 1 or not 0 <= worker_index < num_workers:
        raise ValueError(f"worker_index must be in 0..{num_workers - 1} for {num_workers} workers, got {worker_index}")
    per_worker = num_records // num_workers if even == "drop" else -(-num_records // num_workers)
    return (np.arange(per_worker, dtype=np.int64) * num_workers + worker_index) % max(num_records, 1)


class IndexedRecords:
    """One split of a converted folder as a random-access sequence of records (no TensorFlow).

    Args:
        path: a converted folder.
        split: which split.
        check_crc: verify each record's CRC32C (default; cheap with hardware CRC).
        transform: applied by `__getitem__` to each parsed example (default: (uint8 image HWC,
            0-based label, -1 when unlabeled)).
        max_open_files: for remote shards (gs://, s3://, ...), handles kept open at once (least
            recently used closed first). Local shards are read with a private pread per record,
            in parallel across threads, keeping no file open.
    """

    def __init__(
        self,
        path: str,
        split: str = "train",
        *,
        check_crc: bool = True,
        transform: Callable[[dict[str, Any]], Any] | None = None,
        max_open_files: int = 64,
    ) -> None:
        self.manifest = manifest.read(path)
        if self.manifest.compression == "gzip":
            raise ValueError(
                f"{path} has gzip-compressed shards, which cannot be read at random positions; "
                "convert again without --compression"
            )
        info = self.manifest.split(split)
        self.split = split
        self.files = [fileio.join(self.manifest.path, s.file) for s in info.shards]
        shard_ids, offsets, sizes = [], [], []
        for number, shard in enumerate(info.shards):
            pairs = tfrecord.parse_index(fileio.read_bytes(fileio.join(self.manifest.path, shard.index_file)).decode())
            if len(pairs) != shard.num_records:
                raise ValueError(
                    f"index {shard.index_file} lists {len(pairs)} records, the manifest says "
                    f"{shard.num_records}; run `shardfeed verify`"
                )
            shard_ids.append(np.full(len(pairs), number, np.int32))
            offsets.append(np.array([p[0] for p in pairs], np.int64))
            sizes.append(np.array([p[1] for p in pairs], np.int64))
        self.shard_ids = np.concatenate(shard_ids) if shard_ids else np.zeros(0, np.int32)
        self.offsets = np.concatenate(offsets) if offsets else np.zeros(0, np.int64)
        self.sizes = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
        self.check_crc = check_crc
        self.transform = transform or self._image_and_label
        self.max_open_files = max(1, max_open_files)
        self._remote = any(fileio.is_remote(f) for f in self.files)
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
            blob = fileio.read_range(self.files[shard], offset, size)
        name = f"{os.path.basename(self.files[shard])} (record {index} of {self.split})"
        _, data = next(tfrecord.iter_records(io.BytesIO(blob), name=name, check_crc=self.check_crc), (0, None))
        if data is None or len(blob) != size:
            raise tfrecord.CorruptRecordError(f"{name}: cut short at byte {offset}")
        return data

    def example(self, index: int) -> dict[str, Any]:
        """Record `index` parsed: {feature: value} (single values unwrapped)."""
        return {k: v[0] if len(v) == 1 else v for k, v in parse_example(self.record(index)).items()}

    def image(self, index: int) -> np.ndarray:
        """Record `index`'s image decoded to a uint8 [H, W, C] array."""
        return decode_image(self.example(index))

    def label(self, index: int) -> int:
        return int(self.example(index)["image/class/label"]) - self.manifest.label_offset

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

    def _image_and_label(self, example: dict[str, Any]) -> tuple[np.ndarray, int]:
        label = example.get("image/class/label")
        return decode_image(example), -1 if label is None else int(label) - self.manifest.label_offset

    def as_torch(self) -> IndexedRecords:
        """This object: it already has the `__len__`/`__getitem__` a torch Dataset (or a Grain
        RandomAccessDataSource) needs, returning (image uint8 HWC, label) by default."""
        return self

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


class GlobalOrderSampler:
    """Record numbers of one epoch of the global order for one worker; `set_epoch` moves on.

    Needs no torch: DataLoader takes any iterable with a length as its sampler. The order is
    the one `load(shuffle="global", seed=seed)` reads, so TensorFlow and PyTorch runs agree.
    """

    def __init__(
        self,
        num_records: int,
        seed: int,
        num_workers: int = 1,
        worker_index: int = 0,
        even: str = "drop",
        epoch: int = 0,
    ) -> None:
        self.num_records, self.seed, self.epoch = num_records, seed, epoch
        self.positions = worker_positions(num_records, num_workers, worker_index, even)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.positions)

    def order(self) -> np.ndarray:
        """This worker's record numbers for the current epoch."""
        return global_order(self.num_records, self.seed, self.epoch)[self.positions]

    def __iter__(self) -> Iterator[int]:
        return iter(self.order().tolist())


def sample_records(path: str, split: str, count: int, seed: int) -> list[bytes]:
    """Up to `count` serialized records of a split picked at random (seeded), in pick order.

    Read by index for plain shards; gzip shards (no random access) are streamed once.
    """
    m = manifest.read(path)
    total = m.split(split).num_records
    picked = random.Random(seed).sample(range(total), min(count, total))
    if m.compression != "gzip":
        records = IndexedRecords(path, split)
        return [records.record(i) for i in picked]
    wanted, found, number = set(picked), {}, 0
    for file in m.shard_paths(split):
        for data in tfrecord.read_records(file, compression="gzip"):
            if number in wanted:
                found[number] = data
            number += 1
    return [found[i] for i in picked]


def to_rgb(image: np.ndarray) -> np.ndarray:
    """A [H, W, 1] or [H, W, 3] uint8 image as [H, W, 3] (gray repeated)."""
    return image if image.shape[-1] == 3 else np.repeat(image[..., :1], 3, axis=-1)


def decode_image(example: dict[str, Any]) -> np.ndarray:
    """The image of a parsed example as uint8 [H, W, C] (JPEG via simplejpeg, else Pillow/raw)."""
    data = example["image/encoded"]
    fmt = example.get("image/format", b"")
    if fmt == b"RAW":
        h, w, c = (int(example[k]) for k in ("image/height", "image/width", "image/channels"))
        return np.frombuffer(data, np.uint8).reshape(h, w, c)
    if data[:3] == b"\xff\xd8\xff":
        import simplejpeg

        gray = int(example.get("image/channels", 3)) == 1
        return np.asarray(simplejpeg.decode_jpeg(data, "GRAY" if gray else "RGB"))
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        array = np.asarray(im)
    return array[..., None] if array.ndim == 2 else array
