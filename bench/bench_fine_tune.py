"""What the fine-tuning schedule reaches from a locally-made weight file, against random init.

    .venv/bin/python bench/bench_fine_tune.py [--model mobilenet_v3_small] [--size 64] [--epochs 12]
                                             [--seeds 3] [--work DIR] [--json bench/results/bench_fine_tune.json]

ImageNet weights cannot be had here (no network at run time), so the pre-trained weights are made
locally, the way ImageNet's are, on a different task: `train` (random init) classifies crops of
14 real photos that scikit-image, scikit-learn and matplotlib ship (Hubble deep field, retina,
brick, gravel, Grace Hopper, ...); its backbone is saved without the top (save_weights). The
target task is another one: crops of 4 other photos (astronaut, coffee, chelsea, rocket), with
few training images per class. Each target run is `shardfeed train` in a fresh process, the
configurations interleaved per seed:

- random: --weights none (one phase, every layer learns);
- schedule: --weights FILE, the default schedule (head on a frozen backbone, then its top);
- all-at-once: --weights FILE --head-epochs 0 --fine-tune-from all (no frozen phase).

Reported: validation accuracy (inference mode) at the end, best and median over the seeds.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.report import emit

TARGET = ("astronaut", "coffee", "chelsea", "rocket")
CONFIGS = {
    "random": ["--weights", "none"],
    "schedule": ["--weights", "{weights}"],
    "all-at-once": ["--weights", "{weights}", "--head-epochs", "0", "--fine-tune-from", "all"],
}


def source_photos() -> dict[str, np.ndarray]:
    """14 real photos, none of them a target class, as RGB uint8."""
    import matplotlib.cbook
    import skimage.data
    from PIL import Image
    from sklearn.datasets import load_sample_images

    out = {n: getattr(skimage.data, n)() for n in ("hubble_deep_field", "immunohistochemistry", "retina")}
    out.update({n: getattr(skimage.data, n)() for n in ("brick", "grass", "gravel", "camera", "coins", "moon")})
    out.update({n: getattr(skimage.data, n)() for n in ("clock", "cell", "colorwheel")})
    china, flower = load_sample_images().images
    out.update(china=china, flower=flower)
    hopper = matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)
    out["grace_hopper"] = np.asarray(Image.open(hopper).convert("RGB"))
    return {k: np.stack([v] * 3, -1) if v.ndim == 2 else v[..., :3] for k, v in out.items()}


def target_photos() -> dict[str, np.ndarray]:
    import skimage.data

    return {n: getattr(skimage.data, n)()[..., :3] for n in TARGET}


def write_tree(root: Path, photos: dict[str, np.ndarray], per_class: int, seed: int) -> None:
    """root/<photo>/<n>.jpg: random crops of 100-300 px a side."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for name, photo in photos.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        h, w = photo.shape[:2]
        for i in range(per_class):
            ch, cw = int(rng.integers(100, min(h, 300))), int(rng.integers(100, min(w, 300)))
            y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
            buffer = io.BytesIO()
            Image.fromarray(np.ascontiguousarray(photo[y : y + ch, x : x + cw])).save(buffer, "JPEG", quality=90)
            (root / name / f"{i:03d}.jpg").write_bytes(buffer.getvalue())


def shardfeed(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "shardfeed", *args], check=True, capture_output=True, text=True)


def pretrain(work: Path, model: str, size: int, epochs: int) -> Path:
    """Trains `model` from random init on the source photos (kept in `work`: a second call reuses
    it); its backbone's weights, no top."""
    run = work / "pretrain"
    if not (run / "model.keras").exists():
        write_tree(work / "source-tree", source_photos(), 120, seed=1)
        shardfeed("convert", str(work / "source-tree"), str(work / "source"), "-q", "--overwrite")
        shardfeed(
            "train",
            str(work / "source"),
            "--out",
            str(run),
            "--model",
            model,
            "--weights",
            "none",
            "--epochs",
            str(epochs),
            "--image-size",
            str(size),
            "--batch-size",
            "32",
            "--augment",
            "inception",
        )
    from shardfeed.training import load_model
    from shardfeed.training.fine_tune import backbone_of

    backbone = backbone_of(load_model(str(run / "model.keras")))
    recalibrate(backbone, work / "source", size)
    path = work / f"{model}_local_notop.weights.h5"
    backbone.save_weights(str(path))
    return path


def recalibrate(backbone: Any, data: Path, size: int, batches: int = 30) -> None:
    """Sets the BatchNorm moving statistics to the source data's (a cumulative average over
    `batches` batches in training mode, weights untouched).

    MobileNetV2/V3 use BatchNorm momentum 0.999: after a short pre-training their moving
    averages still hold mostly the initial values (here: validation at chance while training
    accuracy was 0.90), which ImageNet's published weights, trained for 100k+ steps, do not.
    """
    import keras

    import shardfeed

    layers = [layer for layer in backbone.layers if isinstance(layer, keras.layers.BatchNormalization)]
    images = shardfeed.load(str(data), split="train", batch_size=64, image_size=size, seed=0, repeat=True)
    for i, (x, _) in enumerate(images.take(batches)):
        for layer in layers:
            layer.momentum = i / (i + 1)  # moving = mean of the batch statistics seen so far
        backbone(keras.layers.Rescaling(1.0)(x), training=True)


def target_run(work: Path, name: str, seed: int, model: str, size: int, epochs: int, weights: Path) -> dict[str, Any]:
    run = work / f"target-{name}-{seed}"
    flags = [a.format(weights=weights) for a in CONFIGS[name]]
    shardfeed(
        "train",
        str(work / "target"),
        "--out",
        str(run),
        "--model",
        model,
        "--epochs",
        str(epochs),
        "--image-size",
        str(size),
        "--batch-size",
        "16",
        "--seed",
        str(seed),
        "--augment",
        "inception",
        *flags,
    )
    metrics = json.loads((run / "metrics.json").read_text())
    return {"val_accuracy": metrics["val_accuracy"], "seconds": metrics["seconds"], "phases": metrics["phases"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mobilenet_v3_small")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--pretrain-epochs", type=int, default=15)
    parser.add_argument("--per-class", type=int, default=60, help="target images per class (a quarter train)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--work", default="/tmp/bench_fine_tune")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    work = Path(args.work)
    weights = pretrain(work, args.model, args.size, args.pretrain_epochs)
    write_tree(work / "target-tree", target_photos(), args.per_class, seed=2)
    split = "train=0.25,validation=0.75"
    shardfeed("convert", str(work / "target-tree"), str(work / "target"), "--split", split, "-q", "--overwrite")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
    for seed in range(args.seeds):
        for name in CONFIGS:
            print(f"seed {seed}: {name}", file=sys.stderr, flush=True)
            runs[name].append(target_run(work, name, seed, args.model, args.size, args.epochs, weights))
    results: dict[str, Any] = {
        "bench": "fine_tune",
        "model": args.model,
        "size": args.size,
        "epochs": args.epochs,
        "pretrain_epochs": args.pretrain_epochs,
        "target_train_images": args.per_class * len(TARGET) // 4,
        "configs": {
            name: {
                "median_val_accuracy": statistics.median(r["val_accuracy"] for r in measured),
                "best_val_accuracy": max(r["val_accuracy"] for r in measured),
                "runs": measured,
            }
            for name, measured in runs.items()
        },
    }
    emit(results, args.json)


if __name__ == "__main__":
    main()
