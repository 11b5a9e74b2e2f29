"""Global shuffle, exact resume and the TensorFlow-free reader, measured in one run.

    .venv/bin/python bench/bench_shuffle.py [--images 3000] [--repeats 3] [--json out.json] [--cold-cache]

1. load(shuffle="global") vs load(shuffle="buffer"), training pipeline, 224 px (target >= 0.8x);
2. time to the first batch when resuming mid-epoch (start_step=K) vs a fresh start, and vs the
   naive way (the buffer pipeline with .skip(K), which reads and decodes K batches);
3. IndexedRecords (no TensorFlow): records/s in global order with CRC checks, and decoded images/s
   (simplejpeg), in one process.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import build_corpus
from bench.report import emit

BATCH, SIZE = 64, 224


def first_batch_seconds(make) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    next(iter(make()))
    return time.perf_counter() - start


def drop_page_cache() -> None:
    """Evicts clean cached file pages, so the next reads come from the disk (Linux, root)."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as e:
        raise SystemExit(f"--cold-cache needs root on Linux to write /proc/sys/vm/drop_caches: {e}") from e


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "shardfeed_bench"))
    parser.add_argument("--json")
    parser.add_argument(
        "--cold-cache",
        action="store_true",
        help="drop the page cache before each run (needs root: writes /proc/sys/vm/drop_caches), so shards "
        "come from disk, not memory",
    )
    args = parser.parse_args()
    from shardfeed import ConvertOptions, IndexedRecords, ReadOptions, convert, load
    from shardfeed.tools.timing import measure

    src = build_corpus(os.path.join(args.workdir, f"corpus{args.images}"), args.images)
    data = os.path.join(args.workdir, "shuffle_keep")
    shutil.rmtree(data, ignore_errors=True)
    convert(src, data, ConvertOptions(split="train=1", shards=16), progress=False)

    r: dict[str, object] = {"images": args.images, "cores": os.cpu_count(), "cold_cache": args.cold_cache}
    # Alternate the two pipelines so drift in this shared machine's speed hits both alike.
    runs: dict[str, list] = {"buffer": [], "global": []}
    for _ in range(args.repeats):
        for mode in runs:
            if args.cold_cache:
                drop_page_cache()
            runs[mode].append(
                measure(load(data, batch_size=BATCH, image_size=SIZE, seed=0, read=ReadOptions(shuffle=mode)))
            )
    buffer, glob = (max(t.images_per_second for t in runs[mode]) for mode in ("buffer", "global"))
    cpu_us = {mode: min(1e6 * t.cpu_cores_used / t.images_per_second for t in runs[mode]) for mode in runs}
    r["global_shuffle"] = {
        "buffer_img_s": buffer,
        "global_img_s": glob,
        "ratio": glob / buffer,
        "buffer_cpu_us_per_img": cpu_us["buffer"],
        "global_cpu_us_per_img": cpu_us["global"],
    }

    k = (args.images // BATCH) // 2
    fresh = min(
        first_batch_seconds(
            lambda: load(data, batch_size=BATCH, image_size=SIZE, seed=0, read=ReadOptions(shuffle="global"))
        )
        for _ in range(args.repeats)
    )
    resumed = min(
        first_batch_seconds(
            lambda: load(
                data, batch_size=BATCH, image_size=SIZE, seed=0, read=ReadOptions(shuffle="global", start_step=k)
            )
        )
        for _ in range(args.repeats)
    )
    naive = min(
        first_batch_seconds(lambda: load(data, batch_size=BATCH, image_size=SIZE, seed=0).skip(k))
        for _ in range(args.repeats)
    )
    r["resume_first_batch_seconds"] = {
        "skipped_batches": k,
        "fresh_start": fresh,
        "exact_resume": resumed,
        "naive_skip": naive,
    }

    records = IndexedRecords(data, "train")
    order = records.order(seed=0, epoch=0)
    start = time.perf_counter()
    for i in order:
        records.record(int(i))
    raw = len(order) / (time.perf_counter() - start)
    start = time.perf_counter()
    for i in order:
        records[int(i)]
    decoded = len(order) / (time.perf_counter() - start)
    r["tf_free_reader"] = {"records_per_s_global_order_crc": raw, "decoded_images_per_s_one_process": decoded}
    emit(r, args.json)


if __name__ == "__main__":
    main()
