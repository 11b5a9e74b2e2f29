"""`shardfeed train PATH --out RUN_DIR`: train a Keras classifier on converted shards."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from shardfeed.cli.options import from_args
from shardfeed.read.options import SHUFFLES
from shardfeed.training.models import MODELS
from shardfeed.training.run_config import AUGMENT_PRESETS, TrainOptions
from shardfeed.training.trainer import train

log = logging.getLogger("shardfeed")


def register(sub: Any) -> None:
    p = sub.add_parser("train", help="train a classifier on converted shards")
    p.add_argument("path", help="converted folder")
    p.add_argument("--out", required=True, help="run folder (checkpoints, logs, model, metrics)")
    p.add_argument("--model", choices=MODELS, help=f"default {TrainOptions.model}")
    p.add_argument("--epochs", type=int, help=f"default {TrainOptions.epochs}")
    p.add_argument("--batch-size", type=int, help=f"default {TrainOptions.batch_size}")
    p.add_argument("--image-size", type=int, help=f"square input size in pixels (default {TrainOptions.image_size})")
    p.add_argument("--learning-rate", type=float, help=f"default {TrainOptions.learning_rate}")
    p.add_argument("--seed", type=int, help=f"default {TrainOptions.seed}")
    p.add_argument("--augment", choices=list(AUGMENT_PRESETS), help=f"default {TrainOptions.augment}")
    p.add_argument(
        "--shuffle",
        choices=SHUFFLES,
        help="'global': a seeded permutation of the whole split each epoch (needs uncompressed shards); "
        f"default {TrainOptions.shuffle}",
    )
    p.add_argument(
        "--save-every",
        type=int,
        metavar="STEPS",
        help="with --shuffle global: also snapshot every STEPS steps; --resume then continues mid-epoch at "
        "exactly the next batch",
    )
    p.add_argument("--crop-fraction", type=float, help=f"evaluation centre crop (default {TrainOptions.crop_fraction})")
    p.add_argument("--channels", type=int, choices=[1, 3], help=f"default {TrainOptions.channels}")
    p.add_argument("--mixed-precision", action="store_true", help="float16 compute (GPUs with tensor cores)")
    p.add_argument("--weights", help="local weights file to start from")
    p.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
    p.add_argument("--train-split", help=f"default {TrainOptions.train_split}")
    p.add_argument("--validation-split", help=f"default {TrainOptions.validation_split}")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    options = from_args(TrainOptions, args)
    metrics = train(args.path, args.out, options, weights=args.weights, resume=args.resume)
    log.info("Trained; final metrics: %s\nRun folder: %s", json.dumps(metrics), args.out)
    return 0
