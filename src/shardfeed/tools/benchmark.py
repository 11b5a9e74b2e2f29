"""Throughput of a load pipeline, and the baselines it is compared with in the same run.

Used by `shardfeed bench` and by bench/bench_load.py, so the figures in docs/benchmarks.md and
those a user measures come from the same code.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from shardfeed.read import options
from shardfeed.read.options import ReadConfig
from shardfeed.tools.fresh_runs import compare, ratio
from shardfeed.tools.pipelines import PipelineSpec, build


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
    rounds: int = 3,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measures `load` on converted shards; with `compare_folder`, the baselines too, and ratios.

    `augment`, `read` and `service` are passed to `load` (see there). Without `compare_folder`,
    one pass in this process. With it, `load`, `image_dataset_from_directory` on the folder and
    the in-memory decode ceiling each run `rounds` times, every run in a fresh process, rounds
    interleaved (tools/fresh_runs.py): pipelines sharing a process bias each other.

    Returns:
        {'shardfeed': Throughput dict, 'settings': ..., and with compare_folder
         'keras_folder', 'decode_ceiling' (each with best/median images/s and CPU ms per image)
         and 'ratios' (shardfeed / baseline: by median, best, CPU per image and, with 2+
         rounds, paired round by round; > 1 is faster)}.
    """
    read = read or ReadConfig()
    size = options.image_size(image_size)
    training = (split == "train") if training is None else training
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
    }
    spec = PipelineSpec(
        "shardfeed", path, split, batch_size, size, training, augment, epochs, _read_fields(read), service=service
    )
    if not compare_folder:
        result["shardfeed"] = measure(build(spec)).as_dict()
        return result
    result["settings"]["rounds"] = rounds
    specs = {
        "shardfeed": spec,
        "keras_folder": dataclasses.replace(spec, kind="keras_folder", path=compare_folder, read={}, service=None),
        "decode_ceiling": dataclasses.replace(spec, kind="decode_ceiling", path=compare_folder, read={}, service=None),
    }
    measured = compare(specs, rounds=rounds, progress=progress)
    result.update(measured)
    result["ratios"] = {
        f"vs_{name}": ratio(measured["shardfeed"], measured[name]) for name in ("keras_folder", "decode_ceiling")
    }
    return result


def _read_fields(read: ReadConfig) -> dict[str, Any]:
    """The ReadConfig fields that differ from the defaults, as JSON values for a fresh process.

    Raises:
        ValueError: a function-valued option (it cannot be sent to another process).
    """
    fields = {f.name: getattr(read, f.name) for f in dataclasses.fields(read) if getattr(read, f.name) != f.default}
    if any(callable(v) for v in fields.values()):
        raise ValueError("bench cannot measure a ReadConfig with filter_fn in a fresh process")
    return fields
