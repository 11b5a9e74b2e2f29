"""Throughput of a load pipeline, and the baselines it is compared with in the same run.

Used by `shardfeed bench` and by bench/bench_load.py, so the figures in docs/benchmarks/load.md and
those a user measures come from the same code.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.format import manifest
from shardfeed.read import options
from shardfeed.read.options import BATCH_SIZE, IMAGE_SIZE, DecodeOptions, ReadOptions
from shardfeed.tools import bottleneck
from shardfeed.tools.fresh_runs import compare, ratio
from shardfeed.tools.pipelines import PARSE_BATCH, PipelineSpec, build
from shardfeed.tools.timing import measure


def bench(
    path: str,
    *,
    split: str = "train",
    batch_size: int = BATCH_SIZE,
    image_size: int | tuple[int, int] = IMAGE_SIZE,
    training: bool | None = None,
    epochs: int = 1,
    compare_folder: str | None = None,
    augment: bool | None = None,
    read: ReadOptions | None = None,
    decode: DecodeOptions | None = None,
    service: str | None = None,
    rounds: int = 3,
    model: Any = None,
    dali_feed: bool | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measures `load` on converted shards; with `compare_folder`, the baselines too, and ratios.

    `augment`, `read`, `decode` and `service` are passed to `load` (see there). Alone, one pass
    in this process. With `compare_folder`, `load`, `image_dataset_from_directory` on the folder
    and the in-memory decode ceiling each run `rounds` times, every run in a fresh process, rounds
    interleaved (tools/fresh_runs.py): pipelines sharing a process bias each other.
    With `model` (a Keras model), also its training step on one batch of this data held in
    memory, the verdict on which of the two limits training and how many cores CPU decoding
    would need for 95% of the model's rate (tools/bottleneck.py). `progress` gets one line as
    each measurement starts (they can take minutes). `dali_feed` (default: when a
    GPU is visible and DALI is installed) also measures the DALI decode path the same way, in
    fresh processes interleaved with `load` (on the GPU; DALI's CPU mode where none is visible),
    and says whether it would help.

    Returns:
        {'shardfeed': Throughput dict, 'settings': ..., and with compare_folder
            'keras_folder', 'decode_ceiling' (each with best/median images/s and CPU ms per image)
            and 'ratios' (shardfeed / baseline: by median, best, CPU per image and, with 2+
            rounds, paired round by round; > 1 is faster); with model, 'model' (its images/s and
            the cores for 0.95), 'feeds' (each pipeline's images/s as a share of the model's) and
            'verdict'; with the DALI feed, 'dali' and 'gpu_decode' (its verdict)}.
    """
    read, decode = read or ReadOptions(), decode or DecodeOptions()
    size = options.image_size(image_size)
    training = (split == "train") if training is None else training
    host = bottleneck.this_host() if model is not None else None
    result: dict[str, Any] = {
        "settings": {
            "path": path,
            "split": split,
            "batch_size": batch_size,
            "image_size": list(size),
            "training": training,
            "epochs": epochs,
            "shuffle": read.order,
            "decoder": decode.decoder,
            "cores": os.cpu_count(),
            "service": service,
        },
    }
    spec = PipelineSpec(
        "shardfeed", path, split, batch_size, size, training, augment, epochs,
        _fields(read, "ReadOptions"), _fields(decode, "DecodeOptions"), service=service,
    )  # fmt: skip
    specs = _specs(spec, decode, compare_folder, host, dali_feed)
    say = progress or (lambda message: None)
    if len(specs) == 1:
        say(f"timing load: {epochs} epoch(s) of the {split!r} split in this process")
        result["shardfeed"] = measure(build(spec)).as_dict()
    else:
        result["settings"]["rounds"] = rounds
        result.update(compare(specs, rounds=rounds, progress=progress))
    if compare_folder:
        baselines = ("keras_folder", "decode_ceiling")
        result["ratios"] = {f"vs_{name}": ratio(result["shardfeed"], result[name]) for name in baselines}
    if model is not None and host is not None:
        say("timing the model's training step on one batch held in memory")
        result.update(_against_model(result, spec, decode, model, host))
    return result


BREAKDOWN = {
    "raw_read": "shards read by TFRecordDataset alone (no CRC check, no parse)",
    "parse": "load's checked reading (CRC, framing) and parsing, no decode",
    "memory_decode": "the stored images decoded whole from memory: the decode limit",
    "memory_records": "records parsed up front, then load's per-record decoder in memory (crop-window decode, resize)",
    "shardfeed": "load, all of it",
}


