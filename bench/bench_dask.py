"""The same conversion on the local runner, Beam's local runner and a Dask cluster of 1 and 2 workers.

    .venv/bin/python bench/bench_dask.py [--images 2000] [--shards 16] [--rounds 3] \
        [--json bench/results/bench_dask.json]

Every conversion is `shardfeed convert` in a fresh process, rounds interleaved (local, beam,
dask-1, dask-2, local, ...); the Dask cluster (a `dask scheduler` and `dask worker` processes of
one thread each, on 127.0.0.1) is started before the rounds and left running between them, as a
cluster would be. Reported per runner: best and median wall seconds and images/s, and the
per-shard overhead against the local runner ((median wall - local median wall) / shards). On
this 2-core machine the workers share the cores with each other and the driver, so the Dask
figures say what the cluster path costs, not what more machines would gain.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import build_corpus
from bench.report import emit

DASK = str(Path(sys.executable).with_name("dask"))


def start_cluster(workers: int, logs: Path, timeout: float = 60) -> tuple[str, list[subprocess.Popen[bytes]]]:
    """A scheduler and `workers` single-thread workers on loopback; returns the address and the
    processes (the scheduler first). Also the fixture of tests/test_dask_runner.py.

    Raises:
        RuntimeError: the workers did not all join within `timeout` seconds.
    """
    from distributed import Client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    log = open(logs / f"cluster-{workers}.log", "wb")  # noqa: SIM115 (lives as long as the cluster)
    procs = [
        subprocess.Popen(
            [DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"], stdout=log, stderr=log
        )
    ]
    for i in range(workers):
        cmd = [DASK, "worker", address, "--nthreads", "1", "--name", f"w{i}", "--no-nanny", "--no-dashboard"]
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=log))
    deadline = time.monotonic() + timeout
    with Client(address, timeout=timeout) as client:
        while len(client.scheduler_info()["workers"]) != workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster at {address} did not reach {workers} workers (log: {log.name})")
            time.sleep(0.2)
    return address, procs


def convert_once(source: str, out: str, shards: int, runner: list[str]) -> float:
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "shardfeed", "convert", source, out, "--shards", str(shards), "-q", "--no-report"]
    subprocess.run([*cmd, *runner], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", default="/tmp/bench_dask")
    parser.add_argument("--json")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    source = build_corpus(str(work / "src"), args.images)
    clusters = {n: start_cluster(n, work) for n in (1, 2)}
    runners = {
        "local": ["--workers", "2"],
        "beam (FnApiRunner)": ["--runner", "beam", "--beam-options", "--direct_num_workers=2"],
        **{
            f"dask, {n} worker{'s' * (n > 1)}": ["--runner", "dask", "--dask-address", a]
            for n, (a, _) in clusters.items()
        },
    }
    walls: dict[str, list[float]] = {name: [] for name in runners}
    try:
        for r in range(args.rounds):
            for name, flags in runners.items():
                print(f"round {r}: {name}", file=sys.stderr, flush=True)
                walls[name].append(convert_once(source, str(work / "out"), args.shards, flags))
    finally:
        for _, procs in clusters.values():
            for p in procs:
                p.terminate()
    local = statistics.median(walls["local"])
    results: dict[str, Any] = {
        name: {
            "wall_s_best": min(w),
            "wall_s_median": statistics.median(w),
            "images_per_s_median": args.images / statistics.median(w),
            "overhead_ms_per_shard": (statistics.median(w) - local) / args.shards * 1000,
        }
        for name, w in walls.items()
    }
    emit(
        {"bench": "dask", "images": args.images, "shards": args.shards, "rounds": args.rounds, "runners": results},
        args.json,
    )


if __name__ == "__main__":
    main()
