"""What `train` chooses from the data when it is left to it: the model (`--model auto`), from the
training split's size and image sizes; the input size; the augmentation (augment_choice.py).

- images whose median shorter side is under `SMALL_SIDE` px (digits, icons): 'small_cnn'; an
  ImageNet backbone would see them upscaled 7-28x, and its features are made for photos;
- fewer than `FEW` training images: 'mobilenet_v3_small': phase 2 of fine-tuning a large
  network on a few hundred images overfits, and a small one trains 3-5x faster per image on a CPU
  (docs/training.md, backbones table), so trying settings is cheap;
- fewer than `MANY`: 'efficientnet_v2_b0', the best ImageNet accuracy per unit of compute of the
  backbones offered (78.7% top-1 at MobileNetV2's CPU cost; better ImageNet models transfer
  better, Kornblith et al. 2019);
- `MANY` or more: 'efficientnet_v2_s' (83.9% top-1), which that much data can fine-tune.

The input size (`choose_image_size`): 224 px, but a segmentation run trains at its images' own
size (their median shorter side, rounded up to a multiple of 8 for the U-Net's three poolings)
when that is smaller: upsampling a mask adds pixels, not detail, and the U-Net's cost grows with
them (96-px images at 224 px: 5.4x the pixels; issue 51's benchmark, docs/benchmarks/training.md).
A detection run likewise, rounded up to a multiple of 32 (the detector's coarsest feature map):
on a CPU the input size decides whether a detector learns in minutes (docs/benchmarks/training.md).

Masks and boxes (`_dense_model`): their U-Net or RetinaNet on 'mobilenet_v2' (`DENSE_BACKBONE`, the
TensorFlow segmentation tutorial's encoder, the smallest of the backbones to run) when its ImageNet
weights can be had (or --weights imagenet asks for them), as Model Garden starts its detectors and
segmenters from an ImageNet backbone; else the small U-Net or the small-ResNet RetinaNet, which
learn from random weights on a CPU (docs/benchmarks/training.md); images under `SMALL_SIDE` px too.

A backbone is only worth it with its ImageNet weights: when they cannot be had (not in Keras'
cache and no network: `backbones.imagenet_source`) or `--weights none` was asked for, fewer than
`MANY` images get 'small_cnn', which learns from random weights (on 360 photos of 6 classes,
mobilenet_v3_small from random weights stayed at chance, 0.167, where small_cnn reached 0.986:
issue 35).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from shardfeed.format import manifest
from shardfeed.read.options import BATCH_SIZE, IMAGE_SIZE
from shardfeed.training.augment_choice import choose_augment, median_short_side
from shardfeed.training.backbones import BACKBONES, IMAGENET, imagenet_source
from shardfeed.training.encoders import MULTIPLE
from shardfeed.training.options import AUTO, EPOCHS, TrainOptions
from shardfeed.training.tasks import Objective, objective_for

SMALL_SIDE = 64
FEW = 1_000
MANY = 50_000
DENSE_BACKBONE = "mobilenet_v2"  # the encoder of masks and boxes where ImageNet's weights can be had

log = logging.getLogger("shardfeed")


@dataclass(frozen=True)
class ModelChoice:
    """The model chosen and the reason, in words a user can check."""

    model: str
    reason: str


@dataclass(frozen=True)
class SizeChoice:
    """The input side chosen and the reason."""

    side: int
    reason: str


def choose_model(
    data: str | manifest.Manifest,
    split: str,
    *,
    seed: int = 0,
    weights: str = "auto",
    source: Callable[[str], str | None] = imagenet_source,
) -> ModelChoice:
    """The model for training on `data[split]` (see the module docstring).

    Args:
        weights: the run's --weights ('auto', 'imagenet', 'none' or a file).
        source: where a backbone's ImageNet weights would come from (`imagenet_source`).
    """
    m = manifest.opened(data)
    count = m.split(split).num_records
    side = median_short_side(m, split, seed=seed)
    objective = objective_for(m.header.task, m.path)
    if objective.own_model is not None:
        return _dense_model(objective, side, weights, source)
    if side < SMALL_SIDE:
        return ModelChoice("small_cnn", f"small images (median shorter side {side:g} px < {SMALL_SIDE})")
    backbone = _by_size(count)
    if weights == "none" and count < MANY:
        why = f"{count:,} training images from random weights (--weights none): a small CNN learns from them"
        return ModelChoice("small_cnn", why)
    if weights == "auto" and count < MANY and source(backbone.model) is None:
        return ModelChoice(
            "small_cnn",
            f"{count:,} training images, and no ImageNet weights for {backbone.model} (not in Keras' cache, no "
            "network): small_cnn learns from random weights, a backbone would need far more images",
        )
    return backbone


def _dense_model(objective: Objective, side: float, weights: str, source: Callable[[str], str | None]) -> ModelChoice:
    """The model for masks or boxes (module docstring)."""
    own, what = objective.own_model or "", objective.what
    if side < SMALL_SIDE:
        return ModelChoice(own, f"{what} on small images (median shorter side {side:g} px < {SMALL_SIDE})")
    found = source(DENSE_BACKBONE) if weights == AUTO else None
    if weights == IMAGENET or found is not None:
        where = {"cache": "in Keras' cache", "network": "downloadable"}.get(found or "", "asked for")
        return ModelChoice(DENSE_BACKBONE, f"{what}, and ImageNet weights for {DENSE_BACKBONE} ({where}): its encoder")
    if weights == AUTO:
        why = f"no ImageNet weights for {DENSE_BACKBONE} (not in Keras' cache, no network)"
    else:
        why = f"--weights {weights}"
    return ModelChoice(own, f"{what}, {why}: {own} learns from random weights")


def _by_size(count: int) -> ModelChoice:
    """The backbone for `count` training photos."""
    if count < FEW:
        return ModelChoice("mobilenet_v3_small", f"{count:,} training images (< {FEW:,}): a small, fast backbone")
    if count < MANY:
        return ModelChoice(
            "efficientnet_v2_b0", f"{count:,} photos (< {MANY:,}): the most accurate backbone per unit of compute"
        )
    return ModelChoice("efficientnet_v2_s", f"{count:,} photos (>= {MANY:,}): enough to fine-tune a larger backbone")


def choose_image_size(data: str | manifest.Manifest, split: str, *, seed: int = 0, model: str = AUTO) -> SizeChoice:
    """The input side for training `model` on `data[split]` when none is asked for (module
    docstring): a backbone's U-Net takes multiples of 32 (training/encoders.py)."""
    m = manifest.opened(data)
    objective = objective_for(m.header.task, m.path)
    multiple = objective.size_multiple
    if multiple is None:
        return SizeChoice(IMAGE_SIZE, "the default")
    if model in BACKBONES:
        multiple = MULTIPLE
    what = objective.what
    side = median_short_side(m, split, seed=seed)
    own = max(multiple, -(-int(side) // multiple) * multiple)  # rounded up to a multiple of the model's
    if own >= IMAGE_SIZE:
        return SizeChoice(IMAGE_SIZE, f"{what} on images of {side:g} px (median shorter side): the default")
    return SizeChoice(own, f"{what} on images of {side:g} px (median shorter side): their own size, not upsampled")


def resolved(options: TrainOptions, data: manifest.Manifest) -> TrainOptions:
    """`options` with what was left to the data chosen from it, each choice and its reason
    logged: model='auto' (`choose_model`), no image size (`choose_image_size`, said where it
    is not the default), no epochs or batch size (the task's: `EPOCHS`, `BATCH_SIZE`,
    or its own, said: training/tasks/) and augment='auto' (`choose_augment`)."""
    split, seed = options.train_split, options.seed
    if options.model == AUTO:
        model = choose_model(data, split, seed=seed, weights=options.weights)
        log.info("model: %s, chosen for %s (--model to override)", model.model, model.reason)
        options = replace(options, model=model.model)
    if options.image_size is None:
        size = choose_image_size(data, split, seed=seed, model=options.model)
        if size.side != IMAGE_SIZE:
            log.info("image size: %d, chosen for %s (--image-size to override)", size.side, size.reason)
        options = replace(options, image_size=size.side)
    objective = objective_for(data.header.task, data.path)
    if options.epochs is None:
        if objective.epochs != EPOCHS:
            log.info("epochs: %d, %s (--epochs)", objective.epochs, objective.defaults_why)
        options = replace(options, epochs=objective.epochs)
    if options.batch_size is None:
        if objective.batch_size != BATCH_SIZE:
            log.info("batch size: %d, %s (--batch-size)", objective.batch_size, objective.defaults_why)
        options = replace(options, batch_size=objective.batch_size)
    if options.augment == AUTO:
        choice = choose_augment(data, split, seed=seed)
        log.info("augment: %s, chosen for %s (--augment to override)", choice.preset, choice.reason)
        options = replace(options, augment=choice.preset)
    return options
