"""Throughput of a load pipeline, and the baselines it is compared with in the same run.

Used by `shardfeed bench` and by bench/bench_load.py, so the figures in docs/benchmarks.md and
those a user measures come from the same code.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.read import options
from shardfeed.read.options import ReadOptions
from shardfeed.tools import bottleneck
from shardfeed.tools.fresh_runs import compare, ratio
from shardfeed.tools.pipelines import PipelineSpec, build
from shardfeed.tools.timing import measure


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
    read: ReadOptions | None = None,
    service: str | None = None,
    rounds: int = 3,
    model: Any = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measures `load` on converted shards; with `compare_folder`, the baselines too, and ratios.

    `augment`, `read` and `service` are passed to `load` (see there). Without `compare_folder`,
    one pass in this process. With it, `load`, `image_dataset_from_directory` on the folder and
    the in-memory decode ceiling each run `rounds` times, every run in a fresh process, rounds
    interleaved (tools/fresh_runs.py): pipelines sharing a process bias each other.
    With `model` (a Keras model), also its training step on one batch of this data held in
    memory, and the verdict on which of the two limits training (tools/bottleneck.py).

    Returns:
        {'shardfeed': Throughput dict, 'settings': ..., and with compare_folder
         'keras_folder', 'decode_ceiling' (each with best/median images/s and CPU ms per image)
         and 'ratios' (shardfeed / baseline: by median, best, CPU per image and, with 2+
         rounds, paired round by round; > 1 is faster); with model, 'model' (its images/s)
         and 'verdict'}.
    """
    read = read or ReadOptions()
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
    else:
        result["settings"]["rounds"] = rounds
        result.update(_compared(spec, compare_folder, rounds, progress))
    if model is not None:
        batch = next(iter(build(dataclasses.replace(spec, training=True, service=None))))
        rate = bottleneck.model_rate(model, batch)
        result["model"] = {"images_per_second": rate}
        result["verdict"] = bottleneck.verdict(result["shardfeed"]["images_per_second"], rate)
    return result


def _compared(
    spec: PipelineSpec, compare_folder: str, rounds: int, progress: Callable[[str], None] | None
) -> dict[str, Any]:
    """`spec` and the two baselines on `compare_folder`, in fresh processes, with the ratios."""
    result: dict[str, Any] = {}
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


def _read_fields(read: ReadOptions) -> dict[str, Any]:
    """The ReadOptions fields that differ from the defaults, as JSON values for a fresh process.

    Raises:
        OptionError: a function-valued option (it cannot be sent to another process).
    """
    fields = {f.name: getattr(read, f.name) for f in dataclasses.fields(read) if getattr(read, f.name) != f.default}
    if any(callable(v) for v in fields.values()):
        raise OptionError("bench cannot measure a ReadOptions with filter_fn in a fresh process")
    return fields
