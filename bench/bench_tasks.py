"""Training beyond one label, with the defaults, on CPU: what `train` reaches and in what time.

    .venv/bin/python bench/bench_tasks.py [--images 600] [--work DIR] [--json bench/results/bench_tasks.json]

Issue 51's setting: 480 training and 120 validation images of real photos with objects pasted
at random places (bench/corpus.py `build_tagged_corpus`: 96 px crops of the photos scikit-image
ships, four coloured shapes each on about 40% of them), no network (no ImageNet weights).
Multi-label: `shardfeed convert tags.csv --multi-label`, then `shardfeed train DATA --out RUN`
with nothing else (the defaults) and `shardfeed evaluate RUN --json`, each in a fresh process;
the mAP is checked against scikit-learn's `average_precision_score` on the model's own scores.
Segmentation: the same shapes as masks (`build_segmentation_corpus`), `convert FOLDER`, `train`
(the U-Net) and `evaluate`; `--segmentation-flags` adds train flags to the defaults.
Detection (`--tasks detection`): the same shapes at known boxes, never overlapping
(`build_shapes_coco_corpus`, COCO JSON), `convert instances.json`, `train` (KerasHub's RetinaNet:
the detection extra) and `evaluate` (COCO's mAP, pycocotools).
The machine's load average is noted before and after. Goal (issue 51): mAP >= 0.8 within 20
minutes of training on 2 cores; segmentation mean IoU >= 0.5 likewise; detection mAP@0.5 >= 0.5.
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
from bench.corpus import build_segmentation_corpus, build_tagged_corpus
from bench.report import emit


def shardfeed(*args: str) -> tuple[str, float]:
    """`shardfeed ARGS` in a fresh process: its stdout and its seconds."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "shardfeed", *args], capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"shardfeed {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout, time.perf_counter() - start


def sklearn_map(run: str) -> float:
    """scikit-learn's macro average precision of the run's model on its validation split."""
    import numpy as np
    from sklearn.metrics import average_precision_score

    from shardfeed.training import load_model
    from shardfeed.training.models import scored
    from shardfeed.training.run_folder import RunFolder

    record = RunFolder(run).read_record()
    scores, truth = scored(load_model(os.path.join(run, "model.keras")), record.inputs().evaluation("validation"))
    return float(average_precision_score(np.asarray(truth, int), scores, average="macro"))


def multi_label(work: str, images: int) -> dict[str, Any]:
    listing = build_tagged_corpus(os.path.join(work, f"tagged{images}"), images)
    data, run = os.path.join(work, "tagged_shards"), os.path.join(work, "tagged_run")
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(run, ignore_errors=True)
    shardfeed("convert", listing, data, "--multi-label", "--split", "train=0.8,validation=0.2", "--no-report")
    _, seconds = shardfeed("train", data, "--out", run)
    out, _ = shardfeed("evaluate", run, "--json")
    result = json.loads(out)
    with open(os.path.join(run, "run.json")) as f:
        record = json.load(f)
    return {
        "train_seconds": seconds,
        "model": record["model"],
        "epochs": record["epochs"],
        "image_size": record["image_size"],
        "validation_images": result["examples"],
        "mAP": result["mAP"],
        "mAP_sklearn": sklearn_map(run),
        "micro_f1": result["micro_f1"],
        "macro_f1": result["macro_f1"],
        "per_class_ap": {k: v["ap"] for k, v in result["per_class"].items()},
    }


def segmentation(work: str, images: int, extra: list[str]) -> dict[str, Any]:
    """The same shapes as masks (`build_segmentation_corpus`): convert the folder, train the
    U-Net with the defaults (plus `extra` flags), evaluate; mean IoU checked against Keras'."""
    source = build_segmentation_corpus(os.path.join(work, f"masks{images}"), images)
    data, run = os.path.join(work, "mask_shards"), os.path.join(work, "mask_run")
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(run, ignore_errors=True)
    shardfeed("convert", source, data, "--split", "train=0.8,validation=0.2", "--no-report")
    _, seconds = shardfeed("train", data, "--out", run, *extra)
    out, _ = shardfeed("evaluate", run, "--json")
    result = json.loads(out)
    with open(os.path.join(run, "run.json")) as f:
        record = json.load(f)
    return {
        "flags": extra,
        "train_seconds": seconds,
        "model": record["model"],
        "epochs": record["epochs"],
        "image_size": record["image_size"],
        "augment": record["augment"],
        "validation_images": result["examples"],
        "mean_iou": result["mean_iou"],
        "pixel_accuracy": result["pixel_accuracy"],
        "per_class_iou": result["per_class_iou"],
    }


def detection(work: str, images: int) -> dict[str, Any]:
    """The shapes at known boxes (`build_shapes_coco_corpus`): convert the COCO JSON, train the
    detector with the defaults, evaluate (COCO's figures)."""
    from bench.corpus import build_shapes_coco_corpus

    listing = build_shapes_coco_corpus(os.path.join(work, f"boxes{images}"), images)
    data, run = os.path.join(work, "box_shards"), os.path.join(work, "box_run")
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(run, ignore_errors=True)
    shardfeed("convert", listing, data, "--split", "train=0.8,validation=0.2", "--no-report")
    _, seconds = shardfeed("train", data, "--out", run)
    out, _ = shardfeed("evaluate", run, "--json")
    result = json.loads(out)
    with open(os.path.join(run, "run.json")) as f:
        record = json.load(f)
    with open(os.path.join(run, "metrics.json")) as f:
        trained = json.load(f)
    keys = ("mAP", "mAP@0.5", "mAP@0.75", "mAP_small", "mAP_medium", "mAP_large", "per_class_ap")
    return {
        "train_seconds": seconds,
        "fit_seconds": trained["seconds"],
        "model": record["model"],
        "epochs": record["epochs"],
        "image_size": record["image_size"],
        "augment": record["augment"],
        "validation_images": result["examples"],
        **{key: result[key] for key in keys},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=600)
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "shardfeed_bench_tasks"))
    parser.add_argument("--tasks", default="multi_label,segmentation")
    parser.add_argument(
        "--segmentation-flags", default="", help="train flags beside the defaults, e.g. '--image-size 96'"
    )
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    before = os.getloadavg()
    results: dict[str, Any] = {"bench": "tasks", "images": args.images, "cores": os.cpu_count()}
    if "multi_label" in args.tasks:
        results["multi_label"] = multi_label(args.work, args.images)
    if "segmentation" in args.tasks:
        results["segmentation"] = segmentation(args.work, args.images, args.segmentation_flags.split())
    if "detection" in args.tasks:
        results["detection"] = detection(args.work, args.images)
    results["load_average"] = {"before": before, "after": os.getloadavg()}
    emit(results, args.json)


if __name__ == "__main__":
    main()
