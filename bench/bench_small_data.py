"""Default training on a few hundred real photos, offline: what `train` reaches in inference mode.

    .venv/bin/python bench/bench_small_data.py [--per-class 60] [--epochs 8] [--seeds 2]
                                               [--work DIR] [--json bench/results/bench_small_data.json]

The case of issue 35: 6 classes x 60 real photos (random 100-300 px crops of six photos that
scikit-image ships), 80% for training, no network (so no ImageNet weights). Each run is
`shardfeed train` in a fresh process, the configurations interleaved per seed:

- defaults: `train` as it is (small_cnn, batch 64, 224 px, precise BatchNorm statistics);
- no-precise-bn: the same with --no-precise-bn (Keras' moving averages, as before issue 35);
- auto: --model auto (offline it must pick a network that learns from random weights).

Reported per configuration: validation accuracy (inference mode), the training accuracy Keras
printed while fitting and the same images re-scored in inference mode, and the seconds.
"""

from __future__ import annotations

import argparse
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
from bench.bench_fine_tune import write_tree
from bench.report import emit

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry")
CONFIGS = {"defaults": [], "no-precise-bn": ["--no-precise-bn"], "auto": ["--model", "auto"]}


def photos() -> dict[str, np.ndarray]:
    import skimage.data

    return {name: getattr(skimage.data, name)()[..., :3] for name in PHOTOS}


def run(work: Path, name: str, seed: int, epochs: int) -> dict[str, Any]:
    """One `shardfeed train` of configuration `name` in a fresh process; its figures."""
    out = work / f"run-{name}-{seed}"
    cmd = ["train", str(work / "data"), "--out", str(out), "--epochs", str(epochs), "--seed", str(seed)]
    done = subprocess.run(
        [sys.executable, "-m", "shardfeed", *cmd, *CONFIGS[name]], capture_output=True, text=True, check=False
    )
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1]}
    m = json.loads((out / "metrics.json").read_text())
    model = json.loads((out / "run.json").read_text())["model"]
    keys = ("val_accuracy", "accuracy", "train_accuracy_inference", "seconds", "steps_per_epoch")
    return {"model": model, **{k: m[k] for k in keys}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-class", type=int, default=60)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--work", default="/tmp/bench_small_data")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    work = Path(args.work)
    if not (work / "data" / "manifest.json").exists():
        write_tree(work / "tree", photos(), args.per_class, seed=3)
        subprocess.run(
            [sys.executable, "-m", "shardfeed", "convert", str(work / "tree"), str(work / "data"), "-q", "--overwrite"],
            check=True,
        )
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
    for seed in range(args.seeds):
        for name in CONFIGS:
            print(f"seed {seed}: {name}", file=sys.stderr, flush=True)
            runs[name].append(run(work, name, seed, args.epochs))
    summary = {}
    for name, results in runs.items():
        ok = [r for r in results if "error" not in r]
        summary[name] = {
            "runs": results,
            **{
                f"median_{k}": statistics.median(r[k] for r in ok) if ok else None
                for k in ("val_accuracy", "accuracy", "train_accuracy_inference", "seconds")
            },
        }
    emit(
        {
            "bench": "small_data",
            "classes": len(PHOTOS),
            "images": args.per_class * len(PHOTOS),
            "epochs": args.epochs,
            "configs": summary,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
