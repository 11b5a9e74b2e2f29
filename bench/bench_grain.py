"""`grain_dataset` (no TensorFlow) against `load` on the same shards, in the same global order.

    .venv/bin/python bench/bench_grain.py [--images 2000] [--rounds 3] [--threads 4] [--workers N]
                                          [--json bench/results/bench_grain.json]

2,000 real-photo JPEGs (bench/corpus.py) converted into 16 shards; one training epoch at 224 px,
batch 64, random-resized crop and flip, global order, seed 0; each pipeline in a fresh process,
rounds interleaved; images/s after 2 warm-up batches and CPU ms per image (all threads).
`--workers N` adds `grain_dataset(num_workers=N, num_threads=1)`, Grain worker processes; its
CPU is the whole host's busy CPU over the run (/proc/stat), so the workers' is counted: run it
on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import build_corpus
from bench.report import emit
from shardfeed.tools.fresh_runs import ratio, run_fresh, summary
from shardfeed.tools.pipelines import PipelineSpec

GRAIN = """import json, sys, time
import shardfeed
from bench.report import host_cpu_seconds
threads, workers = int(sys.argv[2]), int(sys.argv[3])
ds = shardfeed.grain_dataset(
    sys.argv[1], batch_size=64, image_size=224, seed=0, num_threads=threads, num_workers=workers
)
cpu_seconds = host_cpu_seconds if workers else time.process_time
it = iter(ds)
start = time.perf_counter()
for _ in range(2):
    next(it)
warm = time.perf_counter()
cpu0 = cpu_seconds()
images = batches = 0
for x, y in it:
    images += len(x)
    batches += 1
wall = time.perf_counter() - warm
cpu = cpu_seconds() - cpu0
print(json.dumps({"images": images, "batches": batches, "warmup_seconds": warm - start,
                  "images_per_second": images / wall, "batches_per_second": batches / wall,
                  "cpu_cores_used": cpu / wall}))
"""


def _grain(path: str, threads: int, workers: int = 0) -> dict[str, Any]:
    cmd = [sys.executable, "-c", GRAIN, path, str(threads), str(workers)]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # `from bench.report import ...`
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=root)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--workers", type=int, default=0, help="also grain_dataset in this many worker processes")
    parser.add_argument("--work", default="/tmp/bench_grain")
    parser.add_argument("--json")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    source = build_corpus(str(work / "images"), args.images)
    data = work / "data"
    shutil.rmtree(data, ignore_errors=True)
    cmd = [sys.executable, "-m", "shardfeed", "convert", source, str(data), "--shards", "16", "-q", "--no-report"]
    subprocess.run(cmd, check=True, capture_output=True)
    spec = PipelineSpec("shardfeed", str(data), read={"shuffle": "global"})
    names = ["load", "grain_dataset"] + (["grain_workers"] if args.workers else [])
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            print(f"round {r}: {name}", file=sys.stderr, flush=True)
            if name == "load":
                runs[name].append(run_fresh(spec))
            elif name == "grain_dataset":
                runs[name].append(_grain(str(data), args.threads))
            else:
                runs[name].append(_grain(str(data), 1, args.workers))
    results = {name: summary(rs) for name, rs in runs.items()}
    for name in names[1:]:
        results[name]["vs_load"] = ratio(results[name], results["load"])
    settings = {"images": args.images, "rounds": args.rounds, "threads": args.threads, "workers": args.workers}
    emit({"bench": "grain", **settings, "load_average": list(os.getloadavg()), **results}, args.json)


if __name__ == "__main__":
    main()
