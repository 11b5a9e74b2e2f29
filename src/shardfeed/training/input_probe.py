"""train's one-line answer to "is the accelerator waiting for data?", after its first epoch."""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("shardfeed")
PROBE_BATCHES = 10  # batches timed by the probe


def input_probe(make_dataset: Any, batches: int) -> Any:
    """A callback that, after the first epoch, times the input pipeline alone (`batches` batches of
    a fresh `make_dataset()`) and the model's step on one in-memory batch, and logs the verdict
    (tools/bottleneck.py): is the accelerator waiting for data? Its `verdict` is kept for metrics."""
    import keras

    from shardfeed.tools.benchmark import measure
    from shardfeed.tools.bottleneck import model_rate, verdict

    class InputProbe(keras.callbacks.Callback):
        verdict: str | None = None
        seconds = 0.0  # spent probing (not training)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if self.verdict is not None:
                return
            start = time.monotonic()
            ds = make_dataset()
            pipeline = measure(ds, max_batches=batches, warmup_batches=1).images_per_second
            model = model_rate(self.model, next(iter(ds)), steps=batches)
            self.verdict = verdict(pipeline, model)
            self.seconds = time.monotonic() - start
            log.info("after the first epoch: %s", self.verdict)

    return InputProbe()
