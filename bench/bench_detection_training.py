"""Detection training from scratch, `train`'s detector (training/detector.py: KerasHub's
RetinaNet) fed by `load` in a plain Keras loop, scored by COCO's mAP (pycocotools): how far it
gets in a time budget, without `train`'s checks, validation and precise BN.

    .venv/bin/python bench/bench_detection_training.py [--images 600] [--size 96] [--budget 1100] \\
        [--backend jax] [--mixed] [--json bench/results/bench_detection_training.json]

KerasHub comes with the detection extra (`make install` puts it in .venv without the
tensorflow-text its wheel asks for). The figures in docs/benchmarks/training.md and gpu.md were
made by this script's earlier copy of the model, fed 0-1 pixels and yxyx boxes; the model is the
same, and 0-255 pixels train as well (measured there).

Corpus (issue 51's setting): `bench/corpus.py` `build_shapes_coco_corpus`, photo crops with 1-3
of four solid shapes pasted where they never overlap, as COCO JSON; `convert --split
train=0.8,validation=0.2` (480 / 120). Model: a small ResNet (basic blocks, 64-64-128-256
filters, one block a stage) from random weights under KerasHub's RetinaNet (FPN levels 3-5, one
conv before each head, anchors 2x the stride at 3 scales and 3 aspect ratios), focal and smooth-L1
losses ("auto"), Adam 1e-3 with cosine decay over 200 epochs, batch 16, training with flips.
Trained for `--budget` seconds (at most the schedule's 200 epochs); validation mAP every 5 epochs
and at the end.

`--backend jax` (or `torch`) trains on that Keras backend fed by `grain_dataset` (worker
processes, one per core up to 8), TensorFlow not needed; `--mixed`
computes in mixed precision (bfloat16; float16 on TensorFlow). The GPU figures in
docs/benchmarks/gpu.md were made so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import TAGS, build_shapes_coco_corpus
from bench.report import emit

EPOCHS_IN_SCHEDULE = 200


def detector(size: int) -> Any:
    """`train`'s detector (training/detector.py), compiled as this script trains it: Adam 1e-3
    with cosine decay over EPOCHS_IN_SCHEDULE epochs of 480 images in batches of 16."""
    import keras

    from shardfeed.training.detector import build_detector, compile_args

    model = build_detector(TAGS, (size, size))
    rate = keras.optimizers.schedules.CosineDecay(1e-3, 480 // 16 * EPOCHS_IN_SCHEDULE)
    model.compile(optimizer=keras.optimizers.Adam(rate), **compile_args())
    return model


def batches(data: str, split: str, size: int, training: bool, backend: str = "tensorflow", epochs: int = 1) -> Any:
    """`split`'s batches of 16, uint8 images with boxes in xyxy pixels as `train` feeds its
    detector: `load` on TensorFlow; on JAX or PyTorch `grain_dataset` (`epochs` of them in one
    iterator; a fixed object count, so that JAX compiles one step)."""
    from shardfeed import Augment, DecodeOptions, grain_dataset, load

    augment = Augment(crop=False, flip=True) if training else None
    if backend != "tensorflow":
        import keras

        ds = grain_dataset(
            data,
            split=split,
            batch_size=16,
            image_size=size,
            seed=0,
            training=training,
            augment=augment,
            epochs=epochs,
            num_threads=4,
            num_workers=max(0, min(8, len(os.sched_getaffinity(0)) - 1)) if training else 0,
            max_objects=4,
        )
        return ((keras.ops.convert_to_tensor(x), y) for x, y in ds) if training else ds
    return load(
        data,
        split=split,
        batch_size=16,
        image_size=size,
        training=training,
        augment=augment,
        decode=DecodeOptions(max_objects=4),
    )


def scores(model: Any, val: Any) -> dict[str, Any]:
    """COCO's figures on the validation batches (training/detector.py's, as `train` scores)."""
    from shardfeed.training.detector import detection_scores

    return detection_scores(model, val, TAGS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=600)
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--budget", type=float, default=1100, help="training seconds (issue 51: within 20 minutes)")
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "shardfeed_bench_detection_training"))
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--backend", choices=("tensorflow", "jax", "torch"), default="tensorflow")
    parser.add_argument("--mixed", action="store_true", help="mixed precision (float16 on TensorFlow, else bfloat16)")
    args = parser.parse_args()
    os.environ["KERAS_BACKEND"] = args.backend
    load_before = os.getloadavg()
    listing = build_shapes_coco_corpus(
        os.path.join(args.work, f"shapes{args.images}_{args.size}"), args.images, size=args.size
    )
    data = os.path.join(args.work, "shards")
    shutil.rmtree(data, ignore_errors=True)
    command = ["convert", listing, data, "--split", "train=0.8,validation=0.2", "--no-report"]
    subprocess.run([sys.executable, "-m", "shardfeed", *command], check=True, capture_output=True)
    import keras

    from shardfeed import IndexedRecords

    keras.utils.set_random_seed(0)
    if args.mixed:
        keras.mixed_precision.set_global_policy("mixed_float16" if args.backend == "tensorflow" else "mixed_bfloat16")
    model, train, val = (
        detector(args.size),
        batches(data, "train", args.size, True, args.backend, epochs=EPOCHS_IN_SCHEDULE),
        batches(data, "validation", args.size, False, args.backend),
    )
    steps = len(IndexedRecords(data, split="train")) // 16 if args.backend != "tensorflow" else None
    history: list[dict[str, Any]] = []
    start, epoch = time.perf_counter(), 0
    while time.perf_counter() - start < args.budget and epoch < EPOCHS_IN_SCHEDULE:
        # Keras' own fit: a KerasHub task's would take a Python iterator for arrays
        fitted = keras.Model.fit(model, train, epochs=epoch + 1, initial_epoch=epoch, steps_per_epoch=steps, verbose=0)
        epoch += 1
        entry: dict[str, Any] = {
            "epoch": epoch,
            "seconds": time.perf_counter() - start,
            "loss": fitted.history["loss"][-1],
        }
        if epoch % 5 == 0:
            entry["mAP@0.5"] = scores(model, val)["mAP@0.5"]
        history.append(entry)
        print(json.dumps(entry), file=sys.stderr)
    trained = time.perf_counter() - start
    final = scores(model, val)
    emit(
        {
            "bench": "detection_training",
            "backend": args.backend,
            "dtype_policy": keras.mixed_precision.global_policy().name,
            "device": _device(args.backend),
            "images": args.images,
            "size": args.size,
            "epochs": epoch,
            "train_seconds_with_evaluations": trained,
            "validation": {
                k: final[k]
                for k in ("mAP", "mAP@0.5", "mAP@0.75", "mAP_small", "mAP_medium", "mAP_large", "per_class_ap")
            },
            "history": history,
            "load_average": {"before": load_before, "after": os.getloadavg()},
        },
        args.json,
    )


def _device(backend: str) -> str:
    """What the model computed on."""
    if backend == "jax":
        import jax

        return str(jax.devices()[0].device_kind)
    if backend == "torch":
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    import tensorflow as tf

    return "gpu" if tf.config.list_physical_devices("GPU") else "cpu"


if __name__ == "__main__":
    main()
