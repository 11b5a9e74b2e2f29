"""`shardfeed info PATH`: splits, shards, records, classes, image stats and settings."""

from __future__ import annotations

import argparse
import json
from typing import Any

from shardfeed.cli.options import add_record_key_flags, foreign_keys
from shardfeed.read.options import BATCH_SIZE, SHUFFLES, ReadOptions
from shardfeed.tools.dataset_info import format_info, info


def register(sub: Any) -> None:
    p = sub.add_parser("info", help="describe converted shards (or other TFRecords)")
    p.add_argument("path", nargs="+", help="converted folder, or TFRecord files/globs")
    p.add_argument("--sample", type=int, default=1000, help="records per split sampled for image stats")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--all-classes", action="store_true", help="a histogram line for every class (default: a summary past 20)"
    )
    g = p.add_argument_group("shuffle quality (--shuffle-report)")
    g.add_argument(
        "--shuffle-report",
        action="store_true",
        help="run the training pipeline and compare its batches' label mix with an ideal shuffle",
    )
    g.add_argument("--split", default="train")
    g.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    g.add_argument("--batches", type=int, default=20, help="batches to inspect")
    g.add_argument("--shuffle", choices=SHUFFLES, default="buffer")
    g.add_argument("--shuffle-buffer", type=int, help="records in the shuffle buffer (default 4096)")
    g.add_argument("--seed", type=int, default=0)
    add_record_key_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    path = args.path[0] if len(args.path) == 1 else args.path
    if args.shuffle_report:
        from shardfeed.tools.shuffle_quality import format_report, shuffle_report

        read = ReadOptions(shuffle=args.shuffle, shuffle_buffer=args.shuffle_buffer)
        report = shuffle_report(
            str(path), split=args.split, batch_size=args.batch_size, batches=args.batches, seed=args.seed, read=read
        )
        print(json.dumps(report, indent=2) if args.json else format_report(report))
        return 0
    data = info(path, sample=args.sample, foreign=foreign_keys(args))
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else format_info(data, all_classes=args.all_classes))
    return 0
