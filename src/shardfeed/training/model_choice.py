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
"""

from __future__ import annotations

from dataclasses import dataclass

from shardfeed.format import manifest
from shardfeed.training.augment_choice import median_short_side

SMALL_SIDE = 64
FEW = 1_000
MANY = 50_000


@dataclass(frozen=True)
class ModelChoice:
    """The model chosen and the reason, in words a user can check."""

    model: str
    reason: str


def choose_model(data: str | manifest.Manifest, split: str, *, seed: int = 0) -> ModelChoice:
    """The model for training on `data[split]` (see the module docstring)."""
    m = manifest.opened(data)
    count = m.split(split).num_records
    side = median_short_side(m, split, seed=seed)
    if side < SMALL_SIDE:
        return ModelChoice("small_cnn", f"small images (median shorter side {side:g} px < {SMALL_SIDE})")
    if count < FEW:
        return ModelChoice("mobilenet_v3_small", f"{count:,} training images (< {FEW:,}): a small, fast backbone")
    if count < MANY:
        return ModelChoice(
            "efficientnet_v2_b0", f"{count:,} photos (< {MANY:,}): the most accurate backbone per unit of compute"
        )
    return ModelChoice("efficientnet_v2_s", f"{count:,} photos (>= {MANY:,}): enough to fine-tune a larger backbone")
