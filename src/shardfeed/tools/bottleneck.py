"""Is the accelerator waiting for data? The input pipeline's rate against the model's own.

The model's rate is measured on one batch held in memory (`take(1).cache().repeat()`), so no
input work is in it; the pipeline's rate is `load` alone (tools/timing.py). This module owns the
verdict: `shardfeed bench --model` (`tools.bench(model=...)`) and train's probe after its first
epoch (`input_probe`) both ask it. Training runs at
about the slower of the two: if that is the pipeline, more accelerator will not help, and the
ways out are smaller stored images (`convert --resize`), more CPU cores (the verdict says how
many would feed 95% of the model), decoding on other machines (`shardfeed serve` +
`load(service=...)`), or, on a GPU host, decoding JPEGs on the GPU (read/dali.py). TensorFlow's
profiler has a fuller input-pipeline analysis (TensorBoard's tf.data bottleneck analysis); this
is the one-line version.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardfeed.lazy import tensorflow
from shardfeed.tools.timing import measure

log = logging.getLogger("shardfeed")
MARGIN = 0.9  # within 10% counts as balanced
NEVER_WAITS = 0.95  # the share of the model's rate at which "the accelerator never waits"
PROBE_BATCHES = 10  # batches timed by train's probe, in a run long enough (probe_batches)
PROBE_SHARE = 0.05  # the most of a run's training steps its probe adds, down to PROBE_LEAST
PROBE_LEAST = 3  # fewer, and one slow step decides the verdict


def model_rate(model: Any, batch: tuple[Any, Any], *, steps: int = 20, warmup: int = 3) -> float:
    """Images per second of training steps of `model` on one in-memory batch; its weights,
    optimizer and metrics are as they were after.

    A model `fit` has already trained (train's probe) is timed itself, on the train function `fit`
    compiled (`_on_the_model`): a copy would be traced and compiled again, which for the detector
    took longer than its first epochs (44 s on TensorFlow, 47 on JAX). Otherwise (not compiled or
    not yet trained, or JAX's batches split between devices) a copy is trained (`_on_a_copy`).
    """
    tf = tensorflow()
    timed = _on_the_model if _trained_here(model) else _on_a_copy
    images = batch[0]
    data = tf.data.Dataset.from_tensors((images, batch[1])).cache().repeat()
    times = timed(model, data, warmup + steps)
    seconds = max(times[-1] - times[warmup - 1], 1e-9)
    return steps * int(images.shape[0]) / seconds


def _trained_here(model: Any) -> bool:
    """Whether `model` holds a train function `fit` built that this module can step: TensorFlow's
    under any strategy (the batch goes through the strategy as `fit`'s do), PyTorch's, and JAX's
    on one device."""
    import keras

    if getattr(model, "train_function", None) is None:
        return False
    return keras.backend.backend() != "jax" or keras.distribution.distribution() is None


def _on_the_model(model: Any, data: Any, count: int) -> list[float]:
    """The end times of `count` steps of `model`'s own train function on `data`, the model left as
    it was: JAX's train function is pure (it takes the variables' values and returns new ones, so
    it steps on a copy of them); TensorFlow's and PyTorch's move the variables, so every one a
    step moves (weights and seed states, the optimizer's, the metrics') is restored after."""
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        return _jax_steps(model, data, count)
    moved = [*model.variables, *model.optimizer.variables, *model.metrics_variables]
    saved = [v.numpy() for v in moved]
    if backend == "tensorflow":  # split between the replicas as fit splits it
        data = model.distribute_strategy.experimental_distribute_dataset(data)
    steps = iter(data)
    times: list[float] = []
    try:
        for _ in range(count):
            if backend == "torch":  # it takes a list of batches (its steps_per_execution)
                batch = keras.tree.map_structure(lambda t: keras.ops.convert_to_tensor(t.numpy()), next(steps))
                logs = model.train_function([batch])
                keras.ops.convert_to_numpy(logs["loss"])  # the step has run, not just been queued
            else:
                model.train_function(steps)
            times.append(time.perf_counter())
    finally:
        for variable, value in zip(moved, saved, strict=True):
            variable.assign(value)
    return times


def _jax_steps(model: Any, data: Any, count: int) -> list[float]:
    """`count` steps of a JAX model's compiled train function on copies of its variables' values
    (the function donates the state it is given); the model's own variables are never touched."""
    import jax

    groups = [model.trainable_variables, model.non_trainable_variables]  # in the order of fit's state
    groups += [model.optimizer.variables, model.metrics_variables]
    state = tuple([jax.numpy.array(v.value, copy=True) for v in group] for group in groups)
    batch = next(data.as_numpy_iterator())  # NumPy arrays, as fit's iterator hands them on the CPU
    times: list[float] = []
    for _ in range(count):
        logs, state = model.train_function(state, iter([batch]))
        jax.block_until_ready(logs)
        times.append(time.perf_counter())
    return times


def _on_a_copy(model: Any, data: Any, count: int) -> list[float]:
    """The end times of `count` training steps of a copy of `model` on `data`, with the model's own
    loss when it is compiled, else a classifier's. A model with a `compile` of its own (a KerasHub
    task: the detector, with its own losses) is copied by its class, which compiles it with them;
    `clone_model` would make a plain functional model without its loss."""
    import keras

    if type(model).compile is not keras.Model.compile:
        clone = type(model).from_config(model.get_config())
    else:
        clone = keras.models.clone_model(model)
        loss = (
            getattr(model, "loss", None) or keras.losses.SparseCategoricalCrossentropy()
        )  # its own (multi-label: BCE)
        clone.compile(optimizer=keras.optimizers.Adam(), loss=loss)
    times: list[float] = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, step: int, logs: Any = None) -> None:
            times.append(time.perf_counter())

    clone.fit(data, steps_per_epoch=count, epochs=1, verbose=0, callbacks=[Clock()])
    return times


@dataclass(frozen=True)
class Host:
    """What this host offers besides its CPUs: it decides which ways out a verdict names."""

    cores: int
    gpu: bool  # TensorFlow sees a GPU
    dali: bool  # NVIDIA DALI is installed (`make dali`): the GPU decode path can run


def this_host() -> Host:
    """The host this process runs on."""
    from shardfeed.read import dali

    gpu = bool(tensorflow().config.list_physical_devices("GPU"))
    return Host(cores=os.cpu_count() or 1, gpu=gpu, dali=dali.installed())


def cores_needed(model: float, cpu_seconds_per_image: float, share: float = NEVER_WAITS) -> float:
    """CPU cores the pipeline's decoding would need to feed `share` of the model's rate (images/s),
    from its CPU seconds per image: "how many cores for the accelerator never to wait"."""
    return share * model * cpu_seconds_per_image


def verdict(
    pipeline: float,
    model: float,
    *,
    host: Host | None = None,
    cores: float | None = None,
    gpu_decode: bool = False,
) -> str:
    """One line saying which side limits training, from the two rates in images/s.

    With `host`, the ways out named are the ones this host has (the GPU decode path where a GPU
    is visible); with `cores` (cores_needed), how many CPU cores the pipeline's work would need;
    `gpu_decode`: the pipeline already decodes on the GPU (DALI).
    """
    if pipeline < MARGIN * model:
        need = f"; {NEVER_WAITS:.0%} of it needs ~{cores:.1f} CPU cores of input work" if cores is not None else ""
        have = f" (this host has {host.cores})" if cores is not None and host is not None else ""
        return (
            f"input-bound: the pipeline delivers {pipeline:,.0f} images/s, the model consumes {model:,.0f}/s"
            f"{need}{have} — {ways_out(host, gpu_decode)}"
        )
    if model < MARGIN * pipeline:
        gpu = "; decoding on the GPU would not help" if host is not None and host.gpu else ""
        if gpu_decode:
            gpu = "; the model shares the GPU with decoding: CPU decode may free it (bench --model compares)"
        return (
            f"model-bound: the model consumes {model:,.0f} images/s, the pipeline delivers {pipeline:,.0f}/s — "
            f"input is not what limits training{gpu}"
        )
    return f"balanced: the pipeline delivers {pipeline:,.0f} images/s and the model consumes {model:,.0f}/s"


def ways_out(host: Host | None, gpu_decode: bool = False) -> str:
    """What to do when input limits training, on `host` (None: not known, the CPU-side answers);
    `gpu_decode`: decoding already runs on the GPU."""
    cpu_side = "convert --resize, more cores, or the tf.data service (shardfeed serve)"
    if gpu_decode:
        return "decoding already runs on the GPU: use convert --resize (smaller images to read and decode)"
    if host is None or not host.gpu:
        return f"use {cpu_side}"
    if not host.dali:
        return f"this host has a GPU: decode on it (make dali, then train --decode-on gpu), or use {cpu_side}"
    return f"decode on the GPU (train --decode-on gpu; bench --decode-on gpu measures it), or use {cpu_side}"


def gpu_decode_verdict(cpu: float, gpu: float, model: float) -> str:
    """One line saying whether decoding on the GPU would help, from the images/s of the CPU
    decode path, the GPU decode path and the model (the issue-28 figures (b)/(a) and (c)/(a))."""
    shares = f"GPU decode feeds {gpu / model:.2f} of the model's rate, CPU decode {cpu / model:.2f}"
    if cpu >= NEVER_WAITS * model:
        return f"{shares}: CPU decode already keeps the accelerator busy; decoding on the GPU would not help"
    if gpu < cpu / MARGIN:
        return f"{shares}: decoding on the GPU would not help here"
    return f"{shares}: decode on the GPU (train --decode-on gpu)"


def probe_batches(steps_per_epoch: int, run_steps: int) -> int:
    """Batches train's probe times in a run of `run_steps` training steps: PROBE_BATCHES, or in a
    short run fewer, so that the probe's model steps (these and one to warm up) add about
    PROBE_SHARE to the run rather than a third of it (a 6-epoch run of 7 steps an epoch took 13
    more steps, 12 s of its 93 under cProfile), but never fewer than PROBE_LEAST, nor more than an
    epoch holds."""
    share = max(PROBE_LEAST, min(PROBE_BATCHES, int(run_steps * PROBE_SHARE)))
    return max(1, min(steps_per_epoch, share))


def input_probe(make_dataset: Callable[[], Any], batches: int, *, gpu_decode: bool = False) -> Any:
    """A Keras callback that, after the first epoch, times the input pipeline alone (`batches`
    batches of a fresh `make_dataset()`) and the model's step on one in-memory batch, and logs
    the verdict. Its `verdict` is kept for the run's metrics; `seconds` is the time it took
    (not training time)."""
    import keras

    class InputProbe(keras.callbacks.Callback):
        verdict: str | None = None
        seconds = 0.0

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if self.verdict is not None:
                return
            start = time.monotonic()
            ds = make_dataset()
            pipeline = measure(ds, max_batches=batches, warmup_batches=1)
            model = model_rate(self.model, next(iter(ds)), steps=batches, warmup=1)  # fit compiled it
            cores = cores_needed(model, pipeline.cpu_cores_used / pipeline.images_per_second)
            self.verdict = verdict(
                pipeline.images_per_second, model, host=this_host(), cores=cores, gpu_decode=gpu_decode
            )
            self.seconds = time.monotonic() - start
            log.info("after the first epoch: %s", self.verdict)

    return InputProbe()
