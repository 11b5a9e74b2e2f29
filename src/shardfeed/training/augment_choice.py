"""The augmentation `train` picks when none is asked for, from what the converted data says.

Inception's random-resized crop (8-100% of the area) is made for ImageNet-like photos; on small,
centred images (digits, faces, icons, tiles) it cuts the object away, and on a handful of images
any augmentation mostly slows a short run down. The rule, measured in docs/training.md
("Which augmentation"):

- fewer than `TINY_SET` training images: 'none';
- images whose median shorter side is at least `PHOTO_SIDE` px: 'inception';
- otherwise (small images): 'light' (shifts of a few pixels, small turns);
- segmentation masks (past `TINY_SET`): 'inception', whose crops and flips the masks follow
  (`load` refuses shifts and rotations for them);
- boxes: 'flip' (horizontal flips alone), whatever the count: the detector's measured setting
  (docs/benchmarks/training.md); a random crop would cut objects away or drop them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from shardfeed.format import manifest, schema
from shardfeed.read.sampling import sample_examples
from shardfeed.training.tasks import objective_for

TINY_SET = 500
PHOTO_SIDE = 128
SAMPLE = 200


@dataclass(frozen=True)
class AugmentChoice:
    """The preset chosen and the reason, in words a user can check."""

    preset: str
    reason: str


def choose_augment(
    data: str | manifest.Manifest, split: str, *, seed: int = 0, tiny_set: int = TINY_SET, photo_side: int = PHOTO_SIDE
) -> AugmentChoice:
    """The augmentation preset for training on `data[split]` (see the module docstring).

    Reads the split's record count from the manifest and the image sizes of up to `SAMPLE`
    records picked through the index (nothing else is read).
    """
    m = manifest.opened(data)
    count = m.split(split).num_records
    own = objective_for(m.header.task, m.path).augment(count, tiny_set)  # masks and boxes: their own
    if own is not None:
        return AugmentChoice(*own)
    if count < tiny_set:
        return AugmentChoice("none", f"{count} training images (< {tiny_set}): too few for augmentation to pay off")

    side = median_short_side(m, split, seed=seed)
    if side >= photo_side:
        return AugmentChoice(
            "inception", f"photo-sized images (median shorter side {side:g} px >= {photo_side}): random-resized crops"
        )
    return AugmentChoice(
        "light",
        f"small images (median shorter side {side:g} px < {photo_side}): small shifts and turns, as "
        "random-resized crops would cut the object away",
    )


def median_short_side(data: str | manifest.Manifest, split: str, *, seed: int = 0) -> float:
    """The median of min(height, width) over a random sample of the split's records."""
    sides = []
    for features in sample_examples(data, split, SAMPLE, seed):
        height = int(features.get(schema.HEIGHT, 0))
        width = int(features.get(schema.WIDTH, 0))
        sides.append(min(height, width))
    return float(statistics.median(sides)) if sides else 0.0
