"""`shardfeed evaluate RUN_DIR [PATH]`: loss, accuracy, top-k, per-class accuracy, confusion matrix."""

from __future__ import annotations

import argparse
import json
from typing import Any

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
    tops = [f", {k[:-9]} {v:.4f}" for k, v in r.items() if k.startswith("top") and k.endswith("_accuracy")]
    print(f"{r['examples']:,} images: loss {r['loss']:.4f}, accuracy {r['accuracy']:.4f}{''.join(tops)}")
    counts = [sum(row) for row in r["confusion_matrix"]]
    width = max(len("class"), *(len(n) for n in r["class_names"]))
    print(f"  {'class':<{width}}  {'images':>7}  {'accuracy':>8}")
    for (name, acc), count in zip(r["per_class_accuracy"].items(), counts, strict=True):
        print(f"  {name:<{width}}  {count:>7,}  {'-' if acc is None else f'{acc:.3f}':>8}")
    print(f"confusion matrix: {r['output_dir']}/confusion_matrix.png")
    return 0
