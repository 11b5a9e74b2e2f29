"""How every bench script hands over its results: JSON on stdout, and optionally in a file; the
host-wide CPU clock the feed benchmarks read (Grain's worker processes included); and one
measured epoch of a peer's batches. Standard library only: the peers' own interpreters (FFCV's
venv) import it too."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def emit(results: dict[str, Any], json_path: str | None) -> None:
    """Prints `results` as indented JSON and, given a path, writes the same text there."""
    text = json.dumps(results, indent=2)
    print(text)
    if json_path:
        Path(json_path).write_text(text + "\n")


def host_cpu_seconds() -> float:
    """CPU seconds the whole host has spent busy, all cores (/proc/stat): on an otherwise idle
    machine, a feed's CPU wherever it runs (this process and its worker processes)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def epoch_rate(batches: Iterable[Any], cpu_seconds: Callable[[], float] = time.process_time) -> dict[str, float]:
    """One pass over `batches` (tuples whose first item is the images) after two warm-up batches,
    as bench_peers' script pipelines report it: images, images/s and CPU cores used, by
    `cpu_seconds` (this process' clock; `host_cpu_seconds` where worker processes do the work)."""
    it = iter(batches)
    for _ in range(2):
        next(it)
    start, cpu0, images = time.perf_counter(), cpu_seconds(), 0
    for batch in it:
        images += len(batch[0])
    wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu0
    return {"images": images, "images_per_second": images / wall, "cpu_cores_used": cpu / wall}
