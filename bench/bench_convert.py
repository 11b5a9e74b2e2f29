"""Convert benchmark: shardfeed vs the baselines a user would write, every run in a fresh process.

    .venv/bin/python bench/bench_convert.py [--images 20000] [--rounds 3] [--only a,b] [--skip-memory] [--json out.json]

1. keep-bytes conversion (16 shards; decode check, and header check) vs a bare single loop (read
   file, tf.train.Example, TFRecordWriter);
2. --resize 160 --center-crop 160 --format jpeg vs the tf.data recipe (read, decode_jpeg, resize
   of the shorter side, central crop, encode_jpeg(quality 95, optimize_size, no chroma
   downsampling) in a parallel map with AUTOTUNE, then TFRecordWriter), as written (bilinear,
   no antialiasing) and antialiased (the quality of ours);
3. peak memory (RSS) of a conversion of a 10x larger corpus vs the base corpus (8 shards).
Rounds are interleaved (A B C ..., A B C ...); best and median images/s and CPU ms per image
(process and workers, start-up included) per conversion; ratios of medians and paired ratios
(median of the per-round ratios), > 1 means shardfeed is faster. Every clock starts after the interpreter and imports.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import build_corpus
from bench.report import emit

BARE_LOOP = """
import os, sys, time, tensorflow as tf
src, out = sys.argv[1], sys.argv[2]
files = sorted(os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs)
classes = sorted(os.listdir(src))
start = time.perf_counter()
with tf.io.TFRecordWriter(out) as writer:
    for path in files:
        data = open(path, "rb").read()
        label = classes.index(os.path.basename(os.path.dirname(path)))
        feature = {"image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                   "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}
        writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
print(time.perf_counter() - start)
"""

TF_RESIZE_RECIPE = """
import os, sys, time, tensorflow as tf
src, out, size, antialias = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "antialias"
files = sorted(os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs)
classes = sorted(os.listdir(src))
labels = [classes.index(os.path.basename(os.path.dirname(p))) for p in files]
def transform(path, label):
    image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = size / tf.reduce_min(shape)
    image = tf.image.resize(image, tf.cast(tf.round(shape * scale), tf.int32), antialias=antialias)
    image = tf.image.resize_with_crop_or_pad(image, size, size)
    image = tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)
    return tf.io.encode_jpeg(image, quality=95, optimize_size=True, chroma_downsampling=False), label
start = time.perf_counter()
ds = tf.data.Dataset.from_tensor_slices((files, labels)).map(transform, num_parallel_calls=tf.data.AUTOTUNE)
with tf.io.TFRecordWriter(out) as writer:
    for data, label in ds.prefetch(tf.data.AUTOTUNE).as_numpy_iterator():
        feature = {"image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                   "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}
        writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
print(time.perf_counter() - start)
"""

SHARDFEED = """
import json, resource, shutil, sys, time
from shardfeed import ConvertOptions, ImageOptions, convert
src, out, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
image = ImageOptions(**{k: opts.pop(k) for k in ("resize", "center_crop", "image_format", "check") if k in opts})
shutil.rmtree(out, ignore_errors=True)
start = time.perf_counter()
convert(src, out, ConvertOptions(**opts, image=image), progress=False)
elapsed = time.perf_counter() - start
self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"seconds": elapsed, "parent_rss_mb": self_kb / 1024, "worker_rss_mb": child_kb / 1024}))
"""


def _python(code: str, *args: str) -> str:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip().splitlines()[-1]


def shardfeed_run(src: str, out: str, **options: object) -> dict[str, float]:
    return json.loads(_python(SHARDFEED, src, out, json.dumps(options)))


def timed(src: str, out: str) -> dict[str, Callable[[], float]]:
    """Every conversion compared, as a function that runs it once in a fresh process (seconds)."""
    resize = {"resize": 160, "center_crop": 160, "image_format": "jpeg"}
    return {
        "bare_loop": lambda: float(_python(BARE_LOOP, src, out + ".bare")),
        "keep_decode_check": lambda: shardfeed_run(src, out, split="train=1", shards=16)["seconds"],
        "keep_header_check": lambda: shardfeed_run(src, out, split="train=1", shards=16, check="header")["seconds"],
        "recipe_as_written": lambda: float(_python(TF_RESIZE_RECIPE, src, out + ".tf", "160", "plain")),
        "recipe_antialiased": lambda: float(_python(TF_RESIZE_RECIPE, src, out + ".tf", "160", "antialias")),
        "resize_crop_160": lambda: shardfeed_run(src, out, split="train=1", shards=16, **resize)["seconds"],
    }


PAIRS = {  # ratio name: (shardfeed conversion, baseline)
    "keep_decode_check_vs_bare_loop": ("keep_decode_check", "bare_loop"),
    "keep_header_check_vs_bare_loop": ("keep_header_check", "bare_loop"),
    "resize_vs_recipe_as_written": ("resize_crop_160", "recipe_as_written"),
    "resize_vs_recipe_antialiased": ("resize_crop_160", "recipe_antialiased"),
}


def cpu_timed(run: Callable[[], float]) -> tuple[float, float]:
    """(seconds on the run's clock, CPU seconds of its process and workers, start-up included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = run()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def ratios(runs: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Each pair's ratio of median images/s and its paired ratio (median of per-round ratios)."""
    out = {}
    for name, (ours, base) in PAIRS.items():
        if ours in runs and base in runs:
            out[name] = {
                "median": statistics.median(runs[ours]) / statistics.median(runs[base]),
                "paired": statistics.median(a / b for a, b in zip(runs[ours], runs[base], strict=True)),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", help="comma-separated conversions to run (default: all of them)")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "shardfeed_bench"))
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    src = build_corpus(os.path.join(args.workdir, f"corpus{args.images}"), args.images)
    out = os.path.join(args.workdir, "out")
    n = args.images
    conversions = timed(src, out)
    if args.only:
        only = args.only.split(",")
        if unknown := set(only) - set(conversions):
            parser.error(f"unknown conversions {sorted(unknown)}; choose from {sorted(conversions)}")
        conversions = {k: v for k, v in conversions.items() if k in only}
    runs: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for round_number in range(args.rounds):
        for name, run in conversions.items():
            seconds, cpu_seconds = cpu_timed(run)
            runs.setdefault(name, []).append(n / seconds)
            cpu.setdefault(name, []).append(1000 * cpu_seconds / n)
            rate = f"{n / seconds:.0f} img/s"
            print(f"round {round_number + 1}/{args.rounds}: {name} {rate}", file=sys.stderr, flush=True)
    rates = {
        name: {
            "best_img_s": max(r),
            "median_img_s": statistics.median(r),
            "cpu_ms_per_image": statistics.median(cpu[name]),
            "runs": r,
        }
        for name, r in runs.items()
    }
    results: dict[str, object] = {"images": n, "cores": os.cpu_count(), "rounds": args.rounds, "img_s": rates}
    results["ratios"] = ratios(runs)
    if not args.skip_memory:
        big = build_corpus(os.path.join(args.workdir, f"corpus{n * 10}"), n * 10, seed=1)
        small_run = shardfeed_run(src, out, split="train=1", shards=8)
        big_run = shardfeed_run(big, out, split="train=1", shards=8)
        results["memory"] = {
            "small": small_run,
            "large_10x": big_run,
            "parent_ratio": big_run["parent_rss_mb"] / small_run["parent_rss_mb"],
            "worker_ratio": big_run["worker_rss_mb"] / small_run["worker_rss_mb"],
        }
    emit(results, args.json)


if __name__ == "__main__":
    main()
