"""How fast `grain_dataset` can feed on a many-core host: threads in one process vs Grain's
worker processes (`IterDataset.mp_prefetch`), the input pipeline alone (no model), TensorFlow-free.

    python bench/grain_workers.py DATA [--size 224] [--batch 128] [--batches 30] [--configs t4,t8,t16,p8,p15]

`tK`: `grain_dataset(..., num_threads=K)` as it is; `pK`: the same dataset (2 threads) run in K
Grain worker processes. Images/s over `--batches` batches after 3 warm-up batches, one run of each
in this process, in the order given; `cpu_ms_per_image_main` is this process's CPU alone (the
workers' is not counted). Grain's worker processes read absl flags: they are marked parsed here.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any


def rate(ds: Any, batches: int) -> dict[str, float]:
    """Images/s and this process's CPU ms per image over `batches` batches, after 3 warm-up ones."""
    it = iter(ds)
    for _ in range(3):
        next(it)
    before, t0, images = os.times(), time.perf_counter(), 0
    for _ in range(batches):
        images += len(next(it)[1])
    seconds, after = time.perf_counter() - t0, os.times()
    cpu = (after.user + after.system) - (before.user + before.system)
    return {"images_per_second": images / seconds, "cpu_ms_per_image_main": 1000 * cpu / images}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--configs", default="t4,t8,t16,p8,p15")
    args = parser.parse_args()
    import grain
    from absl import flags

    from shardfeed.read.grain_pipeline import grain_dataset

    flags.FLAGS.mark_as_parsed()
    out: dict[str, Any] = {"bench": "grain_workers", "cores": os.cpu_count(), "size": args.size, "batch": args.batch}
    for config in args.configs.split(","):
        kind, count = config[0], int(config[1:])
        threads = count if kind == "t" else 2
        ds = grain_dataset(
            args.data, batch_size=args.batch, image_size=args.size, seed=0, epochs=50, num_threads=threads
        )
        if kind == "p":
            ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=count))
        out[config] = rate(ds, args.batches)
        print(config, out[config], flush=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
