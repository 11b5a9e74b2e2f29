"""Is the accelerator waiting for data? The input pipeline's rate against the model's own.

The model's rate is measured on one batch held in memory (`take(1).cache().repeat()`), so no
input work is in it; the pipeline's rate is `load` alone (tools/timing.py). This module owns the
verdict: `shardfeed bench --model` (`tools.bench(model=...)`) and train's probe after its first
epoch (`input_probe`) both ask it. Training runs at
about the slower of the two: if that is the pipeline, more accelerator will not help, and the
ways out are smaller stored images (`convert --resize`), more CPU cores, or decoding on other
machines (`shardfeed serve` + `load(service=...)`). TensorFlow's profiler has a fuller
input-pipeline analysis (TensorBoard's tf.data bottleneck analysis); this is the one-line version.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from shardfeed.lazy import tensorflow
from shardfeed.tools.timing import measure

log = logging.getLogger("shardfeed")
MARGIN = 0.9  # within 10% counts as balanced
PROBE_BATCHES = 10  # batches timed by train's probe


def model_rate(model: Any, batch: tuple[Any, Any], *, steps: int = 20, warmup: int = 3) -> float:
    """Images per second of training steps of a copy of `model` on one in-memory batch.

    A clone is trained, so `model`'s weights and optimizer state are untouched.
    """
    tf = tensorflow()
    import keras

    clone = keras.models.clone_model(model)
    clone.compile(optimizer=keras.optimizers.Adam(), loss=keras.losses.SparseCategoricalCrossentropy())
    images, labels = batch[0], batch[1]
    data = tf.data.Dataset.from_tensors((images, labels)).cache().repeat()
    times: list[float] = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, step: int, logs: Any = None) -> None:
            times.append(time.perf_counter())

    clone.fit(data, steps_per_epoch=warmup + steps, epochs=1, verbose=0, callbacks=[Clock()])
    seconds = max(times[-1] - times[warmup - 1], 1e-9)
    return steps * int(images.shape[0]) / seconds


def verdict(pipeline: float, model: float) -> str:
    """One line saying which side limits training, from the two rates in images/s."""
    if pipeline < MARGIN * model:
        return (
            f"input-bound: the pipeline delivers {pipeline:,.0f} images/s, the model consumes {model:,.0f}/s — "
            "use convert --resize, more cores, or the tf.data service (shardfeed serve)"
        )
    if model < MARGIN * pipeline:
        return (
            f"model-bound: the model consumes {model:,.0f} images/s, the pipeline delivers {pipeline:,.0f}/s — "
            "input is not what limits training"
        )
    return f"balanced: the pipeline delivers {pipeline:,.0f} images/s and the model consumes {model:,.0f}/s"


def input_probe(make_dataset: Callable[[], Any], batches: int) -> Any:
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
            pipeline = measure(ds, max_batches=batches, warmup_batches=1).images_per_second
            self.verdict = verdict(pipeline, model_rate(self.model, next(iter(ds)), steps=batches))
            self.seconds = time.monotonic() - start
            log.info("after the first epoch: %s", self.verdict)

    return InputProbe()
