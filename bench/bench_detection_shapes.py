"""Detection on Keras/JAX: batches padded to one fixed object count (what `train` does, from the
manifest's `max_objects_per_image`) against each batch padded to its own most (`load`'s default),
each in a fresh process, rounds interleaved. JAX compiles the training step once per shape, so
every new count in a batch costs a compile.

    .venv/bin/python bench/bench_detection_shapes.py [--images 160] [--epochs 3] [--rounds 2]

Corpus: `build_shapes_coco_corpus` (64 px photo crops with 1-3 shapes), converted 80/20; the
detector `train` builds (training/detector.py), Adam, batches of 16, no augmentation.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import TAGS, build_shapes_coco_corpus
from bench.report import emit

ONE_RUN = """
import json, os, sys, time
os.environ["KERAS_BACKEND"] = "jax"
import keras
from shardfeed import load
from shardfeed.format import manifest
from shardfeed.read.options import DecodeOptions
from shardfeed.training.detector import build_detector, compile_args

data, fixed, epochs, names = sys.argv[1], sys.argv[2] == "fixed", int(sys.argv[3]), sys.argv[4].split(",")
facts = manifest.read(data)
most = max(facts.split(s).objects.most for s in ("train", "validation"))
keras.utils.set_random_seed(0)
net = build_detector(names, (64, 64))
net.compile(optimizer="adam", **compile_args())
ds = load(data, split="train", batch_size=16, image_size=64, seed=0, augment=False,
          decode=DecodeOptions(max_objects=most if fixed else None))
counts = sorted({int(y["boxes"].shape[1]) for _, y in ds})
times = []

class Timed(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        times.append(time.perf_counter() - self.start)

net.fit(ds, epochs=epochs, verbose=0, callbacks=[Timed()])
print(json.dumps({"object_counts_in_batches": counts, "epoch_seconds": times}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=160)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "shardfeed_bench_detection_shapes"))
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    from shardfeed import ConvertOptions, convert

    data = os.path.join(args.workdir, f"shards{args.images}")
    if not os.path.exists(os.path.join(data, "manifest.json")):
        source = build_shapes_coco_corpus(os.path.join(args.workdir, "source"), args.images, size=64)
        convert(source, data, ConvertOptions(split="train=0.8,validation=0.2"), progress=False)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    runs: dict[str, list[dict[str, object]]] = {"fixed": [], "per_batch": []}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for name in runs:
            argv = [data, "fixed" if name == "fixed" else "batch", str(args.epochs), ",".join(TAGS)]
            done = subprocess.run(
                [sys.executable, "-c", ONE_RUN, *argv], env=env, capture_output=True, text=True, check=True
            )
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(name, runs[name][-1], file=sys.stderr)
    emit(
        {
            "bench": "detection_shapes",
            "images": args.images,
            "epochs": args.epochs,
            "runs": runs,
            "load_average": {"before": load_before, "after": os.getloadavg()},
        },
        args.json,
    )


if __name__ == "__main__":
    main()
