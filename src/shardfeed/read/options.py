"""How `load` reads and decodes: frozen, validated option objects with their defaults.

`ReadOptions` decides which records come out and in what order (shuffling, workers, resume
point, caching, corrupt-record policy, foreign feature names); `DecodeOptions` decides the pixels
(channels, dtype, evaluation crop, IDCT, resize filter, a per-batch hook); `ServiceOptions` says
where the pipeline runs when it runs on a tf.data service. Each validates what it can tell by
itself; rules that need the data, the seed or the service are in read/plan.py. `load` and
`steps_per_epoch` resolve the same plan, so what they count and what they read cannot drift.
Defaults live here and only here. `ReadConfig` and `DecodeConfig` are the former names (deprecated).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.format.schema import ForeignKeys
from shardfeed.read.order import WorkerShare

CACHE_DIR_VARIABLE, CACHE_LIMIT_VARIABLE = "SHARDFEED_CACHE_DIR", "SHARDFEED_CACHE_LIMIT"
SHUFFLES = ("buffer", "global")
DEFAULT_SHUFFLE_BUFFER = 4096  # serialized records: ~4096 x 110 KB = 450 MB at ImageNet sizes
DTYPES = ("uint8", "float32")
DCT_METHODS = ("INTEGER_FAST", "INTEGER_ACCURATE", "")
FAST_DCT = ("INTEGER_FAST", "")  # libjpeg's fast integer IDCT: '' is TensorFlow's default, the fast one
COMPRESSIONS = (None, "gzip")
BALANCES = (None, "class")
# Defaults every reader shares (load, steps_per_epoch, grain_dataset, the tools, training): one place.
BATCH_SIZE = 64
IMAGE_SIZE = 224  # output side in pixels (square), as Keras' applications take them
SERVICE_MODES = ("distributed_epoch", "parallel_epochs", "file", "data", "file_or_data", "hint")


@dataclass(frozen=True)
class ReadOptions:
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
        cache: keep the records as read (images still encoded) in memory (True) or in a cache
            file (a path).
        epoch, start_step: with shuffle='global', start at this epoch and skip this many batches
            of it (exact mid-epoch resume; see `shardfeed.training.fit_resumable`).
        start_record: with shuffle='global', the records of `epoch` that all workers together
            have read already (a `ResumePoint`'s records_consumed): this run's workers share the
            rest, whatever their number was before (elastic resume; instead of start_step).
        balance: 'class' reads each training epoch with the same number of records per class
            (`order.balanced_order`: small classes repeated, large ones sampled anew each epoch,
            no rejection); read by index, in a seeded global order. On a detection folder: LVIS'
            repeat-factor sampling (`order.repeat_factors`: images of rare classes more often),
            the epoch keeping the split's length. None: records as they are.
        repeat_threshold: LVIS' t for detection's balance='class' (0.001, as Detectron2): a
            class on a share f < t of the images repeats them sqrt(t / f) times.
        num_workers, worker_index: this input pipeline's share (without a distribution strategy;
            `load(input_context=...)` sets both). Whole shards per worker unless `even`.
        even: split records, not shards, across workers so each reads the same count: 'drop' the
            remainder or 'pad' by wrapping around (works with fewer shards than workers). With
            shuffle='buffer', each worker's records in file order, shuffled within windows of
            the buffer's size, anew each epoch (`order.window_order`).
        skip_corrupt: skip unreadable records (logged per shard) instead of failing.
        with_filenames: also yield each record's file name: (images, labels, filenames).
        filter_fn: predicate on one record's parsed features (a dict of tensors); False drops it.
        foreign: for other people's TFRecords, which features hold the image and the label, and
            the labels' base (`ForeignKeys`; default: the manifest's keys and offset, or ours).
        compression: 'gzip' for compressed foreign files (ours say so in their manifest).
        image_key, label_key, label_offset: deprecated; the same as `foreign=ForeignKeys(...)`.
        cache_dir: where shards of a folder in a bucket (s3://, gs://, az://) are kept, verified,
            while they are read (read/remote/cache.py); default ~/.cache/shardfeed/shards.
        cache_limit: bytes (or '20GB') that folder may hold, fetches in flight included; default
            None: no bound (every shard read stays, so later epochs fetch nothing). At least 4
            shards of the largest size; below the split's size every epoch fetches again.

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
    start_record: int = 0
    balance: str | None = None
    repeat_threshold: float = 0.001
    num_workers: int = 1
    worker_index: int = 0
    even: str | None = None
    skip_corrupt: bool = False
    with_filenames: bool = False
    filter_fn: Callable[[dict[str, Any]], Any] | None = None
    foreign: ForeignKeys | None = None
    compression: str | None = None
    cache_dir: str | None = None
    cache_limit: int | str | None = None
    image_key: str | None = None  # deprecated: foreign=
    label_key: str | None = None  # deprecated: foreign=
    label_offset: int | None = None  # deprecated: foreign=

    def __post_init__(self) -> None:
        ForeignKeys.fold(self, "ReadOptions")
        if self.shuffle is not None and self.shuffle not in SHUFFLES:
            raise OptionError(f"shuffle must be one of {list(SHUFFLES)}, got {self.shuffle!r}")
        if self.shuffle_buffer is not None and (not isinstance(self.shuffle_buffer, int) or self.shuffle_buffer < 0):
            raise OptionError(f"shuffle_buffer must be a non-negative integer, got {self.shuffle_buffer!r}")
        if self.epoch < 0 or self.start_step < 0 or self.start_record < 0:
            raise OptionError(
                f"epoch, start_step and start_record must be >= 0, got {self.epoch}, {self.start_step}, "
                f"{self.start_record}"
            )
        if self.start_step and self.start_record:
            raise OptionError(
                "start_step and start_record both say where to resume: pass start_record (records all workers "
                "read, from a ResumePoint) or start_step (batches of this worker), not both"
            )
        if self.balance not in BALANCES:
            raise OptionError(f"balance must be one of {list(BALANCES)}, got {self.balance!r}")
        if not 0 < self.repeat_threshold <= 1:
            raise OptionError(f"repeat_threshold must be in (0, 1], got {self.repeat_threshold!r}")
        if self.balance and self.shuffle == "buffer":
            raise OptionError(
                "balance='class' chooses every record of an epoch by index in a seeded order; a shuffle buffer "
                "cannot: drop shuffle='buffer'"
            )
        if (self.epoch or self.start_step or self.start_record) and self.order != "global":
            raise OptionError(
                "epoch, start_step and start_record need shuffle='global' (only a global order is a pure "
                "function of (seed, epoch), so only it can be resumed exactly); buffer-shuffled reading "
                "cannot resume mid-epoch, on the same number of workers or another"
            )
        WorkerShare(self.num_workers, self.worker_index, self.even)  # validates the three
        if self.compression not in COMPRESSIONS:
            raise OptionError(f"compression must be one of {list(COMPRESSIONS)}, got {self.compression!r}")
        if self.cache_limit is not None:
            object.__setattr__(self, "cache_limit", _bytes("cache_limit", self.cache_limit))
        self._check_by_index()

    def shard_cache(self) -> Any:
        """The shard cache these options describe (for shards in a bucket); fields not given come
        from $SHARDFEED_CACHE_DIR and $SHARDFEED_CACHE_LIMIT (the CLI's --cache-dir/--cache-limit)."""
        from shardfeed.read.remote.cache import ShardCache

        limit = self.cache_limit
        if limit is None and os.environ.get(CACHE_LIMIT_VARIABLE):
            limit = _bytes(CACHE_LIMIT_VARIABLE, os.environ[CACHE_LIMIT_VARIABLE])
        directory = self.cache_dir or os.environ.get(CACHE_DIR_VARIABLE) or None
        return ShardCache(directory, limit if isinstance(limit, int) else None)

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
                raise OptionError(f"{name}= does not apply with shuffle='global' or even splits: {reason}")

    @property
    def share(self) -> WorkerShare:
        """This input pipeline's part of the split, as these options state it."""
        return WorkerShare(self.num_workers, self.worker_index, self.even)

    @property
    def order(self) -> str:
        """The shuffle in force: 'global' with even splits unless 'buffer' was asked for."""
        return self.shuffle or ("global" if self.even is not None or self.balance else "buffer")

    @property
    def by_index(self) -> bool:
        """Records are read through the index files (global order or even splits)."""
        return self.order == "global" or self.even is not None or self.balance is not None

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


def _bytes(name: str, value: int | str) -> int:
    """A positive byte count from an int or '20GB'."""
    from shardfeed.write.sharding import parse_size

    try:
        count = parse_size(value) if not isinstance(value, bool) else 0
    except (ValueError, TypeError) as e:
        raise OptionError(f"{name} must be bytes or a size such as '20GB', got {value!r}") from e
    if count <= 0:
        raise OptionError(f"{name} must be positive, got {value!r}")
    return count


DECODERS = ("tf", "dali")


BOX_FORMATS = (  # KerasHub's and Keras' names (keras.utils.bounding_boxes.convert_format)
    "xyxy",
    "yxyx",
    "xywh",
    "center_xywh",
    "center_yxhw",
    "rel_xyxy",
    "rel_yxyx",
    "rel_xywh",
    "rel_center_xywh",
)


@dataclass(frozen=True)
class DecodeOptions:
    """How `load` turns records into pixels (beyond the output size and augmentation).

    Attributes:
        channels: 3 (grayscale is expanded) or 1.
        dtype: 'uint8' (default: normalise on the accelerator) or 'float32' (values 0..255).
        crop_fraction: evaluation centre crop, as a share of the shorter side (Inception's 0.875).
        dct_method: libjpeg IDCT: 'INTEGER_ACCURATE' (default; 'INTEGER_FAST' measured no faster; '' too).
        antialias: antialiased resize (37% slower; Inception and Keras resize without it).
        dct_scaling: decode a JPEG at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling, close to a
            box filter) when its crop window is at least that many times the output size, then
            resize the rest of the way: large photos (3-12 MP) decode several times faster, and
            the result is less aliased than a plain bilinear resize from full size. False:
            always decode at full resolution.
        fused_resize: with dtype 'uint8', no antialiasing, no letterbox and no photometric
            augmentation (the default training and evaluation feeds), resize, round and flip in
            one compiled TensorFlow op (read/native/fused_resize.py), built once per TensorFlow with the
            machine's C++ compiler: the same pixels, bit for bit, as TensorFlow's ops at about a
            fifth of their CPU (0.06 against ~0.30 ms a 224 px image). Where it cannot be
            built or loaded (one warning) and with a tf.data service (its workers would need the
            op), TensorFlow's ops. False: never built.
        batch_decode: where the fused resize applies and every record is a JPEG without masks
            or boxes, each batch's JPEGs decoded (the crop window only), resized and flipped into
            the batch by one compiled op (read/native/batch_decode.py, the system's libjpeg) instead of
            TensorFlow's ops record by record: the same pixels, bit for bit, for less CPU. Where
            it cannot be built or loaded (one warning), record by record. False: never built.
        map_fn: applied to each decoded batch, (images, labels) -> (images, labels) (unlabeled:
            images -> images); with `ReadOptions(with_filenames=True)` the file names pass by it
            unchanged.
        decoder: 'tf' (default: TensorFlow on the CPU, read/decode/image.py) or 'dali' (NVIDIA DALI,
            read/dali.py: nvJPEG on a GPU, for hosts whose CPUs cannot decode fast enough;
            `make dali` installs it).
        device: with decoder='dali': 'gpu' (default) or 'cpu' (DALI's CPU decoder: tests, hosts
            without a GPU; slower than decoder='tf').
        letterbox: where the image is not randomly cropped (evaluation), the whole image
            resized to fit the output keeping its aspect ratio and centred on black (masks on
            255, ignored), as `tf.image.resize_with_pad` and KerasHub's `pad_to_aspect_ratio`
            do, instead of the centre crop (or, for detection, the whole image stretched).
        bounding_box_format: a detection folder's boxes in one of KerasHub's (Keras')
            formats: 'xyxy' (default, output pixels), 'yxyx', 'xywh', 'center_xywh',
            'center_yxhw', or 'rel_xyxy', 'rel_yxyx', 'rel_xywh', 'rel_center_xywh' (fractions
            of the output's width and height). Padding stays -1.
        max_objects: a detection batch's boxes padded to this many per image (a fixed shape,
            which XLA and JAX compile once) instead of the batch's most; an image's objects
            past it (after augmentation dropped those cut away) are left out, in stored order.
        crowd_targets: a detection folder's crowd regions (COCO's iscrowd=1) in training batches.
            Off (default): left out of them, as Model Garden's parsers do (skip_crowd_during_training);
            evaluation batches keep them, and `evaluate` scores them as crowd, as pycocotools does.
    """

    channels: int = 3
    dtype: str = "uint8"
    crop_fraction: float = 0.875
    dct_method: str = "INTEGER_ACCURATE"
    antialias: bool = False
    dct_scaling: bool = True
    fused_resize: bool = True
    batch_decode: bool = True
    map_fn: Callable[..., Any] | None = None
    decoder: str = "tf"
    device: str = "gpu"
    letterbox: bool = False
    bounding_box_format: str = "xyxy"
    max_objects: int | None = None
    crowd_targets: bool = False

    def __post_init__(self) -> None:
        choices = {"bounding_box_format": BOX_FORMATS, "decoder": DECODERS, "dtype": DTYPES, "dct_method": DCT_METHODS}
        for name, allowed in {**choices, "device": ("gpu", "cpu"), "crowd_targets": (False, True)}.items():
            if getattr(self, name) not in allowed:
                raise OptionError(f"{name} must be one of {list(allowed)}, got {getattr(self, name)!r}")
        if self.max_objects is not None and (not isinstance(self.max_objects, int) or self.max_objects < 1):
            raise OptionError(f"max_objects must be a positive int or None, got {self.max_objects!r}")
        if self.channels not in (1, 3):
            raise OptionError(f"channels must be 1 or 3, got {self.channels!r}")
        if not 0 < self.crop_fraction <= 1:
            raise OptionError(f"crop_fraction must be in (0, 1], got {self.crop_fraction}")


def image_size(size: int | tuple[int, int]) -> tuple[int, int]:
    """`load`'s image_size as (height, width): one int means a square.

    Raises:
        ValueError: not a positive int or a pair of them.
    """
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(s, int) and s > 0 for s in pair):
        raise OptionError(f"image_size must be a positive int or (height, width), got {size!r}")
    return pair[0], pair[1]