def breakdown(
    path: str,
    *,
    split: str = "train",
    batch_size: int = BATCH_SIZE,
    image_size: int | tuple[int, int] = IMAGE_SIZE,
    augment: bool | None = None,
    rounds: int = 3,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Where `load`'s CPU per training image goes: each stage of BREAKDOWN measured as a
    pipeline of its own, every run in a fresh process, rounds interleaved; then the differences
    between them (reading and parsing; per-record decode over the whole-image decode; what the
    full pipeline adds over its per-record work) and load's CPU per image over the decode limit's.

    The in-memory stages hold the split's first `pipelines.IN_MEMORY` records; CPU per image
    is what is compared, so their smaller set matters little.

    Returns:
        {'stages': {stage: summary (best/median images/s, cpu_ms_per_image)}, 'cpu_ms_per_image':
         {part: ms}, 'load_over_decode_limit': load's CPU per image / memory_decode's, 'settings'}.
    """
    size = options.image_size(image_size)
    base = PipelineSpec("shardfeed", path, split, batch_size, size, True, augment)
    specs = {kind: dataclasses.replace(base, kind=kind) for kind in BREAKDOWN}
    records = manifest.read(path).split(split).num_records
    for kind in ("raw_read", "parse"):  # cheap per record: enough passes for 20 batches to time
        specs[kind] = dataclasses.replace(specs[kind], epochs=max(1, math.ceil(20 * PARSE_BATCH / max(records, 1))))
    stages = compare(specs, rounds=rounds, progress=progress)
    cpu = {kind: stages[kind]["cpu_ms_per_image"] for kind in BREAKDOWN}
    parts = {
        "read_and_check": cpu["parse"],
        "of_which_raw_read": cpu["raw_read"],
        "decode_whole_image": cpu["memory_decode"],
        "per_record_decode": cpu["memory_records"],
        "per_record_over_whole_decode": cpu["memory_records"] - cpu["memory_decode"],
        "pipeline_over_per_record": cpu["shardfeed"] - cpu["memory_records"],
        "pipeline_over_per_record_and_reading": cpu["shardfeed"] - cpu["memory_records"] - cpu["parse"],
        "load": cpu["shardfeed"],
    }
    return {
        "settings": {"path": path, "split": split, "batch_size": batch_size, "image_size": list(size)}
        | {"rounds": rounds, "cores": os.cpu_count(), "load_average": list(os.getloadavg())},
        "stages": stages,
        "cpu_ms_per_image": parts,
        "load_over_decode_limit": cpu["shardfeed"] / cpu["memory_decode"],
    }


def _specs(
    spec: PipelineSpec,
    decode: DecodeOptions,
    compare_folder: str | None,
    host: bottleneck.Host | None,
    dali_feed: bool | None,
) -> dict[str, PipelineSpec]:
    """What `bench` measures: `spec`, the baselines on `compare_folder`, and the DALI feed (with a
    model, on a host with a GPU and DALI, or when asked)."""
    specs = {"shardfeed": spec}
    if compare_folder:
        for kind in ("keras_folder", "decode_ceiling"):
            specs[kind] = dataclasses.replace(spec, kind=kind, path=compare_folder, read={}, decode={}, service=None)
    if host is not None and decode.decoder == "tf" and (dali_feed if dali_feed is not None else host.gpu and host.dali):
        dali_decode = dataclasses.replace(decode, decoder="dali", device="gpu" if host.gpu else "cpu")
        specs["dali"] = dataclasses.replace(spec, decode=_fields(dali_decode, "DecodeOptions"))
    return specs


def _against_model(
    result: dict[str, Any], spec: PipelineSpec, decode: DecodeOptions, model: Any, host: bottleneck.Host
) -> dict[str, Any]:
    """The model's rate on one batch of `spec` (decoded on the CPU, same shape), each measured
    feed's share of it, and the verdicts."""
    on_cpu = _fields(dataclasses.replace(decode, decoder="tf"), "DecodeOptions")
    batch = next(iter(build(dataclasses.replace(spec, training=True, decode=on_cpu, service=None))))
    rate = bottleneck.model_rate(model, batch)
    gpu_decode = decode.decoder == "dali"
    ours = result["shardfeed"]
    cores = bottleneck.cores_needed(rate, ours["cpu_cores_used"] / ours["images_per_second"])
    feeds = {name: result[name]["images_per_second"] for name in ("shardfeed", "dali") if name in result}
    answer: dict[str, Any] = {
        "model": {"images_per_second": rate, f"cores_for_{bottleneck.NEVER_WAITS}": cores},
        "feeds": {name: {"images_per_second": r, "of_model": r / rate} for name, r in feeds.items()},
        "verdict": bottleneck.verdict(feeds["shardfeed"], rate, host=host, cores=cores, gpu_decode=gpu_decode),
    }
    if "dali" in feeds:
        answer["gpu_decode"] = bottleneck.gpu_decode_verdict(feeds["shardfeed"], feeds["dali"], rate)
    return answer


def _fields(chosen: ReadOptions | DecodeOptions, name: str) -> dict[str, Any]:
    """The fields of an options object that differ from the defaults, as JSON values for a fresh
    process.

    Raises:
        OptionError: a function-valued option (it cannot be sent to another process).
    """
    fields = {
        f.name: getattr(chosen, f.name) for f in dataclasses.fields(chosen) if getattr(chosen, f.name) != f.default
    }
    functions = [key for key, value in fields.items() if callable(value)]
    if functions:
        raise OptionError(f"bench cannot measure a {name} with {functions[0]} in a fresh process")
    return fields
