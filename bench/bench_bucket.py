"""Reading and writing a bucket (moto's S3 server or fake-gcs-server on loopback) against the same
shards on local disk.

    .venv/bin/python bench/bench_bucket.py [--store s3|gs] [--images 2000] [--shards 16] [--rounds 3] [--json F]

Training reads (`load`, 224 px, augmentation on, one epoch) of one split, each in a fresh
process, rounds interleaved: local disk; the bucket through a warm shard cache (filled once
before the rounds); the bucket through an empty cache (a new cache folder each round: the cold
first epoch, fetching while training). Reported per pipeline: best and median images/s, CPU ms
per image, and the ratios to local disk (median, best, paired per round). Then `convert` into
the bucket vs into a local folder (fresh processes, interleaved; wall seconds). Last, a check:
reading the split 3 epochs through a cache limited to a third of it, with the cache folder's
disk use sampled every 2 ms: its peak against the limit plus the fetches in flight.

The S3 server is a Python process (fake-gcs-server a Go one) on the same 2 cores, so the bucket
figures include its CPU too: a real store is elsewhere, farther away and faster per connection.
"""

from __future__ import annotations

import argparse
import os
import shutil
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
from bench.store_servers import gcs_environment, peak_usage, s3_environment, start_gcs, start_s3, stop
from shardfeed.format import storage
from shardfeed.tools.fresh_runs import ratio, run_fresh, summary
from shardfeed.tools.pipelines import PipelineSpec


def _convert(source: str, out: str, shards: int) -> float:
    """Wall seconds of one `shardfeed convert` in a fresh process (into an emptied folder)."""
    if "://" in out:
        fs, path = storage.filesystem(out)
        if fs.exists(path):
            fs.rm(path, recursive=True)
    else:
        shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "shardfeed", "convert", source, out, "--shards", str(shards), "-q", "--no-report"]
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


def _reads(local: str, url: str, work: Path, rounds: int) -> dict[str, Any]:
    """local / warm cache / cold cache training reads, fresh processes, interleaved."""

    def spec(path: str, cache: str | None = None) -> PipelineSpec:
        return PipelineSpec("shardfeed", path, read={"cache_dir": cache} if cache else {})

    warm = str(work / "cache-warm")
    run_fresh(spec(url, warm))  # fills the warm cache
    runs: dict[str, list[dict[str, Any]]] = {"local disk": [], "bucket, warm cache": [], "bucket, cold cache": []}
    for r in range(rounds):
        cold = work / f"cache-cold-{r}"
        shutil.rmtree(cold, ignore_errors=True)
        for name, s in (
            ("local disk", spec(local)),
            ("bucket, warm cache", spec(url, warm)),
            ("bucket, cold cache", spec(url, str(cold))),
        ):
            print(f"round {r}: {name}", file=sys.stderr, flush=True)
            runs[name].append(run_fresh(s))
    results = {name: summary(rs) for name, rs in runs.items()}
    for name in ("bucket, warm cache", "bucket, cold cache"):
        results[name]["vs_local"] = ratio(results[name], results["local disk"])
    return results


def _bounded_cache(url: str, work: Path, local: str) -> dict[str, Any]:
    """3 epochs through a cache a third of the split: peak disk use vs limit + fetches in flight."""
    from shardfeed import ReadOptions, load
    from shardfeed.read.remote.feed import FETCH_THREADS

    shards = sorted(Path(local).glob("train-*"))
    split_bytes, largest = sum(p.stat().st_size for p in shards), max(p.stat().st_size for p in shards)
    limit = max(split_bytes // 3, 4 * largest)
    cache = work / "cache-bounded"
    shutil.rmtree(cache, ignore_errors=True)
    read = ReadOptions(cache_dir=str(cache), cache_limit=limit, drop_remainder=False)
    with peak_usage(cache) as peak:
        ds = load(url, batch_size=64, image_size=64, seed=0, read=read, augment=False)
        images = [sum(int(b[0].shape[0]) for b in ds) for _ in range(3)]
    return {
        "split_bytes": split_bytes,
        "cache_limit": limit,
        "largest_shard": largest,
        "peak_cache_bytes": peak[0],
        "limit_plus_in_flight": limit + FETCH_THREADS * largest,
        "images_per_epoch": images,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", default="/tmp/bench_bucket")
    parser.add_argument("--store", choices=["s3", "gs"], default="s3", help="moto's S3 server or fake-gcs-server")
    parser.add_argument("--json")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    source = build_corpus(str(work / "src"), args.images)
    start, environment = (start_s3, s3_environment) if args.store == "s3" else (start_gcs, gcs_environment)
    endpoint, server = start(work)
    os.environ.update(environment(endpoint))
    try:
        local, url = str(work / "local"), f"{args.store}://bench/out"
        storage.filesystem(url)[0].mkdir("bench")
        converts: dict[str, list[float]] = {"local disk": [], "bucket": []}
        for r in range(args.rounds):
            for name, out in (("local disk", local), ("bucket", url)):
                print(f"round {r}: convert into {name}", file=sys.stderr, flush=True)
                converts[name].append(_convert(source, out, args.shards))
        reads = _reads(local, url, work, args.rounds)
        bounded = _bounded_cache(url, work, local)
    finally:
        stop(server)
    emit(
        {
            "bench": "bucket",
            "store": {"s3": "moto's S3 server", "gs": "fake-gcs-server"}[args.store],
            "images": args.images,
            "shards": args.shards,
            "rounds": args.rounds,
            "reads": reads,
            "convert_wall_s": {
                name: {"best": min(w), "median": statistics.median(w), "runs": w} for name, w in converts.items()
            },
            "bounded_cache": bounded,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
