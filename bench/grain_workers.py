"""How fast `grain_dataset` can feed on a many-core host: threads in one process vs Grain's
worker processes (`IterDataset.mp_prefetch`), the input pipeline alone (no model), TensorFlow-free
unless `load` is asked for.

    python bench/grain_workers.py DATA [--size 224] [--batch 128] [--batches 30]
                                  [--configs t4,t8,t16,p8,p15,load,load-unfused]

`tK`: `grain_dataset(..., num_threads=K)`; `pK`: `grain_dataset(..., num_workers=K, num_threads=2)`,
K Grain worker processes of 2 threads; `load`: `shardfeed.load`'s tf.data pipeline read as numpy
batches, as `gpu_feed.py`'s `load` feed gives them to Keras on JAX or PyTorch (`load-unfused`: the
same without the compiled resize op, `DecodeOptions(fused_resize=False)`). A detection folder
is read as `gpu_feed.py` reads it: flips only, boxes padded to 4.
Images/s over `--batches` batches after 3 warm-up batches, one run of each in this process, in
the order given; `cpu_ms_per_image_host` is the whole host's busy CPU over
the batches (/proc/stat: this process and the workers; run it on an otherwise idle machine).
`--batches` well above the workers' buffers (~5 batches each) gives the steady rate.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.report import host_cpu_seconds


def rate(ds: Any, batches: int) -> dict[str, float]:
    """Images/s and the host's CPU ms per image over `batches` batches, after 3 warm-up ones."""
    it = iter(ds)
    for _ in range(3):
        next(it)
    before, t0, images = host_cpu_seconds(), time.perf_counter(), 0
    for _ in range(batches):
        images += len(next(it)[0])
    seconds, cpu = time.perf_counter() - t0, host_cpu_seconds() - before
    return {"images_per_second": images / seconds, "cpu_ms_per_image_host": 1000 * cpu / images}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--configs", default="t4,t8,t16,p8,p15")
    args = parser.parse_args()
    from bench.gpu_feed import _tf_data_batches
    from shardfeed.format import manifest
    from shardfeed.read.augment import Augment
    from shardfeed.read.grain.pipeline import grain_dataset

    detection = manifest.read(args.data).header.task == "detection"

    out: dict[str, Any] = {"bench": "grain_workers", "cores": os.cpu_count(), "size": args.size, "batch": args.batch}
    for config in args.configs.split(","):
        if config.startswith("load"):
            fused = config == "load"
            out[config] = rate(_tf_data_batches(args.data, args.batch, args.size, detection, fused), args.batches)
            print(config, out[config], flush=True)
            continue
        kind, count = config[0], int(config[1:])
        threads = count if kind == "t" else 2
        workers = count if kind == "p" else 0
        ds = grain_dataset(
            args.data,
            batch_size=args.batch,
            image_size=args.size,
            seed=0,
            epochs=50,
            num_threads=threads,
            num_workers=workers,
            **({"augment": Augment(crop=False), "max_objects": 4} if detection else {}),
        )
        out[config] = rate(ds, args.batches)
        print(config, out[config], flush=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
