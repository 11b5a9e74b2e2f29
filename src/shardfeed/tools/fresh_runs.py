"""Comparing pipelines fairly: each run in a fresh process, rounds interleaved, best and median.

Measured one after another in one process, pipelines bias whichever runs first: an abandoned
pipeline's threads keep using CPU (a figure in our docs came out 1.8x where fresh processes
give 1.0x). So every measurement here is `python -m shardfeed.tools.pipelines SPEC` in its own
process, the pipelines take turns (A B C, A B C, ...) so the shared machine's drift hits all
alike, and the summary gives best and median images/s with CPU time per image (the process's
user + system time in the steady state, which noisy neighbours move less than wall time).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

from shardfeed.errors import MeasurementError, OptionError
from shardfeed.tools.pipelines import PipelineSpec


def run_fresh(spec: PipelineSpec, *, timeout: float | None = None) -> dict[str, Any]:
    """One measurement of `spec` in a new Python process: its `Throughput` as a dict.

    Raises:
        RuntimeError: the process failed (its last error line is in the message).
    """
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3")}
    done = subprocess.run(
        measurement_command(spec), capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    return measurement_result(spec, done)


def measurement_command(spec: PipelineSpec) -> list[str]:
    """The command line that measures `spec` in a process of its own (tools/pipelines.py's main)."""
    return [sys.executable, "-m", "shardfeed.tools.pipelines", spec.to_json()]


def measurement_result(spec: PipelineSpec, done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The `Throughput` dict that `measurement_command(spec)`, run to `done`, printed last.

    Raises:
        RuntimeError: the process failed (its last error line is in the message).
    """
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        error = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise MeasurementError(f"measuring {spec.kind} on {spec.path} failed: {error}")
    return dict(json.loads(lines[-1]))


def compare(
    specs: Mapping[str, PipelineSpec],
    *,
    rounds: int = 3,
    progress: Callable[[str], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Measures every spec `rounds` times, one fresh process per run, in interleaved rounds.

    Returns:
        {name: summary(runs)} in the order given.
    """
    if rounds < 1:
        raise OptionError(f"rounds must be >= 1, got {rounds}")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in specs}
    for round_number in range(rounds):
        for name, spec in specs.items():
            if progress:
                progress(f"round {round_number + 1}/{rounds}: {name}")
            runs[name].append(run_fresh(spec))
    return {name: summary(rs) for name, rs in runs.items()}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Best and median images/s and the median CPU time per image of some runs of one pipeline;
    the median run's own figures stay at the top level (images, batches, warm-up, ...)."""
    rates = [r["images_per_second"] for r in runs]
    cpu_ms = [1000 * r["cpu_cores_used"] / r["images_per_second"] for r in runs]
    middle = sorted(runs, key=lambda r: r["images_per_second"])[len(runs) // 2]
    return {
        **middle,
        "best_images_per_second": max(rates),
        "median_images_per_second": statistics.median(rates),
        "cpu_ms_per_image": statistics.median(cpu_ms),
        "runs": rates,
    }


def ratio(ours: Mapping[str, Any], baseline: Mapping[str, Any]) -> dict[str, float]:
    """ours / baseline, by median and by best images/s (> 1: ours is faster), and CPU per image
    (baseline / ours: > 1 means ours spends less CPU per image).

    With runs from the same interleaved rounds, also 'paired': the median of the per-round ratios.
    Neighbouring runs share the machine's state, so the paired figure cancels the drift between
    rounds that moves both medians (on the 2-core VM the same pipeline ranges over +-25%).
    """
    result = {
        "median": ours["median_images_per_second"] / baseline["median_images_per_second"],
        "best": ours["best_images_per_second"] / baseline["best_images_per_second"],
    }
    if ours["cpu_ms_per_image"] > 0:  # a run shorter than the CPU clock's tick measures none
        result["cpu_per_image"] = baseline["cpu_ms_per_image"] / ours["cpu_ms_per_image"]
    mine, theirs = ours.get("runs"), baseline.get("runs")
    if mine and theirs and len(mine) == len(theirs):
        result["paired"] = statistics.median(a / b for a, b in zip(mine, theirs, strict=True))
    return result
