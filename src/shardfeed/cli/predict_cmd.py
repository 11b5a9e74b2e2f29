"""`shardfeed predict RUN_DIR INPUT -o predictions.csv`: classes and top-k probabilities per file."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from shardfeed.cli.options import add_pixel_limit_flag, image_fields
from shardfeed.format.image_limits import DEFAULT_MAX_PIXELS
from shardfeed.training.prediction import predict
from shardfeed.training.run_folder import MODEL

log = logging.getLogger("shardfeed")


def register(sub: Any) -> None:
    p = sub.add_parser("predict", help="predict a folder of images (or unlabeled shards)")
    p.add_argument("run_dir", help="training run folder")
    p.add_argument("input", help="folder of images, or a converted folder")
    p.add_argument("-o", "--output", default="predictions.csv")
    p.add_argument("--top-k", type=int, default=3)
    p.add_argument("--split", help="for a converted folder: which split")
    p.add_argument("--grid", help="also draw the first images with their predicted classes to this PNG")
    p.add_argument("--model-file", default=MODEL)
    add_pixel_limit_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    rows = predict(
        args.run_dir,
        args.input,
        args.output,
        top_k=args.top_k,
        split=args.split,
        grid=args.grid,
        model_file=args.model_file,
        max_pixels=image_fields(args).get("max_pixels", DEFAULT_MAX_PIXELS),
    )
    failed = sum(1 for r in rows if r.get("error"))
    boxes = sum(1 for r in rows if "xmin" in r)  # a detection run: a row per box
    coco = f" ({boxes} boxes; COCO's results: {os.path.splitext(args.output)[0]}_coco.json)" if boxes else ""
    log.info(
        "Predicted %d files (%d unreadable) -> %s%s%s",
        len({r["file"] for r in rows}),
        failed,
        args.output,
        coco,
        f", grid {args.grid}" if args.grid else "",
    )
    return 0
