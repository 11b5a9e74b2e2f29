"""Two versions of the code, same work: is a refactor's load and convert speed unchanged?

    git worktree add /tmp/before <old commit>
    .venv/bin/python bench/bench_versions.py --old-src /tmp/before/src [--images 2000] [--rounds 6]

Every run is a fresh process (`python -m shardfeed.tools.pipelines SPEC` for load, `python -m
shardfeed convert` for conversion), the old code put first on PYTHONPATH for its runs; versions
take turns, the order swapped every round (old new, new old, ...: on this machine the second of
two back-to-back runs is often the faster), and the summary gives best and median images/s, CPU ms per
image and the paired ratio new/old (the median of the per-round ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import build_corpus
from shardfeed.tools.fresh_runs import ratio, run_fresh, summary
from shardfeed.tools.pipelines import PipelineSpec

NEW_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def _with_src(src: str) -> None:
    """Later child processes import shardfeed from `src`."""
    os.environ["PYTHONPATH"] = src


def convert_run(src: str, source: str, out: str) -> dict[str, Any]:
    """One conversion in a fresh process: images/s and the CPU its process used per wall second."""
    shutil.rmtree(out, ignore_errors=True)
    _with_src(src)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "shardfeed", "convert", source, out, "-q", "--workers", "2", "--no-report"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(os.path.join(out, "manifest.json")) as f:
        images = sum(split["num_records"] for split in json.load(f)["splits"].values())
    return {"images_per_second": images / wall, "cpu_cores_used": cpu / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-src", required=True, help="the old version's src folder")
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--only", help="comma-separated subset of load_train,load_eval,load_global,convert")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="shardfeed-versions-")
    source = build_corpus(os.path.join(work, "corpus"), args.images)
    _with_src(NEW_SRC)
    shards = os.path.join(work, "shards")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "shardfeed",
            "convert",
            source,
            shards,
            "-q",
            "--split",
            "train=0.8,validation=0.2",
            "--shards",
            "train=8,validation=2",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    specs = {
        "load_train": PipelineSpec("shardfeed", shards, "train", epochs=2),
        "load_eval": PipelineSpec("shardfeed", shards, "validation", training=False, epochs=4),
        "load_global": PipelineSpec("shardfeed", shards, "train", read={"shuffle": "global"}, epochs=2),
    }
    names = args.only.split(",") if args.only else [*specs, "convert"]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {n: {"old": [], "new": []} for n in names}
    for number in range(args.rounds):
        versions = [("old", args.old_src), ("new", NEW_SRC)][:: 1 if number % 2 == 0 else -1]
        for name in names:
            for version, src in versions:
                if name == "convert":
                    result = convert_run(src, source, os.path.join(work, f"convert-{version}"))
                else:
                    _with_src(src)
                    result = run_fresh(specs[name])
                runs[name][version].append(result)
        print(f"round {number + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    result: dict[str, Any] = {"images": args.images, "rounds": args.rounds, "cores": os.cpu_count()}
    for name, versions in runs.items():
        old, new = summary(versions["old"]), summary(versions["new"])
        result[name] = {"old": old, "new": new, "new_vs_old": ratio(new, old)}
        r = result[name]["new_vs_old"]
        print(
            f"{name:<12} old median {old['median_images_per_second']:7.0f} img/s ({old['cpu_ms_per_image']:.2f} ms CPU)"
            f"  new {new['median_images_per_second']:7.0f} ({new['cpu_ms_per_image']:.2f} ms)"
            f"  new/old: {r['median']:.3f} median, {r.get('paired', float('nan')):.3f} paired, "
            f"{r['cpu_per_image']:.3f} by CPU"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
