"""Throughput of a load pipeline, and the baselines it is compared with in the same run.

Used by `shardfeed bench` and by bench/bench_load.py, so the figures in docs/benchmarks.md and
those a user measures come from the same code.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any

from shardfeed.lazy import tensorflow
from shardfeed.read import options
from shardfeed.read.options import ReadConfig


@dataclass(frozen=True)
class Throughput:
    """What one measured pass delivered.

    Attributes:
        images, batches: delivered after the warm-up batches.
        warmup_seconds: time to the end of the warm-up batches (start-up, tracing, first fills).
        images_per_second, batches_per_second: steady state, after warm-up.
        cpu_cores_used: process CPU time / wall time during the steady state.
    """

    images: int
    batches: int
    warmup_seconds: float
    images_per_second: float
    batches_per_second: float
    cpu_cores_used: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure(ds: Any, *, max_batches: int | None = None, warmup_batches: int = 2) -> Throughput:
    """Iterates `ds` (batches of (images, labels) or images) and times it."""
    start = time.perf_counter()
    iterator = iter(ds)
    for _ in range(warmup_batches):
        next(iterator)
    warm = time.perf_counter()
    cpu0 = sum(os.times()[:2])
    images = batches = 0
    for batch in iterator:
        first = batch[0] if isinstance(batch, tuple) else batch
        images += int(first.shape[0])
        batches += 1
        if max_batches is not None and batches >= max_batches:
            break
    wall = max(time.perf_counter() - warm, 1e-9)
    cpu = sum(os.times()[:2]) - cpu0
    return Throughput(images, batches, warm - start, images / wall, batches / wall, cpu / wall)


def image_files(folder: str) -> list[str]:
    """Image files below a folder, sorted."""
    found: list[str] = []
    for directory, _, names in os.walk(folder):
        found.extend(os.path.join(directory, n) for n in names if not n.startswith("."))
    return sorted(found)


def decode_ceiling(
    folder: str, *, image_size: tuple[int, int], batch_size: int, training: bool, epochs: int = 1
) -> Throughput:
    """The same JPEG bytes already in memory, decoded and augmented by tf.data with AUTOTUNE.

    Uses the same per-image decode/augment functions as `load`, so only the reading differs.
    """
    tf = tensorflow()
    from shardfeed.format.schema import Schema
    from shardfeed.read.augment import Augment
    from shardfeed.read.decode import Preprocess, decode_one

    blobs = []
    for path in image_files(folder):
        with open(path, "rb") as f:
            blobs.append(f.read())
    preprocess = Preprocess(image_size, Augment() if training else None)  # load's default DecodeConfig
    zero = tf.constant(0, tf.int64)
    ds = tf.data.Dataset.zip((tf.data.Dataset.from_tensor_slices(blobs), tf.data.Dataset.random(seed=0).batch(2)))
    ds = ds.map(
        lambda data, seed: decode_one(data, zero, zero, zero, seed, schema=Schema(), options=preprocess),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=False,
    )
    ds = ds.batch(batch_size, drop_remainder=True).repeat(epochs).prefetch(tf.data.AUTOTUNE)
    return measure(ds)


def keras_folder(folder: str, *, image_size: tuple[int, int], batch_size: int, epochs: int = 1) -> Throughput:
    """`tf.keras.utils.image_dataset_from_directory` on the original folder."""
    tf = tensorflow()
    ds = tf.keras.utils.image_dataset_from_directory(
        folder, image_size=image_size, batch_size=batch_size, verbose=False
    )
    return measure(ds.repeat(epochs).prefetch(tf.data.AUTOTUNE))


def bench(
    path: str,
    *,
    split: str = "train",
    batch_size: int = 64,
    image_size: int | tuple[int, int] = 224,
    training: bool | None = None,
    epochs: int = 1,
    compare_folder: str | None = None,
    augment: bool | None = None,
    read: ReadConfig | None = None,
    service: str | None = None,
) -> dict[str, Any]:
    """Measures `load` on converted shards; with `compare_folder`, the baselines too, and ratios.

    `augment`, `read` and `service` are passed to `load` (see there).

    Returns:
        {'shardfeed': Throughput dict, 'settings': ..., and with compare_folder
         'keras_folder', 'decode_ceiling' and 'ratios' (shardfeed / baseline, > 1 is faster)}.
    """
    from shardfeed.read.dataset import load

    read = read or ReadConfig()
    size = options.image_size(image_size)
    training = (split == "train") if training is None else training
    ds = load(
        path,
        split=split,
        batch_size=batch_size,
        image_size=size,
        training=training,
        augment=augment,
        read=read,
        service=service,
    )
    ours = measure(ds.repeat(epochs))
    result: dict[str, Any] = {
        "settings": {
            "path": path,
            "split": split,
            "batch_size": batch_size,
            "image_size": list(size),
            "training": training,
            "epochs": epochs,
            "shuffle": read.order,
            "cores": os.cpu_count(),
            "service": service,
        },
        "shardfeed": ours.as_dict(),
    }
    if compare_folder:
        kf = keras_folder(compare_folder, image_size=size, batch_size=batch_size, epochs=epochs)
        ceiling = decode_ceiling(
            compare_folder, image_size=size, batch_size=batch_size, training=training, epochs=epochs
        )
        result["keras_folder"] = kf.as_dict()
        result["decode_ceiling"] = ceiling.as_dict()
        result["ratios"] = {
            "vs_keras_folder": ours.images_per_second / kf.images_per_second,
            "vs_decode_ceiling": ours.images_per_second / ceiling.images_per_second,
        }
    return result
