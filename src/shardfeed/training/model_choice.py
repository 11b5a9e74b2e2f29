"""The model `train --model auto` picks, from the training split's size and image sizes.

- images whose median shorter side is under `SMALL_SIDE` px (digits, icons): 'small_cnn'; an
  ImageNet backbone would see them upscaled 7-28x, and its features are made for photos;
- fewer than `FEW` training images: 'mobilenet_v3_small': phase 2 of fine-tuning a large
  network on a few hundred images overfits, and a small one trains 3-5x faster per image on a CPU
  (docs/training.md, backbones table), so trying settings is cheap;
- fewer than `MANY`: 'efficientnet_v2_b0', the best ImageNet accuracy per unit of compute of the
  backbones offered (78.7% top-1 at MobileNetV2's CPU cost; better ImageNet models transfer
  better, Kornblith et al. 2019);
- `MANY` or more: 'efficientnet_v2_s' (83.9% top-1), which that much data can fine-tune.

A backbone is only worth it with its ImageNet weights: when they cannot be had (not in Keras'
cache and no network: `models.imagenet_source`) or `--weights none` was asked for, fewer than
`MANY` images get 'small_cnn', which learns from random weights (on 360 photos of 6 classes,
mobilenet_v3_small from random weights stayed at chance, 0.167, where small_cnn reached 0.986:
issue 35).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shardfeed.format import manifest
from shardfeed.training.augment_choice import median_short_side
from shardfeed.training.models import imagenet_source

SMALL_SIDE = 64
FEW = 1_000
MANY = 50_000


@dataclass(frozen=True)
class ModelChoice:
    """The model chosen and the reason, in words a user can check."""

    model: str
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


def _by_size(count: int) -> ModelChoice:
    """The backbone for `count` training photos."""
    if count < FEW:
        return ModelChoice("mobilenet_v3_small", f"{count:,} training images (< {FEW:,}): a small, fast backbone")
    if count < MANY:
        return ModelChoice(
            "efficientnet_v2_b0", f"{count:,} photos (< {MANY:,}): the most accurate backbone per unit of compute"
        )
    return ModelChoice("efficientnet_v2_s", f"{count:,} photos (>= {MANY:,}): enough to fine-tune a larger backbone")
