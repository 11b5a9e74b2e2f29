"""How `load` reads and decodes: two frozen, validated option objects with their defaults.

`ReadConfig` decides which records come out and in what order (shuffling, workers, resume
point, caching, corrupt-record policy, foreign feature names); `DecodeConfig` decides the pixels
(channels, dtype, evaluation crop, IDCT, resize filter, a per-batch hook). `load` and
`steps_per_epoch` take the same objects, so what they count and what they read cannot drift.
Defaults live here and only here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardfeed.read.order import EVEN_MODES

SHUFFLES = ("buffer", "global")
DEFAULT_SHUFFLE_BUFFER = 4096  # serialized records: ~4096 x 110 KB = 450 MB at ImageNet sizes
DTYPES = ("uint8", "float32")
DCT_METHODS = ("INTEGER_FAST", "INTEGER_ACCURATE", "")
COMPRESSIONS = (None, "gzip")
SERVICE_MODES = ("distributed_epoch", "parallel_epochs", "file", "data", "file_or_data", "hint")


@dataclass(frozen=True)
class ReadConfig:
    """Which records `load` reads, in what order, and how it treats them.

    Attributes:
        shuffle: 'buffer' (a shuffle buffer over shards read in parallel) or 'global' (a seeded
            permutation of all records of the split, new each epoch, read by index: the order
            `IndexedRecords` gives, a pure function of (seed, epoch), so `epoch` and `start_step`
            are exact). Default None: 'global' with `even`, else 'buffer'. Only used when training.
        shuffle_buffer: records in the shuffle buffer (default 4096, capped at the split; 0: none).
        deterministic: keep element order fixed; default True when a seed is given or when not
            training (evaluation and prediction outputs then line up with the records).
        drop_remainder: drop the last partial batch; default True when training.
        cache: keep the serialized records in memory (True) or in a cache file (a path).
        epoch, start_step: with shuffle='global', start at this epoch and skip this many batches
            of it (exact mid-epoch resume; see `shardfeed.training.fit_resumable`).
        num_workers, worker_index: this input pipeline's share (without a distribution strategy;
            `load(input_context=...)` sets both). Whole shards per worker unless `even`.
        even: split records, not shards, across workers so each reads the same count: 'drop' the
            remainder or 'pad' by wrapping around (works with fewer shards than workers).
        skip_corrupt: skip unreadable records (logged per shard) instead of failing.
        with_filenames: also yield each record's file name: (images, labels, filenames).
        filter_fn: predicate on one record's parsed features (a dict of tensors); False drops it.
        image_key, label_key: feature names in other people's TFRecords (label_key='' for none).
        compression: 'gzip' for compressed foreign files (ours say so in their manifest).
        service_mode: with `load(service=...)`, the tf.data service processing mode:
            'distributed_epoch' (default: each record once per epoch across the workers),
            'parallel_epochs', 'file', 'data', 'file_or_data', 'hint' (see read/service.py).
        service_compress: snappy-compress batches between workers and trainer (TF's default);
            False on fast networks saves that CPU on both ends (1.2x the images/s measured on
            loopback at 224 px, where a batch of 64 is 9.6 MB either way).

    Reading by index (shuffle='global' or `even`) needs uncompressed shards of a converted folder
    and rejects `cache`, `skip_corrupt` and (with the global order) `shuffle_buffer`.
    """

    shuffle: str | None = None
    shuffle_buffer: int | None = None
    deterministic: bool | None = None
    drop_remainder: bool | None = None
    cache: bool | str = False
    epoch: int = 0
    start_step: int = 0
    num_workers: int = 1
    worker_index: int = 0
    even: str | None = None
    skip_corrupt: bool = False
    with_filenames: bool = False
    filter_fn: Callable[[dict[str, Any]], Any] | None = None
    image_key: str | None = None
    label_key: str | None = None
    compression: str | None = None
    service_mode: str = "distributed_epoch"
    service_compress: bool = True

    def __post_init__(self) -> None:
        if self.shuffle is not None and self.shuffle not in SHUFFLES:
            raise ValueError(f"shuffle must be one of {list(SHUFFLES)}, got {self.shuffle!r}")
        if self.shuffle_buffer is not None and (not isinstance(self.shuffle_buffer, int) or self.shuffle_buffer < 0):
            raise ValueError(f"shuffle_buffer must be a non-negative integer, got {self.shuffle_buffer!r}")
        if self.even is not None and self.even not in EVEN_MODES:
            raise ValueError(f"even must be None, 'drop' or 'pad', got {self.even!r}")
        if self.epoch < 0 or self.start_step < 0:
            raise ValueError(f"epoch and start_step must be >= 0, got {self.epoch}, {self.start_step}")
        if (self.epoch or self.start_step) and self.order != "global":
            raise ValueError(
                "epoch and start_step need shuffle='global' (only a global order is a pure function "
                "of (seed, epoch), so only it can be resumed exactly)"
            )
        if self.num_workers < 1 or not 0 <= self.worker_index < self.num_workers:
            raise ValueError(
                f"worker_index must be in 0..{self.num_workers - 1} for {self.num_workers} workers, "
                f"got {self.worker_index}"
            )
        if self.service_mode not in SERVICE_MODES:
            raise ValueError(f"service_mode must be one of {list(SERVICE_MODES)}, got {self.service_mode!r}")
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {list(COMPRESSIONS)}, got {self.compression!r}")
        self._check_by_index()

    def _check_by_index(self) -> None:
        """Rejects buffer-pipeline options that reading by index cannot honour, instead of ignoring them."""
        if not self.by_index:
            return
        why = {
            "cache": "records are read in a new order each epoch, straight from the shards",
            "skip_corrupt": "a damaged record stops the run with its shard and number; run `shardfeed verify`",
            "shuffle_buffer": "the global order needs no buffer",
        }
        if self.order != "global":
            del why["shuffle_buffer"]  # even splits with shuffle='buffer' do use one
        for name, reason in why.items():
            if getattr(self, name) not in (None, False):
                raise ValueError(f"{name}= does not apply with shuffle='global' or even splits: {reason}")

    @property
    def order(self) -> str:
        """The shuffle in force: 'global' with even splits unless 'buffer' was asked for."""
        return self.shuffle or ("global" if self.even is not None else "buffer")

    @property
    def by_index(self) -> bool:
        """Records are read through the index files (global order or even splits)."""
        return self.order == "global" or self.even is not None

    def buffer_size(self, num_records: int) -> int:
        """Records in the shuffle buffer: `shuffle_buffer` (default 4096), capped at the records
        there are; 0 means no buffer."""
        if self.shuffle_buffer == 0:
            return 0
        return min(self.shuffle_buffer or DEFAULT_SHUFFLE_BUFFER, max(num_records, 1))

    def keeps_order(self, *, training: bool, seed: int | None) -> bool:
        """`deterministic` resolved: evaluation keeps file order (outputs line up with records);
        training is only made deterministic when a seed asks for reproducibility (faster)."""
        return (seed is not None or not training) if self.deterministic is None else self.deterministic

    def drops_remainder(self, *, training: bool) -> bool:
        """`drop_remainder` resolved: training drops the last partial batch."""
        return training if self.drop_remainder is None else self.drop_remainder


@dataclass(frozen=True)
class DecodeConfig:
    """How `load` turns records into pixels (beyond the output size and augmentation).

    Attributes:
        channels: 3 (grayscale is expanded) or 1.
        dtype: 'uint8' (default: normalise on the accelerator) or 'float32' (values 0..255).
        crop_fraction: evaluation centre crop, as a share of the shorter side (Inception's 0.875).
        dct_method: libjpeg IDCT: 'INTEGER_ACCURATE' (default; 'INTEGER_FAST' measured no faster).
        antialias: antialiased resize (37% slower; Inception and Keras resize without it).
        dct_scaling: decode a JPEG at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling, close to a
            box filter) when its crop window is at least that many times the output size, then
            resize the rest of the way: large photos (3-12 MP) decode several times faster, and
            the result is less aliased than a plain bilinear resize from full size. False:
            always decode at full resolution.
        map_fn: applied to each decoded batch, (images, labels) -> (images, labels).
    """

    channels: int = 3
    dtype: str = "uint8"
    crop_fraction: float = 0.875
    dct_method: str = "INTEGER_ACCURATE"
    antialias: bool = False
    dct_scaling: bool = True
    map_fn: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {list(DTYPES)}, got {self.dtype!r}")
        if self.channels not in (1, 3):
            raise ValueError(f"channels must be 1 or 3, got {self.channels!r}")
        if not 0 < self.crop_fraction <= 1:
            raise ValueError(f"crop_fraction must be in (0, 1], got {self.crop_fraction}")
        if self.dct_method not in DCT_METHODS:
            raise ValueError(f"dct_method must be one of {list(DCT_METHODS)}, got {self.dct_method!r}")


def image_size(size: int | tuple[int, int]) -> tuple[int, int]:
    """`load`'s image_size as (height, width): one int means a square.

    Raises:
        ValueError: not a positive int or a pair of them.
    """
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(s, int) and s > 0 for s in pair):
        raise ValueError(f"image_size must be a positive int or (height, width), got {size!r}")
    return pair[0], pair[1]
