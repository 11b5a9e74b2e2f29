"""Conversion on Apache Beam: one Beam element per shard, written with the local runner's code.

The driver plans as usual and writes each pending shard's items to a plan file in the work folder
(`.shardfeed/plans/<shard>.json`), so the pipeline graph carries only shard names, whatever the
dataset size. Each worker reads its plan and encodes and writes the shard with
`shards.WriteTarget.write_items`, as the local runner's workers do (partial manifest included); the driver then
merges the partial manifests exactly as for the local runner. Same inputs and seed: byte-identical
output.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import shlex
import threading
import time
from collections.abc import Iterator
from typing import Any

from shardfeed.errors import ConvertError, OptionError
from shardfeed.format import fileio, layout
from shardfeed.format.annotations import SourceObjects
from shardfeed.lazy import apache_beam, dask_distributed
from shardfeed.write.items import Item
from shardfeed.write.planning import ShardPlan
from shardfeed.write.shards import ShardResult, WriteTarget

log = logging.getLogger("shardfeed")
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"  # Beam has no short name for it
DASK_TIMEOUT = "10"  # seconds connecting to the scheduler: a scheduler that is not there is an error, not a wait


def flags_for(runner: str, beam_options: str | list[str] | None) -> list[str]:
    """The Beam flags of a conversion on `runner` ('beam' or 'dask'): for 'dask', Beam's DaskRunner
    with one shard per Dask partition (Beam's default puts up to 128 elements in one partition:
    every shard went to one worker), and a connection timeout, unless the flags set them."""
    flags = shlex.split(beam_options) if isinstance(beam_options, str) else list(beam_options or [])
    if runner != "dask":
        return flags
    if any(f.startswith("--runner=") for f in flags):
        raise OptionError("runner 'dask' sets Beam's runner itself; drop --runner= from the Beam options")
    if not any(f.startswith("--dask_client_address=") or f.startswith("--dask_scheduler_file=") for f in flags):
        raise OptionError(
            "runner 'dask' needs the scheduler: --dask-address tcp://HOST:8786 (Beam option --dask_client_address=...)"
        )
    defaults = {"--dask_partition_size": "1", "--dask_connection_timeout": DASK_TIMEOUT}
    given = {f.split("=", 1)[0] for f in flags}
    extra = [
        f"{k}={v}"
        for k, v in defaults.items()
        if k not in given and not (k == "--dask_partition_size" and "--dask_npartitions" in given)
    ]
    return [f"--runner={DASK_RUNNER}", *flags, *extra]


def write_shards(pending: list[ShardPlan], target: WriteTarget, beam_options: list[str]) -> dict[str, ShardResult]:
    """Runs the Beam pipeline that writes the `pending` shards; returns their committed results.

    Raises:
        ConvertError: the pipeline finished without committing a shard.
    """
    beam = apache_beam()
    from apache_beam.options.pipeline_options import PipelineOptions

    if not pending:
        return {}
    flags = local_runner_flags(list(beam_options))
    plan_dir = fileio.join(target.work_dir, layout.PLANS_DIR)
    fileio.makedirs(plan_dir)
    for plan in pending:
        rows = [
            [
                i.key,
                i.label,
                i.split,
                i.size,
                list(i.array_key) if i.array_key else None,
                i.mtime_ns,
                i.mask_key,
                i.labels,
                dataclasses.asdict(i.objects) if i.objects is not None else None,
                list(i.span) if i.span else None,
            ]
            for i in plan.items
        ]
        fileio.write_text_atomic(fileio.join(plan_dir, plan.file + ".json"), json.dumps(rows))
    dask = f"--runner={DASK_RUNNER}" in flags
    if dask:
        wait_for_workers(next(f.split("=", 1)[1] for f in flags if f.startswith("--dask_client_address=")))
    try:
        local = f"--runner={LOCAL_RUNNER}" in flags  # in this process: the summary says it all
        watched = contextlib.nullcontext() if local else _progress(target, len(pending))
        with watched, beam.Pipeline(options=PipelineOptions(flags)) as pipeline:
            _ = (
                pipeline
                | "Shards" >> beam.Create([(plan.split, plan.file) for plan in pending])
                | "Spread" >> beam.Reshuffle()
                | "EncodeAndWrite" >> beam.Map(_ShardWriter(target))
            )
    except OSError as e:
        if not dask:
            raise
        raise ConvertError(f"{e} (is `dask scheduler` running there, and reachable from this machine?)") from e
    done = {}
    for plan in pending:
        result = target.committed(plan.file)
        if result is None:
            raise ConvertError(f"the Beam pipeline finished without committing shard {plan.file}")
        done[plan.file] = result
    return done


WORKER_WAIT = 120.0  # seconds a Dask run waits for its first worker before it fails saying so
PROGRESS_EVERY = 10.0  # seconds between the runner's progress lines


def wait_for_workers(address: str) -> None:
    """Returns once the Dask scheduler at `address` has a worker, saying that it waits.

    Raises:
        ConvertError: none joined within WORKER_WAIT seconds (the pipeline waited silently).
    """
    distributed = dask_distributed()
    try:
        with distributed.Client(address, timeout=float(DASK_TIMEOUT)) as client:
            if client.scheduler_info()["workers"]:
                return
            log.info("dask: no worker is connected to %s yet; waiting up to %.0f s", address, WORKER_WAIT)
            try:
                client.wait_for_workers(1, timeout=WORKER_WAIT)
            except (TimeoutError, distributed.TimeoutError) as e:
                raise ConvertError(
                    f"no Dask worker connected to {address} within {WORKER_WAIT:.0f} s; start workers there "
                    f"(`dask worker {address}`), on machines that reach the source and output folders"
                ) from e
    except OSError as e:
        raise ConvertError(f"{e} (is `dask scheduler` running at {address}, and reachable from this machine?)") from e


@contextlib.contextmanager
def _progress(target: WriteTarget, total: int) -> Iterator[None]:
    """Logs 'pipeline: N of M shards written' every PROGRESS_EVERY seconds while a pipeline
    runs on a cluster, counted from the partial manifests the workers commit (a Dask run said
    nothing until it ended)."""
    stop = threading.Event()
    start = time.monotonic()

    def committed() -> int:
        return len(fileio.glob(fileio.join(target.work_dir, "parts", "*.json")))

    before = committed()  # shards kept from an earlier run

    def report() -> None:
        while not stop.wait(PROGRESS_EVERY):
            with contextlib.suppress(OSError):
                done = min(committed() - before, total)
                log.info("pipeline: %d of %d shards written (%.0f s)", done, total, time.monotonic() - start)

    log.info("pipeline: %d shards to write", total)
    thread = threading.Thread(target=report, name="shardfeed-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    log.info("pipeline: %d shards written in %.0f s", total, time.monotonic() - start)  # ended: every one


LOCAL_RUNNER = "FnApiRunner"


def local_runner_flags(flags: list[str]) -> list[str]:
    """Beam flags with the local runner made explicit: no --runner, or --runner=DirectRunner,
    becomes FnApiRunner. Beam's DirectRunner first downloads the Prism runner from the internet
    (a failed download, logged, on an offline machine) and then falls back to FnApiRunner for a
    pipeline like ours; FnApiRunner is that fallback, without the download, and honours
    --direct_num_workers and --direct_running_mode."""
    runner = [f for f in flags if f.startswith("--runner=")]
    if not runner:
        return [f"--runner={LOCAL_RUNNER}", *flags]
    if runner[-1].split("=", 1)[1] in ("DirectRunner", "SwitchingDirectRunner"):
        return [f for f in flags if not f.startswith("--runner=")] + [f"--runner={LOCAL_RUNNER}"]
    return flags


def _objects(listed: dict[str, Any] | None) -> SourceObjects | None:
    """An item's annotations from a plan file (JSON lists back to the tuples they were)."""
    return SourceObjects.of_json(listed) if listed is not None else None


class _ShardWriter:
    """The per-shard work, as a picklable callable for Beam."""

    def __init__(self, target: WriteTarget) -> None:
        self.target = target

    def __call__(self, task: tuple[str, str]) -> str:
        split, file = task
        rows = json.loads(fileio.read_bytes(fileio.join(self.target.work_dir, layout.PLANS_DIR, file + ".json")))
        items = [
            Item(
                k, label, s, size, tuple(a) if a else None, mtime, m, tuple(ls), _objects(o), tuple(sp) if sp else None
            )
            for k, label, s, size, a, mtime, m, ls, o, sp in rows
        ]
        self.target.write_items(split, file, items)
        return file
