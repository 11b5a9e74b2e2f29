"""Training throughput of each `train --model` on this machine's CPU: the model's own limit.

    .venv/bin/python bench/bench_backbones.py [--size 224] [--batch 16] [--steps 3] [--rounds 2]
                                             [--json bench/results/bench_backbones.json]

Each run is a fresh process that builds the model (random weights, the backbone's preprocessing
inside), compiles it as `train` does (Adam, sparse cross-entropy) and times `--steps` training
steps on one in-memory batch of real-photo crops after one warm-up step: images/s and CPU
seconds per image, rounds interleaved over the models. Input reading is not part of it (that is
`shardfeed bench`); parameters and the input size its ImageNet weights were trained at come from
the model and `BACKBONES`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.report import emit

ONE_RUN = """
import json, os, resource, sys, time
import numpy as np
from skimage import data
from shardfeed.training import build_model
name, size, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
photo = data.chelsea()
rng = np.random.default_rng(0)
crops = []
for _ in range(batch):
    y, x = rng.integers(0, photo.shape[0] - 200), rng.integers(0, photo.shape[1] - 200)
    crops.append(np.asarray(photo[y : y + 200, x : x + 200]))
import tensorflow as tf
images = tf.image.resize(np.stack(crops), (size, size)).numpy().astype(np.uint8)
labels = np.arange(batch) % 5
net = build_model(name, [str(i) for i in range(5)], (size, size))
net.compile("adam", "sparse_categorical_crossentropy")
net.train_on_batch(images, labels)
usage = resource.getrusage(resource.RUSAGE_SELF)
cpu0, t0 = usage.ru_utime + usage.ru_stime, time.perf_counter()
for _ in range(steps):
    net.train_on_batch(images, labels)
seconds = time.perf_counter() - t0
usage = resource.getrusage(resource.RUSAGE_SELF)
cpu = usage.ru_utime + usage.ru_stime - cpu0
print(json.dumps({"images_per_second": steps * batch / seconds, "cpu_s_per_image": cpu / (steps * batch),
                  "parameters": int(net.count_params())}))
"""


def one_run(name: str, size: int, batch: int, steps: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", ONE_RUN, name, str(size), str(batch), str(steps)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--models", help="comma-separated (default: all)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    from shardfeed.training.backbones import BACKBONES
    from shardfeed.training.models import MODELS

    names = args.models.split(",") if args.models else list(MODELS)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names:
            print(f"round {r + 1}/{args.rounds}: {name}", file=sys.stderr, flush=True)
            runs[name].append(one_run(name, args.size, args.batch, args.steps))
    results: dict[str, Any] = {
        "bench": "backbones",
        "cores": os.cpu_count(),
        "size": args.size,
        "batch": args.batch,
        "steps": args.steps,
        "rounds": args.rounds,
        "models": {},
    }
    for name, measured in runs.items():
        speeds = [m["images_per_second"] for m in measured]
        results["models"][name] = {
            "parameters": measured[0]["parameters"],
            "imagenet_input_size": BACKBONES[name].input_size if name in BACKBONES else None,
            "median_images_per_second": statistics.median(speeds),
            "best_images_per_second": max(speeds),
            "cpu_s_per_image": statistics.median(m["cpu_s_per_image"] for m in measured),
            "runs": measured,
        }
    emit(results, args.json)


if __name__ == "__main__":
    main()
