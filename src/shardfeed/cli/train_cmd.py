"""`shardfeed train PATH --out RUN_DIR`: train a Keras classifier on converted shards."""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace
from typing import Any

from shardfeed.cli.options import from_args
from shardfeed.errors import OptionError
from shardfeed.read.mixture import Mixture
from shardfeed.read.options import BATCH_SIZE, IMAGE_SIZE, SHUFFLES
from shardfeed.training.detection_metrics import summary_line
from shardfeed.training.devices import parse as parse_devices
from shardfeed.training.models import MODELS
from shardfeed.training.options import (
    AUGMENT_PRESETS,
    AUTO,
    DETECTION_BATCH_SIZE,
    DETECTION_EPOCHS,
    EPOCHS,
    TrainOptions,
)
from shardfeed.training.trainer import train

log = logging.getLogger("shardfeed")


def register(sub: Any) -> None:
    p = sub.add_parser("train", help="train a classifier on converted shards")
    p.add_argument(
        "path",
        nargs="+",
        help="converted folder; several: trained on as a mixture (--mix-weights), validated on the first",
    )
    p.add_argument(
        "--mix-weights",
        help="with several folders: their proportions, e.g. 0.7,0.3 (default equal); classes united by name",
    )
    p.add_argument("--out", required=True, help="run folder (checkpoints, logs, model, metrics)")
    p.add_argument(
        "--model",
        choices=[AUTO, *MODELS],
        help=f"default {TrainOptions.model}; auto: from the data; a backbone encodes masks/boxes (docs/training.md)",
    )
    p.add_argument("--epochs", type=int, help=f"default {EPOCHS}; boxes (detection): {DETECTION_EPOCHS}")
    p.add_argument("--batch-size", type=int, help=f"default {BATCH_SIZE}; boxes (detection): {DETECTION_BATCH_SIZE}")
    p.add_argument(
        "--image-size",
        type=int,
        help=f"square input size in pixels (default {IMAGE_SIZE}; for segmentation masks the images' own size, "
        f"at most {IMAGE_SIZE})",
    )
    p.add_argument("--learning-rate", type=float, help=f"default {TrainOptions.learning_rate}")
    p.add_argument("--seed", type=int, help=f"default {TrainOptions.seed}")
    p.add_argument(
        "--augment",
        choices=[AUTO, *AUGMENT_PRESETS],
        help="inception: random-resized crop + flip (photos); light: small shifts (small images); "
        f"default {TrainOptions.augment}: picked from the data's image sizes and count",
    )
    p.add_argument(
        "--shuffle",
        choices=SHUFFLES,
        help="'global': a seeded permutation of the whole split each epoch (needs uncompressed shards); "
        f"default {TrainOptions.shuffle}",
    )
    p.add_argument(
        "--balance",
        choices=["class"],
        help="imbalanced classes: read each class equally often per epoch (small classes repeat; global order)",
    )
    p.add_argument(
        "--class-weight",
        choices=["balanced"],
        help="imbalanced classes: weight the loss by n / (classes x class count), from the manifest",
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
    p.add_argument(
        "--precision",
        choices=["auto", "mixed", "float32"],
        help="auto (default): float16 compute with float32 logits when a GPU is present, else float32",
    )
    p.add_argument("--mixed-precision", action="store_true", default=None, help="the same as --precision mixed")
    _add_weights_flags(p)
    _add_device_flags(p)
    p.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
    p.add_argument(
        "--service", help="read through a tf.data service dispatcher, grpc://HOST:PORT (see `shardfeed serve`)"
    )
    p.add_argument("--train-split", help=f"default {TrainOptions.train_split}")
    p.add_argument(
        "--validation-split",
        help="a split name, 'none' to skip validation; default auto: validation, else val/valid/test/eval/dev",
    )
    p.set_defaults(
        run=run,
        interrupted="run the same command with --resume to continue from the last saved epoch (without it the "
        "run starts over in OUT)",
    )


def _add_device_flags(p: argparse.ArgumentParser) -> None:
    """Where and how the model computes: decoding device, several GPUs, BatchNorm statistics."""
    p.add_argument(
        "--decode-on",
        choices=["cpu", "gpu"],
        help="decode JPEGs with TensorFlow on the CPU (default) or NVIDIA DALI's nvJPEG on the GPU (`make dali`)",
    )
    p.add_argument(
        "--no-precise-bn",
        dest="precise_bn",
        action="store_false",
        default=None,
        help="keep Keras' moving BatchNorm statistics instead of recomputing them from training images before "
        "each validation and at the end",
    )
    p.add_argument(
        "--devices",
        type=parse_devices,
        metavar="N|all",
        help="train on N (or all) of this host's GPUs with MirroredStrategy, each batch split across them "
        f"(default {TrainOptions.devices})",
    )


def _add_weights_flags(p: argparse.ArgumentParser) -> None:
    """--weights and the fine-tuning schedule's flags (training/fine_tune.py)."""
    p.add_argument(
        "--weights",
        help="imagenet (Keras downloads and caches them), none (random), or a local file: backbone weights "
        "without the top, or a whole model's; default auto: imagenet for the keras.applications backbones, "
        "none for small_cnn",
    )
    p.add_argument(
        "--head-epochs",
        type=int,
        help="from pre-trained weights: epochs training only the head, backbone frozen, before fine-tuning "
        "(default: half the epochs; 0: fine-tune from the start)",
    )
    p.add_argument(
        "--fine-tune-from",
        help="the first backbone layer (name prefix) fine-tuning unfreezes; 'all' for every layer; default: "
        "the backbone's last stage",
    )
    p.add_argument(
        "--fine-tune-learning-rate",
        type=float,
        help="fine-tuning's starting rate (default: --learning-rate x 0.1, or x 0.01 for EfficientNetV2/ConvNeXt)",
    )


def run(args: argparse.Namespace) -> int:
    options = from_args(TrainOptions, args)
    if args.validation_split == "none":
        options = replace(options, validation_split=None)
    verbose = 1 if sys.stdout.isatty() else 2  # a progress bar per epoch on a terminal, a line per epoch in logs
    data: str | Mixture = args.path[0]
    if len(args.path) > 1:
        weights = [float(w) for w in args.mix_weights.split(",")] if args.mix_weights else [1.0] * len(args.path)
        data = Mixture(tuple(args.path), tuple(weights), union_labels=True)
    elif args.mix_weights:
        raise OptionError("--mix-weights needs several folders to mix")
    metrics = train(data, args.out, options, resume=args.resume, verbose=verbose)
    log.info("%s\nRun folder: %s (metrics.json has every figure)", summary(metrics), args.out)
    return 0


def summary(metrics: dict[str, Any]) -> str:
    """The end-of-training lines: validation (inference mode) first, then the training figures."""
    lines = [
        f"Trained {metrics['epochs'] - metrics['initial_epoch']} epochs in {metrics['seconds']:.0f} s "
        f"({metrics['train_images_per_second']:,.0f} images/s), augment {metrics['augment']}."
    ]
    if "val_accuracy" in metrics:
        lines.append(
            f"  validation: accuracy {metrics['val_accuracy']:.4f}, loss {metrics['val_loss']:.4f} (inference mode)"
        )
    elif "val_mean_iou" in metrics:
        lines.append(
            f"  validation: mean IoU {metrics['val_mean_iou']:.4f}, loss {metrics['val_loss']:.4f} (inference mode)"
        )
    elif "val_mAP@0.5" in metrics:
        lines.append(
            f"  validation: {summary_line({k: metrics[f'val_{k}'] for k in ('mAP', 'mAP@0.5', 'mAP@0.75')})} "
            f"(COCO's), loss {metrics['val_loss']:.4f} (inference mode)"
        )
    elif metrics.get("val_mAP") is not None:
        lines.append(
            f"  validation: mAP {metrics['val_mAP']:.4f}, micro F1 {metrics['val_micro_f1']:.4f} at the thresholds "
            f"chosen on it, loss {metrics['val_loss']:.4f} (inference mode)"
        )
    else:
        lines.append("  validation: none (no validation split)")
    if metrics.get("per_class_recall"):
        worst = sorted(metrics["per_class_recall"].items(), key=lambda kv: kv[1])[:5]
        shown = ", ".join(f"{name} {value:.2f}" for name, value in worst)
        lines.append(
            f"  per-class recall (classes {metrics['imbalance_ratio']:.1f}x imbalanced; lowest first): {shown}"
        )
    if (metrics.get("phases") and len(metrics["phases"]) > 1) or metrics.get("weights", "none") != "none":
        phases = "; ".join(
            f"{p['name']} epochs {p['start'] + 1}-{p['end']} at {p['learning_rate']:g}" for p in metrics["phases"]
        )
        lines.append(f"  from weights {metrics['weights']}: {phases}")
    if metrics.get("imbalance_remedy"):
        lines.append(f"  imbalance: {metrics['imbalance_remedy']}")
    if metrics.get("input_verdict"):
        lines.append(f"  input: {metrics['input_verdict']}")
    if "accuracy" in metrics and "train_accuracy_inference" in metrics:
        lines.append(
            f"  training images: accuracy {metrics['train_accuracy_inference']:.4f} in inference mode, "
            f"{metrics['accuracy']:.4f} while fitting ("
            f"{'augmented, ' if metrics.get('augment', 'none') != 'none' else ''}dropout, batch statistics)"
        )
    return "\n".join(lines)
