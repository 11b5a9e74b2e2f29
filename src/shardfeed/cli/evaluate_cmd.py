"""`shardfeed evaluate RUN_DIR [PATH]`: loss, accuracy, top-k, per-class accuracy, confusion matrix
(multi-label: mAP, F1 at the run's thresholds, per-class AP; segmentation: mean IoU; detection: COCO's
mAP)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from shardfeed.training.detection_metrics import summary_line
from shardfeed.training.evaluation import evaluate
from shardfeed.training.run_folder import MODEL


def register(sub: Any) -> None:
    p = sub.add_parser("evaluate", help="evaluate a trained run on a split")
    p.add_argument("run_dir", help="training run folder")
    p.add_argument("path", nargs="?", help="converted folder (default: the one it was trained on)")
    p.add_argument("--split", help="default: validation, else val/valid/test/eval/dev, whichever the data has")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--model-file", default=MODEL, help="or checkpoints/best.keras")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    r = evaluate(args.run_dir, args.path, split=args.split, top_k=args.top_k, model_file=args.model_file)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    if "mAP@0.5" in r:
        print(detection_lines(r))
        return 0
    if "mAP" in r:
        print(multi_label_lines(r))
        return 0
    if "mean_iou" in r:
        print(segmentation_lines(r))
        return 0
    tops = [f", {k[:-9]} {v:.4f}" for k, v in r.items() if k.startswith("top") and k.endswith("_accuracy")]
    print(f"{r['examples']:,} images: loss {r['loss']:.4f}, accuracy {r['accuracy']:.4f}{''.join(tops)}")
    counts = [sum(row) for row in r["confusion_matrix"]]
    width = max(len("class"), *(len(n) for n in r["class_names"]))
    print(f"  {'class':<{width}}  {'images':>7}  {'accuracy':>8}")
    for (name, acc), count in zip(r["per_class_accuracy"].items(), counts, strict=True):
        print(f"  {name:<{width}}  {count:>7,}  {'-' if acc is None else f'{acc:.3f}':>8}")
    print(f"confusion matrix: {r['output_dir']}/confusion_matrix.png")
    return 0


def multi_label_lines(r: dict[str, Any]) -> str:
    """A multi-label evaluation: mAP and F1, then per class its images, AP, threshold, F1."""
    scored = "-" if r["mAP"] is None else f"{r['mAP']:.4f}"
    chosen = r["thresholds_chosen_on"]
    where = f"chosen on {chosen}" if chosen else "0.5, no validation to choose them on"
    lines = [
        f"{r['examples']:,} images: mAP {scored} ({r['classes_scored']} classes with images), loss {r['loss']:.4f}",
        f"  at the thresholds ({where}): micro F1 {r['micro_f1']:.4f}, macro F1 "
        f"{'-' if r['macro_f1'] is None else format(r['macro_f1'], '.4f')}, exact match {r['exact_match']:.4f}",
    ]
    width = max(len("class"), *(len(n) for n in r["class_names"]))
    lines.append(f"  {'class':<{width}}  {'images':>7}  {'AP':>6}  {'threshold':>9}  {'F1':>6}")
    for name in r["class_names"]:
        c = r["per_class"][name]
        ap, f1 = ("-" if c[k] is None else f"{c[k]:.3f}" for k in ("ap", "f1"))
        lines.append(f"  {name:<{width}}  {c['images']:>7,}  {ap:>6}  {c['threshold']:>9.3f}  {f1:>6}")
    lines.append(f"average precision per class: {r['output_dir']}/average_precision.png")
    return "\n".join(lines)


def detection_lines(r: dict[str, Any]) -> str:
    """A detection evaluation: COCO's figures, then each class's AP."""
    lines = [f"{r['examples']:,} images: {summary_line(r)} (COCO's, pycocotools)"]
    sizes = "  ".join(
        f"{k[4:]} {'n/a' if r[k] is None else format(r[k], '.4f')}" for k in ("mAP_small", "mAP_medium", "mAP_large")
    )
    lines.append(f"  by object size: {sizes}")
    width = max(len("class"), *(len(n) for n in r["class_names"]))
    lines.append(f"  {'class':<{width}}  {'AP':>6}")
    for name in r["class_names"]:
        ap = r["per_class_ap"][name]
        lines.append(f"  {name:<{width}}  {'-' if ap is None else f'{ap:.3f}':>6}")
    return "\n".join(lines)


def segmentation_lines(r: dict[str, Any]) -> str:
    """A segmentation evaluation: mean IoU and pixel accuracy, then per class its pixels and IoU."""
    iou = "-" if r["mean_iou"] is None else f"{r['mean_iou']:.4f}"
    accuracy = "-" if r["pixel_accuracy"] is None else f"{r['pixel_accuracy']:.4f}"
    lines = [f"{r['examples']:,} images ({r['pixels']:,} pixels): mean IoU {iou}, pixel accuracy {accuracy}"]
    width = max(len("class"), *(len(n) for n in r["class_names"]))
    lines.append(f"  {'class':<{width}}  {'pixels':>10}  {'IoU':>6}")
    for name in r["class_names"]:
        value = r["per_class_iou"][name]
        shown = "-" if value is None else f"{value:.3f}"
        lines.append(f"  {name:<{width}}  {r['per_class_pixels'][name]:>10,}  {shown:>6}")
    lines.append(f"images with their true and predicted masks: {r['output_dir']}/masks.png")
    return "\n".join(lines)
