"""What `convert --append` costs against converting the grown source again from scratch.

    .venv/bin/python bench/bench_append.py [--images 2000] [--new 200] [--rounds 3] [--format keep]
                                          [--json bench/results/bench_append.json]

A source of `--images` real photo crops (bench/corpus.py) is converted without its last `--new`
images (hash split rule) once; then, rounds interleaved, each run a fresh `shardfeed convert`
process: A converts the whole grown source into an empty folder, B appends the new images to a
fresh copy of the first conversion (known inputs whose size and modification time are unchanged
are not read), C does the same with `--checksum` (every known input read and hashed again).
Reported: wall seconds and CPU seconds (the child's user + system) of each, best and median, and
B's and C's shares of A.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import build_corpus
from bench.report import emit


def timed(*args: str) -> dict[str, float]:
    """Wall and CPU seconds of one `shardfeed` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "shardfeed", *args], check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"wall_s": wall, "cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--new", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--format", default="keep")
    parser.add_argument("--work", default="/tmp/bench_append")
    parser.add_argument("--json")
    args = parser.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    files = sorted(Path(build_corpus(str(work / "all"), args.images, classes=4)).rglob("*.jpg"))
    old, source = work / "old-source", work / "source"
    for path in files:
        for root, keep in ((source, True), (old, path not in files[-args.new :])):
            if keep:
                (root / path.parent.name).mkdir(parents=True, exist_ok=True)
                os.link(path, root / path.parent.name / path.name)
    flags = ["--split-rule", "hash", "--format", args.format, "-q", "--no-report"]
    subprocess.run([sys.executable, "-m", "shardfeed", "convert", str(old), str(work / "base"), *flags], check=True)
    runs: dict[str, list[dict[str, float]]] = {"whole": [], "append": [], "append_checksum": []}
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
        shutil.rmtree(work / "whole", ignore_errors=True)
        runs["whole"].append(timed("convert", str(source), str(work / "whole"), *flags))
        for name, extra in (("append", []), ("append_checksum", ["--checksum"])):
            shutil.rmtree(work / "grown", ignore_errors=True)
            shutil.copytree(work / "base", work / "grown")
            runs[name].append(timed("convert", str(source), str(work / "grown"), *flags, "--append", *extra))
    results: dict[str, Any] = {
        "bench": "append",
        "cores": os.cpu_count(),
        "images": args.images,
        "new": args.new,
        "format": args.format,
        "rounds": args.rounds,
    }
    for name, measured in runs.items():
        results[name] = {
            "best_wall_s": min(m["wall_s"] for m in measured),
            "median_wall_s": statistics.median(m["wall_s"] for m in measured),
            "median_cpu_s": statistics.median(m["cpu_s"] for m in measured),
            "runs": measured,
        }
    for name in ("append", "append_checksum"):
        for kind in ("wall", "cpu"):
            share = results[name][f"median_{kind}_s"] / results["whole"][f"median_{kind}_s"]
            results[f"{name}_share_of_whole_{kind}"] = share
    emit(results, args.json)


if __name__ == "__main__":
    main()
