"""`load(..., decode=DecodeOptions(decoder="dali"))`: JPEG decoding by NVIDIA DALI (nvJPEG on a GPU).

TensorFlow has no GPU JPEG decoder; when a GPU host's CPUs cannot decode fast enough, DALI can.
The same `ReadPlan` as the CPU path decides the records: this worker's whole shards (read with
the `index/*.idx` files, which are DALI's own format), in a seeded shuffle buffer when training;
then DALI decodes (the fused random-resized crop `decoders.image_random_crop` and a coin-flip
`flip` when augmenting, a centre crop for evaluation) and resizes, on the GPU ('mixed') or, with
`device='cpu'`, on the CPU (for tests and hosts without a GPU; slower than TensorFlow's own path,
docs/benchmarks/gpu.md). The result is a `tf.data.Dataset` with the CPU path's batches per epoch:
DALI pads each epoch's last batch (`pad_last_batch`), and the padding is cut off here (or the
whole partial batch dropped when training), so no batch crosses an epoch boundary; its
cardinality is asserted; labels are (batch,) like `load`'s.

Install: `make dali` (scripts/install_dali.sh: DALI and its TensorFlow plugin, which compiles at
install). Options the DALI reader cannot honour are refused with the reason (`refusal`).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.format import fileio, layout
from shardfeed.lazy import tensorflow
from shardfeed.read.augment import Augment
from shardfeed.read.options import DecodeOptions
from shardfeed.read.plan import ReadPlan

SHUFFLE_FILL = 1024  # DALI's shuffle buffer (records), its reader's default
INSTALL_HINT = "install it with `make dali` (scripts/install_dali.sh; DALI's TensorFlow plugin compiles at install)"


def installed() -> bool:
    """Whether DALI can be imported here (its `nvidia` namespace package may be absent altogether)."""
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except ModuleNotFoundError:  # find_spec imports the parent `nvidia` first
        return False


def refusal(plan: ReadPlan, augment: Augment | None) -> str | None:
    """Why the DALI path cannot give what these options ask for, or None when it can."""
    read = plan.read
    asked = {
        "shuffle='global' (DALI reads whole shards through a shuffle buffer)": plan.by_index,
        "a resume point (start_step/start_record)": bool(read.start_step or read.start_record),
        "skip_corrupt": read.skip_corrupt,
        "with_filenames": read.with_filenames,
        "filter_fn": read.filter_fn is not None,
        "cache": bool(read.cache),
        "gzip-compressed shards": plan.shards.compression is not None,
        "a tf.data service": plan.service is not None,
        "raw-pixel records (array sources)": _raw(plan),
        "other TFRecords without a manifest (run `shardfeed adopt` first: DALI needs the index files)": (
            plan.shards.manifest is None
        ),
    }
    if augment is not None:
        asked["augmentation beyond crop and flip (rotate, translate, noise, colour jitter)"] = bool(
            augment.rotate or augment.translate or augment.noise or augment.color_jitter
        )
    refused = [what for what, yes in asked.items() if yes]
    return ", ".join(refused) if refused else None


def _raw(plan: ReadPlan) -> bool:
    m = plan.shards.manifest
    return m is not None and "RAW" in m.image_stats.formats


def dali_dataset(plan: ReadPlan, size: tuple[int, int], augment: Augment | None, decode: DecodeOptions) -> Any:
    """The batches of `plan` decoded by DALI (see the module docstring).

    Raises:
        OptionError: DALI is not installed, no GPU for device='gpu', or options it cannot honour.
    """
    why = refusal(plan, augment)
    if why is not None:
        raise OptionError(f"decoder='dali' cannot honour {why}; use the default decoder for that")
    tf = tensorflow()
    if decode.device == "gpu" and not tf.config.list_physical_devices("GPU"):
        raise OptionError(
            "decoder='dali' with device='gpu' needs a GPU and TensorFlow sees none; pass "
            "DecodeOptions(decoder='dali', device='cpu') to run DALI on the CPU, or use the default decoder"
        )
    try:  # imported by name: typed Any, and absent (not an error for mypy) where DALI is not installed
        dali_tf = importlib.import_module("nvidia.dali.plugin.tf")
    except ImportError:
        raise OptionError(f"decoder='dali' needs NVIDIA DALI and its TensorFlow plugin: {INSTALL_HINT}") from None
    pipe = _pipeline(plan, size, augment, decode)
    channels = decode.channels
    with tf.device("/gpu:0" if decode.device == "gpu" else "/cpu:0"):
        ds = dali_tf.DALIDataset(
            pipeline=pipe,
            batch_size=plan.batch_size,
            num_threads=pipe.num_threads,
            device_id=0 if decode.device == "gpu" else None,
            output_shapes=((plan.batch_size, *size, channels), (plan.batch_size,)),
            output_dtypes=(tf.uint8 if decode.dtype == "uint8" else tf.float32, tf.int64),
        )
    return _epochs(ds, plan)


def _pipeline(plan: ReadPlan, size: tuple[int, int], augment: Augment | None, decode: DecodeOptions) -> Any:
    """The DALI pipeline: TFRecord reader over this worker's shards, decode, crop, resize, labels."""
    dali = importlib.import_module("nvidia.dali")
    fn, types, tfrec = dali.fn, dali.types, importlib.import_module("nvidia.dali.tfrecord")
    pipeline_def = dali.pipeline_def

    shards = plan.worker_shards
    folder = plan.shards.manifest.path  # type: ignore[union-attr]  # refused above when None
    keys = plan.schema
    device = "mixed" if decode.device == "gpu" else "cpu"
    colour = types.RGB if decode.channels == 3 else types.GRAY
    offset = plan.shards.manifest.label_offset  # type: ignore[union-attr]

    @pipeline_def(
        batch_size=plan.batch_size,
        num_threads=max(1, min(os.cpu_count() or 1, 8)),
        device_id=0 if decode.device == "gpu" else None,
        seed=plan.base_seed % 2**31,
    )
    def pipe() -> Any:
        record = fn.readers.tfrecord(
            path=list(shards.files),
            index_path=[fileio.join(folder, layout.index_file(os.path.basename(f))) for f in shards.files],
            features={
                keys.image_key: tfrec.FixedLenFeature((), tfrec.string, ""),
                keys.label_key: tfrec.FixedLenFeature([1], tfrec.int64, -1),
            },
            random_shuffle=plan.training,
            initial_fill=SHUFFLE_FILL,
            pad_last_batch=True,
            name="reader",
        )
        encoded, label = record[keys.image_key], record[keys.label_key]
        if augment is not None and augment.crop:
            images = fn.decoders.image_random_crop(
                encoded,
                device=device,
                output_type=colour,
                random_area=list(augment.area_range),
                random_aspect_ratio=list(augment.aspect_ratio_range),
            )
            images = fn.resize(images, resize_x=size[1], resize_y=size[0], antialias=decode.antialias)
        else:
            images = fn.decoders.image(encoded, device=device, output_type=colour)
            shorter = math.ceil(min(size) / decode.crop_fraction)
            images = fn.resize(images, resize_shorter=shorter, antialias=decode.antialias)
            images = fn.crop(images, crop=size)
        if augment is not None and augment.flip:
            images = fn.flip(images, horizontal=fn.random.coin_flip())
        if decode.dtype == "float32":
            images = fn.cast(images, dtype=types.FLOAT)
        label = fn.reshape(label, shape=[]) - offset
        return images, label

    built = pipe()
    built.build()
    return built


def _epochs(ds: Any, plan: ReadPlan) -> Any:
    """DALI's endless, padded batches cut into the CPU path's epochs: per epoch ceil(n/b) batches
    come out of DALI, the last padded; it is trimmed to its real records, or dropped when
    training drops the remainder. One pass unless the plan repeats."""
    tf = tensorflow()
    n, b = plan.records_per_pass(), plan.batch_size
    per_epoch, last = math.ceil(n / b), n - (math.ceil(n / b) - 1) * b
    if plan.drop_remainder and last < b:
        ds = ds.enumerate().filter(lambda i, _: i % per_epoch < per_epoch - 1).map(lambda _, batch: batch)
    elif last < b:
        ds = ds.enumerate().map(
            lambda i, batch: tf.cond(
                i % per_epoch == per_epoch - 1,
                lambda: (batch[0][:last], batch[1][:last]),
                lambda: batch,
            )
        )
    if not plan.repeat:
        ds = ds.take(plan.batches_per_pass())
        ds = ds.apply(tf.data.experimental.assert_cardinality(plan.batches_per_pass()))
    return ds.prefetch(tf.data.AUTOTUNE)
