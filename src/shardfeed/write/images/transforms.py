"""Write-time geometry: what --resize, --max-size and --center-crop do to an image, computed once
for the image's pixels (bilinear, antialiased) and for its segmentation mask (nearest), so that
the two are cut from the same region of the source and scaled to the same size.

    resize N        the shorter side becomes N pixels
    max_size N      the longer side becomes at most N pixels (resize wins when both are given)
    center_crop N   an N x N square from the centre, after resizing (upscaled when smaller)
"""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image

UPSCALED = "upscaled: smaller than the centre crop"
Size = tuple[int, int]  # (width, height), as Pillow gives sizes
Box = tuple[float, float, float, float]  # (left, top, right, bottom) in source pixels


@dataclass(frozen=True)
class Geometry:
    """The write-time resize and crop of `ImageOptions` (module docstring)."""

    resize: int | None = None
    max_size: int | None = None
    center_crop: int | None = None

    def scale(self, size: Size) -> float:
        """The scale --resize / --max-size apply to an image of `size` (1.0: none)."""
        width, height = size
        if self.resize:
            return self.resize / min(width, height)
        if self.max_size and max(width, height) > self.max_size:
            return self.max_size / max(width, height)
        return 1.0

    def upscales(self, size: Size) -> bool:
        """Whether the centre crop is larger than the (resized) image, so that it gets upscaled."""
        crop = self.center_crop
        return bool(crop) and min(size) * self.scale(size) < (crop or 0)

    def target_size(self, size: Size) -> Size | None:
        """The size before cropping, or None when no resize applies."""
        width, height = size
        scale = self.scale(size)
        if self.center_crop and self.upscales(size):
            scale = self.center_crop / min(width, height)
        if scale == 1.0:
            return None
        return max(1, round(width * scale)), max(1, round(height * scale))

    def region(self, size: Size) -> tuple[Size, Box | None]:
        """The output size of an image of `size`, and the region of the source it is made from
        (None: all of it)."""
        target = self.target_size(size) or size
        if not self.center_crop:
            return target, None
        crop = self.center_crop
        scale_x, scale_y = size[0] / target[0], size[1] / target[1]
        left, top = (target[0] - crop) // 2, (target[1] - crop) // 2
        return (crop, crop), (left * scale_x, top * scale_y, (left + crop) * scale_x, (top + crop) * scale_y)

    def apply(self, im: Image.Image) -> Image.Image:
        """Resize and centre-crop in one resampling pass over only the source pixels that are kept.

        Antialiased bilinear (as `tf.image.resize(antialias=True)`); `reducing_gap` lets Pillow
        box-reduce by an integer factor first when shrinking a lot, which is faster at equal quality.
        """
        out, box = self.region(im.size)
        if out == im.size and box is None:
            return im
        return im.resize(out, Image.Resampling.BILINEAR, box=box, reducing_gap=3.0)
