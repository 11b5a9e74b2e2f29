"""Timing a dataset: images and batches per second after a warm-up, and the CPU it used.

The one timer behind `shardfeed bench`, the fresh-process comparisons (tools/pipelines.py) and
train's input probe, so every figure is measured the same way.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from shardfeed.errors import SourceError


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
    """Iterates `ds` (batches of (images, labels) or images) and times it.

    Raises:
        SourceError: `ds` yields fewer batches than the warm-up needs (nothing left to time).
    """
    start = time.perf_counter()
    iterator = iter(ds)
    for done in range(warmup_batches):
        if next(iterator, None) is None:
            raise SourceError(
                f"the dataset yields only {done} batches, too few to time (the first {warmup_batches} are warm-up "
                "and training batches drop the remainder): use a smaller --batch-size or more --epochs"
            )
    warm = time.perf_counter()
    cpu0 = time.process_time()  # all threads; os.times() ticks in 10 ms, more than a short run takes
    images = batches = 0
    for batch in iterator:
        first = batch[0] if isinstance(batch, tuple) else batch
        images += int(first.shape[0])
        batches += 1
        if max_batches is not None and batches >= max_batches:
            break
    wall = max(time.perf_counter() - warm, 1e-9)
    cpu = time.process_time() - cpu0
    return Throughput(images, batches, warm - start, images / wall, batches / wall, cpu / wall)
