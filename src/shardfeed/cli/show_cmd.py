"""`shardfeed show PATH`: a grid PNG of sample images with their class names."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from shardfeed.cli.options import add_record_key_flags, from_args
from shardfeed.format import manifest
from shardfeed.read.options import ReadOptions
from shardfeed.read.shardset import is_converted_folder
from shardfeed.tools.preview import show
from shardfeed.training.augment_choice import choose_augment
from shardfeed.training.options import AUGMENT_PRESETS, AUTO

log = logging.getLogger("shardfeed")


def register(sub: Any) -> None:
    p = sub.add_parser("show", help="draw sample images with their class names")
    p.add_argument("path", help="converted folder, or a folder/glob of TFRecords another program wrote")
    p.add_argument("-o", "--output", default="samples.png", help="PNG to write (default samples.png)")
    p.add_argument("--split", help="default: train, else the held-out split, else the only one")
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--cols", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--image-size", type=int, default=160, help="augmented: pipeline output size")
    p.add_argument("--augmented", action="store_true", help="show what the training pipeline feeds the model")
    p.add_argument(
        "--augment",
        choices=[AUTO, *AUGMENT_PRESETS],
        default=AUTO,
        help="with --augmented: the augmentation drawn; default auto: what `train --augment auto` picks for this data",
    )
    p.add_argument("--tensorboard", metavar="LOGDIR", help="also write TensorBoard image summaries")
    add_record_key_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    augment = None
    path: str = args.path
    if args.augmented and is_converted_folder(path):
        preset = args.augment
        if preset == AUTO:
            m = manifest.opened(path)
            choice = choose_augment(m, args.split or m.main_split(), seed=args.seed)
            log.info(
                "augment: %s, chosen for %s (as train --augment auto; --augment to draw another)",
                choice.preset,
                choice.reason,
            )
            preset = choice.preset
        augment = AUGMENT_PRESETS[preset] or False
    tiles = show(
        args.path,
        args.output,
        split=args.split,
        rows=args.rows,
        cols=args.cols,
        seed=args.seed,
        augmented=args.augmented,
        image_size=args.image_size,
        tensorboard=args.tensorboard,
        read=from_args(ReadOptions, args),
        augment=augment,
    )
    log.info(
        "Wrote %d images to %s%s",
        len(tiles),
        args.output,
        f" and TensorBoard logs to {args.tensorboard}" if args.tensorboard else "",
    )
    return 0
