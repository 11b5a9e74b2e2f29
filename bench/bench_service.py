"""In-process `load` vs the same pipeline through the tf.data service with 1 and 2 local workers.

    .venv/bin/python bench/bench_service.py [--images 2000] [--rounds 3] [--json bench/results/bench_service.json]

Every measurement is a fresh client process (and, for the service, a fresh dispatcher and fresh
worker processes started through `shardfeed serve`), rounds interleaved (A B C, A B C, ...).
Two sizes: 224 px photos (decode-bound: what users run) and 32 px thumbnails of the same JPEGs
stored small (`--resize 32`: the per-batch transfer overhead dominates). On one 2-core machine the
service cannot be faster — the workers share the trainer's cores and add serialisation and gRPC
— so the figures are its overhead, as a ratio to in-process.

CPU per image counts the client and the workers (from /proc), so moving work to the workers
does not hide it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import build_corpus
from bench.report import emit

CLIENT = """
import json, os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
from shardfeed import load
from shardfeed.tools.timing import measure
path, size, batches, service = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] or None
ds = load(path, split="train", batch_size=64, image_size=size, training=True, repeat=True, service=service)
t = measure(ds, max_batches=batches, warmup_batches=3)
print(json.dumps({"images_per_second": t.images_per_second, "client_cpu": t.cpu_cores_used / t.images_per_second,
                  "wall": t.images / t.images_per_second}))
"""


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardfeed", "serve", *args], stderr=subprocess.PIPE, text=True, bufsize=1
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("serving tf.data"):
            return proc, line.split(" at ")[1].split()[0]
    raise RuntimeError(f"serve {args} did not start")


def run_once(shards: str, size: int, batches: int, workers: int) -> dict[str, float]:
    """One fresh measurement: in-process (workers=0) or through a fresh service with `workers`."""
    procs: list[subprocess.Popen[str]] = []
    service = ""
    try:
        if workers:
            dispatcher, service = _serve("dispatcher", "--port", "0")
            procs = [dispatcher] + [
                _serve("worker", "--dispatcher", service.split("://")[1])[0] for _ in range(workers)
            ]
            time.sleep(2)  # registration
        before = sum(_cpu_seconds(p.pid) for p in procs[1:])
        done = subprocess.run(
            [sys.executable, "-c", CLIENT, shards, str(size), str(batches), service],
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(done.stdout.strip().splitlines()[-1])
        worker_cpu = sum(_cpu_seconds(p.pid) for p in procs[1:]) - before
        images = result["images_per_second"] * result["wall"]
        result["cpu_ms_per_image"] = 1000 * (result.pop("client_cpu") + worker_cpu / max(images, 1))
        return result
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    from shardfeed import ConvertOptions, ImageOptions, convert

    with tempfile.TemporaryDirectory() as tmp:
        corpus = build_corpus(os.path.join(tmp, "corpus"), args.images)
        shards = {
            224: os.path.join(tmp, "full"),
            32: os.path.join(tmp, "small"),
        }
        convert(corpus, shards[224], ConvertOptions(shards=16), progress=False)
        convert(corpus, shards[32], ConvertOptions(shards=16, image=ImageOptions(resize=32)), progress=False)
        configs = {"in_process": 0, "service_1_worker": 1, "service_2_workers": 2}
        runs: dict[str, dict[str, list[dict[str, float]]]] = {str(s): {c: [] for c in configs} for s in shards}
        for size, folder in shards.items():
            batches = 2 * args.images // 64
            for _ in range(args.rounds):
                for name, workers in configs.items():
                    runs[str(size)][name].append(run_once(folder, size, batches, workers))
    results: dict[str, dict[str, dict[str, float]]] = {}
    for size, by_config in runs.items():
        results[size] = {}
        base = statistics.median(r["images_per_second"] for r in by_config["in_process"])
        for name, rs in by_config.items():
            rates = [r["images_per_second"] for r in rs]
            results[size][name] = {
                "best_images_per_second": max(rates),
                "median_images_per_second": statistics.median(rates),
                "median_vs_in_process": statistics.median(rates) / base,
                "cpu_ms_per_image": statistics.median(r["cpu_ms_per_image"] for r in rs),
            }
        per_batch_in = 64 / results[size]["in_process"]["median_images_per_second"]
        per_batch_svc = 64 / results[size]["service_1_worker"]["median_images_per_second"]
        results[size]["service_overhead_ms_per_batch"] = {"one_worker": 1000 * (per_batch_svc - per_batch_in)}
    emit(
        {"bench": "service", "images": args.images, "rounds": args.rounds, "cores": os.cpu_count(), **results},
        args.json,
    )


if __name__ == "__main__":
    main()
