"""`shardfeed bench PATH`: throughput of the load pipeline (and baselines with --compare-folder)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from shardfeed.read.options import SHUFFLES, ReadConfig
from shardfeed.tools.benchmark import bench


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="measure load-pipeline throughput")
    p.add_argument("path", help="converted folder")
    p.add_argument("--split", default="train")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--epochs", type=int, default=1, help="passes to time")
    p.add_argument(
        "--eval", dest="training", action="store_false", default=None, help="evaluation preprocessing (no augmentation)"
    )
    p.add_argument("--no-augment", dest="augment", action="store_false", default=None, help="no augmentation")
    p.add_argument("--shuffle", choices=SHUFFLES, default="buffer", help="training shuffle to measure (see `load`)")
    p.add_argument(
        "--compare-folder",
        metavar="SRC",
        help="also measure image_dataset_from_directory on SRC and the in-memory decode ceiling, and print ratios",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    result = bench(
        args.path,
        split=args.split,
        batch_size=args.batch_size,
        image_size=args.image_size,
        training=args.training,
        epochs=args.epochs,
        compare_folder=args.compare_folder,
        augment=args.augment,
        read=ReadConfig(shuffle=args.shuffle),
    )
    print(json.dumps(result, indent=2) if args.json else format_bench(result))
    return 0


def format_bench(result: dict[str, Any]) -> str:
    def line(name: str, t: dict[str, Any]) -> str:
        return (
            f"{name:<28} {t['images_per_second']:8.0f} img/s  {t['batches_per_second']:6.1f} batches/s  "
            f"warm-up {t['warmup_seconds']:.1f}s  CPU {t['cpu_cores_used']:.1f} cores"
        )

    lines = [line("shardfeed.load", result["shardfeed"])]
    for key, name in (("keras_folder", "image_dataset_from_directory"), ("decode_ceiling", "in-memory decode")):
        if key in result:
            lines.append(line(name, result[key]))
    for key, ratio in result.get("ratios", {}).items():
        lines.append(f"ratio {key}: {ratio:.2f}x")
    return "\n".join(lines)
