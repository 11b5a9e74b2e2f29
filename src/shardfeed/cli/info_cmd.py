"""`shardfeed info PATH`: splits, shards, records, classes, image stats and settings."""

from __future__ import annotations

import argparse
import json
from typing import Any

from shardfeed.info import format_info, info


def register(sub: Any) -> None:
    p = sub.add_parser("info", help="describe converted shards (or other TFRecords)")
    p.add_argument("path", nargs="+", help="converted folder, or TFRecord files/globs")
    p.add_argument("--sample", type=int, default=1000, help="records per split sampled for image stats")
    p.add_argument("--image-key", help="other TFRecords: the image feature")
    p.add_argument("--label-key", help="other TFRecords: the label feature (counts classes)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    path = args.path[0] if len(args.path) == 1 else args.path
    data = info(path, sample=args.sample, image_key=args.image_key, label_key=args.label_key)
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else format_info(data))
    return 0
