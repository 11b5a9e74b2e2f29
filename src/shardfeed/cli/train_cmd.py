"""`shardfeed train PATH --out RUN_DIR`: train a Keras classifier on converted shards."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from shardfeed.dataset import SHUFFLES
from shardfeed.models import MODELS
from shardfeed.train import AUGMENT_PRESETS, train

log = logging.getLogger("shardfeed")


def register(sub: Any) -> None:
    p = sub.add_parser("train", help="train a classifier on converted shards")
    p.add_argument("path", help="converted folder")
    p.add_argument("--out", required=True, help="run folder (checkpoints, logs, model, metrics)")
    p.add_argument("--model", choices=MODELS, default="small_cnn")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--augment", choices=list(AUGMENT_PRESETS), default="inception")
    p.add_argument(
        "--shuffle",
        choices=SHUFFLES,
        default="buffer",
        help="'global': a seeded permutation of the whole split each epoch (needs uncompressed shards)",
    )
    p.add_argument(
        "--save-every",
        type=int,
        metavar="STEPS",
        help="with --shuffle global: also snapshot every STEPS steps; --resume then continues mid-epoch at "
        "exactly the next batch",
    )
    p.add_argument("--crop-fraction", type=float, default=0.875, help="evaluation centre crop")
    p.add_argument("--channels", type=int, choices=[1, 3], default=3)
    p.add_argument("--mixed-precision", action="store_true", help="float16 compute (GPUs with tensor cores)")
    p.add_argument("--weights", help="local weights file to start from")
    p.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
    p.add_argument("--train-split", default="train")
    p.add_argument("--validation-split", default="validation")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    metrics = train(
        args.path,
        args.out,
        model=args.model,
        epochs=args.epochs,
        batch_size=args.batch_size,
        image_size=args.image_size,
        learning_rate=args.learning_rate,
        seed=args.seed,
        augment=args.augment,
        crop_fraction=args.crop_fraction,
        channels=args.channels,
        mixed_precision=args.mixed_precision,
        weights=args.weights,
        resume=args.resume,
        train_split=args.train_split,
        validation_split=args.validation_split,
        shuffle=args.shuffle,
        save_every=args.save_every,
    )
    log.info("Trained; final metrics: %s\nRun folder: %s", json.dumps(metrics), args.out)
    return 0
