"""Peak memory of `convert` when the source holds image bombs (issue 29, item 2).

    .venv/bin/python bench/bench_hostile.py [--images 2000] [--rounds 3] [--json out.json]

Three conversions of the same real photos, each in a fresh process (2 workers), rounds
interleaved: `plain` (the photos alone), `bombs` (the photos plus files declaring 100 MP to
1.6 GP images: PNG zlib bombs, a 60,000-px-wide JPEG, GIF/TIFF headers, a zTXt bomb) under the
default pixel limit, and `bombs_no_limit` (the same with `max_pixels=None`, as before the limit;
its data segment is capped at 6 GiB so that it fails instead of the machine). Reported: peak RSS
of the main process and of the largest worker, seconds, and bombs/plain ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import build_corpus, hostile_images
from bench.report import emit

CAP = 6 << 30

CONVERT = """
import json, resource, sys, time
from shardfeed import ConvertOptions, ImageOptions, convert
src, out, limit = sys.argv[1], sys.argv[2], sys.argv[3]
image = ImageOptions() if limit == "default" else ImageOptions(max_pixels=None)
start = time.perf_counter()
result = convert(src, out, ConvertOptions(split="train=1", shards=8, image=image), workers=2, progress=False)
print(json.dumps({
    "seconds": time.perf_counter() - start,
    "written": result.num_written,
    "skipped": result.num_skipped,
    "parent_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
}))
"""


def run(src: str, out: str, limit: str) -> dict[str, float | str]:
    """One conversion in a fresh process; its figures, or how it failed."""
    shutil.rmtree(out, ignore_errors=True)
    done = subprocess.run(
        [sys.executable, "-c", CONVERT, src, out, limit],
        capture_output=True,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_DATA, (CAP, CAP)),
    )
    if done.returncode != 0:
        return {"failed": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]}
    result: dict[str, float | str] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "shardfeed-bench"))
    parser.add_argument("--json")
    args = parser.parse_args()
    plain = build_corpus(os.path.join(args.workdir, f"corpus{args.images}"), args.images)
    bombs = os.path.join(args.workdir, f"hostile{args.images}")
    if not os.path.isdir(bombs):
        import skimage.data

        shutil.copytree(plain, bombs)
        for name, data in hostile_images(skimage.data.coffee()[:64, :64]).items():
            with open(os.path.join(bombs, "class00", name), "wb") as f:
                f.write(data)
    kinds = {"plain": (plain, "default"), "bombs": (bombs, "default"), "bombs_no_limit": (bombs, "none")}
    runs: dict[str, list[dict[str, float | str]]] = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for kind, (src, limit) in kinds.items():
            runs[kind].append(run(src, os.path.join(args.workdir, "out-hostile"), limit))
            print(kind, runs[kind][-1], file=sys.stderr)

    def median(kind: str, key: str) -> float | None:
        values = [float(r[key]) for r in runs[kind] if key in r]
        return statistics.median(values) if values else None

    summary = {
        kind: {key: median(kind, key) for key in ("parent_rss_mb", "worker_rss_mb", "seconds", "skipped")}
        for kind in kinds
    }
    ratios = {}
    for kind in ("bombs", "bombs_no_limit"):
        for key in ("parent_rss_mb", "worker_rss_mb"):
            ours, base = summary[kind][key], summary["plain"][key]
            ratios[f"{kind}_vs_plain_{key}"] = ours / base if ours and base else None
    emit({"images": args.images, "rounds": args.rounds, "median": summary, "ratios": ratios, "runs": runs}, args.json)


if __name__ == "__main__":
    main()
