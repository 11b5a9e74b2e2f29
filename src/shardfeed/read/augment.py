"""On-read augmentation options and the per-image transforms they switch on.

Every random choice uses stateless ops seeded per image, so a seeded pipeline gives the same
augmented batches on every run, whatever the parallelism.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.lazy import tensorflow


@dataclass(frozen=True)
class Augment:
    """Training-time augmentation.

    Attributes:
        crop: Inception-style random-resized crop (area 8-100%, aspect 3/4-4/3), decoded with
            `decode_and_crop_jpeg` so only the crop is decoded. False: eval-style centre crop.
        area_range: the crop's share of the image area.
        aspect_ratio_range: the crop's width/height range.
        flip: random horizontal flip.
        rotate: maximum random rotation, in degrees (0: none).
        translate: maximum random shift, as a fraction of the output size (0: none), e.g. 0.1 moves
            a 32-px image by up to 3 px each way: the usual augmentation for small, centred images
            (digits, icons, CIFAR), where a random-resized crop would cut the object away.
        noise: standard deviation of added Gaussian noise, in 0..255 pixel units (0: none).
        color_jitter: strength of random brightness/contrast/saturation changes, 0..1 (0: none).
        min_visible: detection: a box keeps at least this share of its area inside the crop, or
            it is dropped from the batch (the others are clipped to the crop).
    """

    crop: bool = True
    area_range: tuple[float, float] = (0.08, 1.0)
    aspect_ratio_range: tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True
    rotate: float = 0.0
    translate: float = 0.0
    noise: float = 0.0
    color_jitter: float = 0.0
    min_visible: float = 0.25

    def __post_init__(self) -> None:
        if not 0 <= self.min_visible <= 1:
            raise OptionError(f"min_visible is a share of a box's area, 0..1, got {self.min_visible}")
        low, high = self.area_range
        if not 0 < low <= high <= 1:
            raise OptionError(f"area_range must satisfy 0 < low <= high <= 1, got {self.area_range}")
        if not 0 < self.aspect_ratio_range[0] <= self.aspect_ratio_range[1]:
            raise OptionError(f"aspect_ratio_range must be increasing and positive, got {self.aspect_ratio_range}")
        if not 0 <= self.rotate <= 180:
            raise OptionError(f"rotate is a maximum angle in degrees, 0..180, got {self.rotate}")
        if not 0 <= self.translate < 0.5:
            raise OptionError(f"translate is a fraction of the image size, 0 <= translate < 0.5, got {self.translate}")
        if self.noise < 0 or not 0 <= self.color_jitter <= 1:
            raise OptionError(f"noise must be >= 0 and color_jitter in 0..1, got {self.noise}, {self.color_jitter}")


def resolve_augment(augment: bool | Augment | None, training: bool) -> Augment | None:
    """`load`'s augment argument as the augmentation to apply: an `Augment` as given; True, or
    None when training, the default `Augment()`; otherwise none.

    Raises:
        OptionError: anything else (`augment="none"`, train's spelling, was truthy: it augmented).
    """
    if isinstance(augment, Augment):
        return augment
    if augment is not None and not isinstance(augment, bool):
        raise OptionError(f"augment takes True, False, None or an Augment, got {augment!r}")
    if augment is None:
        return Augment() if training else None
    return Augment() if augment else None


def random_crop_window(shape: Any, seed: Any, options: Augment) -> Any:
    """[offset_y, offset_x, height, width] of a random-resized crop of an image of `shape`."""
    tf = tensorflow()
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape,
        bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
        seed=seed,
        min_object_covered=0.1,
        aspect_ratio_range=options.aspect_ratio_range,
        area_range=options.area_range,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    return tf.stack([begin[0], begin[1], size[0], size[1]])


FLIP_KEY = (0x2545F4914F6CDD1D, 0x5851F42D4C957F2D)  # xor-ed into a record's seed pair for its flip


def flip_seed(seed: Any) -> Any:
    """The seed a record's flip draws from (its image's, boxes' and mask's alike): the record's
    seed pair xor-ed with FLIP_KEY, one op where a fold_in and a split took four (a gain within
    the noise of `load`'s CPU an image, docs/benchmarks/load.md). No other draw of the record
    uses that key: the crop draws from the pair itself (a pair xor-ed on its first word never
    equals another record's pair sharing that word), the other photometric steps from a split of
    fold_in(seed, 1); Philox's streams under distinct keys are independent."""
    tf = tensorflow()
    return tf.bitwise.bitwise_xor(seed, tf.constant(FLIP_KEY, seed.dtype))


def flipped(seed: Any) -> Any:
    """Whether a record is mirrored (a bool tensor): the draw `tf.image.stateless_random_flip_left_right`
    makes with `flip_seed(seed)` (a uniform below 0.5), for what is flipped without that op: boxes,
    the fused resize (read/native/fused_resize.py)."""
    tf = tensorflow()
    return tf.random.stateless_uniform([], seed=flip_seed(seed)) < 0.5


def photometric(image: Any, seed: Any, options: Augment) -> Any:
    """Flip, rotation/shift, colour jitter and noise on a float32 image in 0..255 (`seed`: the
    record's seed pair)."""
    tf = tensorflow()
    seeds = tf.random.experimental.stateless_split(tf.random.experimental.stateless_fold_in(seed, 1), 6)
    if options.flip:
        image = tf.image.stateless_random_flip_left_right(image, flip_seed(seed))
    if options.rotate or options.translate:
        image = _rotate_and_shift(image, seeds[1], options.rotate, options.translate)
    if options.color_jitter:
        s = options.color_jitter
        image = tf.image.stateless_random_brightness(image, 255.0 * 0.4 * s, seeds[2])
        image = tf.image.stateless_random_contrast(image, 1 - 0.4 * s, 1 + 0.4 * s, seeds[3])
        if image.shape[-1] == 3:
            image = tf.image.stateless_random_saturation(image, 1 - 0.4 * s, 1 + 0.4 * s, seeds[4])
    if options.noise:
        image = image + tf.random.stateless_normal(tf.shape(image), seeds[5], stddev=options.noise)
    return tf.clip_by_value(image, 0.0, 255.0)


def _rotate_and_shift(image: Any, seed: Any, max_degrees: float, max_shift: float) -> Any:
    """Rotates about the centre by a random angle in [-max_degrees, max_degrees] and shifts by up to
    `max_shift` of the size each way, in one resampling, filling with edge pixels."""
    tf = tensorflow()
    angle = tf.random.stateless_uniform([], seed, -max_degrees, max_degrees) * (math.pi / 180.0)
    height = tf.cast(tf.shape(image)[0], tf.float32)
    width = tf.cast(tf.shape(image)[1], tf.float32)
    shift = tf.random.stateless_uniform(
        [2], tf.random.experimental.stateless_fold_in(seed, 1), -max_shift, max_shift
    ) * tf.stack([width, height])
    shift = tf.round(shift) if not max_degrees else shift  # whole pixels: a pure shift stays sharp
    cos, sin = tf.cos(angle), tf.sin(angle)
    x_offset = ((width - 1) - (cos * (width - 1) - sin * (height - 1))) / 2.0 - shift[0]
    y_offset = ((height - 1) - (sin * (width - 1) + cos * (height - 1))) / 2.0 - shift[1]
    transform = tf.stack([cos, -sin, x_offset, sin, cos, y_offset, 0.0, 0.0])[tf.newaxis]
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=image[tf.newaxis],
        transforms=transform,
        output_shape=tf.shape(image)[:2],
        fill_value=0.0,
        interpolation="BILINEAR",
        fill_mode="NEAREST",
    )[0]