@dataclass(frozen=True)
class ServiceOptions:
    """Running `load`'s pipeline on a tf.data service (`shardfeed serve`): where and how.

    `load(service="grpc://HOST:PORT")` is short for `load(service=ServiceOptions("grpc://HOST:PORT"))`.

    Attributes:
        address: the dispatcher, "grpc://HOST:PORT" (or "HOST:PORT").
        mode: the processing mode: 'distributed_epoch' (default: each record once per epoch
            across the workers), 'parallel_epochs', 'file', 'data', 'file_or_data', 'hint'
            (see read/service.py).
        compress: snappy-compress batches between workers and trainer (TF's default); False on
            fast networks saves that CPU on both ends (1.2x the images/s measured on loopback at
            224 px, where a batch of 64 is 9.6 MB either way).
        mirror_dir: for a folder in a bucket: where the workers keep its shards
            (`shardfeed serve worker --mirror URL --cache-dir DIR`, read/remote/mirror.py); default
            $SHARDFEED_CACHE_DIR, else ~/.cache/shardfeed/shards as this host names it.
    """

    address: str
    mode: str = "distributed_epoch"
    compress: bool = True
    mirror_dir: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.address, str) or (
            "://" in self.address and not self.address.startswith(("grpc://", "grpc+local://"))
        ):
            raise OptionError(f"service must look like grpc://HOST:PORT, got {self.address!r}")
        if self.mode not in SERVICE_MODES:
            raise OptionError(f"service mode must be one of {list(SERVICE_MODES)}, got {self.mode!r}")

    def mirror_directory(self) -> str:
        """The workers' mirror folder: `mirror_dir`, $SHARDFEED_CACHE_DIR, or the default cache folder."""
        from shardfeed.read.remote.cache import default_dir

        return self.mirror_dir or os.environ.get(CACHE_DIR_VARIABLE) or default_dir()

    @classmethod
    def of(cls, service: str | ServiceOptions | None) -> ServiceOptions | None:
        """`load`'s service argument as options (an address alone takes the defaults)."""
        return cls(service) if isinstance(service, str) else service


_RENAMED = {"ReadConfig": "ReadOptions", "DecodeConfig": "DecodeOptions"}


def renamed(name: str, namespace: dict[str, Any]) -> Any:
    """A former name's class, with a DeprecationWarning (for module `__getattr__`s).

    Raises:
        AttributeError: `name` is not a former name.
    """
    if name not in _RENAMED:
        raise AttributeError(name)
    warnings.warn(
        f"{name} is now {_RENAMED[name]} (one suffix for every option object); the old name will be removed",
        DeprecationWarning,
        stacklevel=3,
    )
    return namespace[_RENAMED[name]]


def __getattr__(name: str) -> Any:
    try:
        return renamed(name, globals())
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
