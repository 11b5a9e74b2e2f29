"""Exact box coordinates after random-resized crops, flips and letterboxing, computed here
independently of `load`: the image is a coordinate map (red = x, green = y, lossless PNG), so
the crop window and the flip each output image went through are read off its own pixels, and
the boxes they must give are worked out from the annotations alone. Then KerasHub's box formats
(checked against Keras' own `convert_format`) and a fixed number of objects per image.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shardfeed import Augment, ConvertOptions, DecodeOptions, OptionError, convert, load
from shardfeed.read.options import BOX_FORMATS

WIDTH, HEIGHT = 256, 160
BOXES = [(20.0, 30.0, 120.0, 90.0), (150.5, 10.0, 250.0, 150.0), (0.0, 100.0, 40.0, 160.0)]  # pixels, xyxy


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return coordinate_map_folder(tmp_path_factory.mktemp("geometry"))


def coordinate_map_folder(parent: Path) -> Path:
    """One coordinate-map image with three boxes, as a COCO detection folder, converted."""
    root = parent / "source"
    root.mkdir()
    x, y = np.meshgrid(np.arange(WIDTH), np.arange(HEIGHT))
    pixels = np.stack([x, y, np.full_like(x, 200)], axis=-1).astype(np.uint8)
    Image.fromarray(pixels).save(root / "map.png")
    annotations = [
        {"id": i, "image_id": 1, "category_id": i % 2, "bbox": [x0, y0, x1 - x0, y1 - y0], "iscrowd": 0}
        for i, (x0, y0, x1, y1) in enumerate(BOXES)
    ]
    document = {
        "images": [{"id": 1, "file_name": "map.png", "width": WIDTH, "height": HEIGHT}],
        "annotations": annotations,
        "categories": [{"id": 0, "name": "a"}, {"id": 1, "name": "b"}],
    }
    (root / "instances.json").write_text(json.dumps(document))
    out = root.parent / "out"
    convert(str(root / "instances.json"), str(out), ConvertOptions(split="train=1"), progress=False)
    return out


def window_of(image: np.ndarray) -> tuple[float, float, float, float, bool]:
    """(x, y, width, height) of the source window an output image shows, and whether it was
    flipped: bilinear resampling of a linear ramp is the ramp, so two interior samples per axis
    give the line source = offset + (j + 0.5) * scale - 0.5."""
    out_h, out_w = image.shape[:2]
    row, col = out_h // 2, out_w // 2
    j0, j1 = out_w // 4, 3 * out_w // 4
    i0, i1 = out_h // 4, 3 * out_h // 4
    slope_x = (image[row, j1, 0] - image[row, j0, 0]) / (j1 - j0)
    flipped = slope_x < 0
    if flipped:
        image = image[:, ::-1]
        slope_x = -slope_x
    slope_y = (image[i1, col, 1] - image[i0, col, 1]) / (i1 - i0)
    x = image[row, j0, 0] - (j0 + 0.5) * slope_x + 0.5
    y = image[i0, col, 1] - (i0 + 0.5) * slope_y + 0.5
    return float(x), float(y), float(slope_x * out_w), float(slope_y * out_h), bool(flipped)


def expected_boxes(window: tuple[float, float, float, float, bool], size: tuple[int, int], least: float) -> np.ndarray:
    """The annotated boxes as that window and flip put them in an output of `size` (H, W):
    clipped, those with less than `least` of their area left dropped."""
    x, y, w, h, flipped = window
    out_h, out_w = size
    kept = []
    for x0, y0, x1, y1 in BOXES:
        u = np.clip([(x0 - x) / w, (y0 - y) / h, (x1 - x) / w, (y1 - y) / h], 0, 1)
        before = ((x1 - x0) / w) * ((y1 - y0) / h)
        after = (u[2] - u[0]) * (u[3] - u[1])
        if after > 0 and after >= least * before:
            box = [u[0] * out_w, u[1] * out_h, u[2] * out_w, u[3] * out_h]
            kept.append([out_w - box[2], box[1], out_w - box[0], box[3]] if flipped else box)
    return np.array(kept, np.float64).reshape(-1, 4)


@pytest.mark.slow
def test_random_crops_and_flips_give_the_exact_boxes(folder: Path) -> None:
    size = (64, 96)
    decode = DecodeOptions(dtype="float32")
    flips, dropped, crops = set(), 0, set()
    # each epoch of a repeated dataset draws the image's crop and flip anew: 20 epochs of 2 seeds
    # (one pipeline a seed; a `load` per draw cost 40 traces)
    draws = [
        batch
        for seed in (0, 1)
        for batch in load(
            str(folder), batch_size=1, image_size=size, seed=seed, training=True, decode=decode, repeat=True
        ).take(20)
    ]
    for draw, (images, targets) in enumerate(draws):
        image, boxes, labels = images.numpy()[0], targets["boxes"].numpy()[0], targets["labels"].numpy()[0]
        window = window_of(image)
        want = expected_boxes(window, size, Augment().min_visible)
        got = boxes[labels >= 0]
        assert got.shape == want.shape and np.allclose(got, want, atol=0.02), (draw, window, got, want)
        flips.add(window[4])
        crops.add(round(window[2]))
        dropped += len(BOXES) - len(got)
    assert flips == {True, False} and len(crops) > 10 and dropped > 0  # the cases happened


def test_letterbox_is_tfs_resize_with_pad_and_the_boxes_follow(folder: Path) -> None:
    import tensorflow as tf

    size = (100, 120)
    decode = DecodeOptions(dtype="float32", letterbox=True)
    ((images, targets),) = list(load(str(folder), batch_size=1, image_size=size, training=False, decode=decode))
    image = images.numpy()[0]
    source = np.asarray(Image.open(folder.parent / "source" / "map.png"), np.float32)
    assert np.allclose(image, tf.image.resize_with_pad(source, *size).numpy(), atol=1e-3)  # TF's own letterbox
    rows, cols = np.nonzero(image[..., 2] > 0)  # the picture: blue 200 everywhere in the source
    top, left = rows.min(), cols.min()
    height, width = rows.max() + 1 - top, cols.max() + 1 - left
    scale = np.array([width / WIDTH, height / HEIGHT] * 2)
    want = np.array(BOXES) * scale + [left, top, left, top]
    assert np.allclose(targets["boxes"].numpy()[0], want, atol=1e-3)
    assert left == 0 and width >= 119 and 12 <= top <= 13  # fitted to the width (float32 floors 120 to 119, as TF)


@pytest.mark.slow
def test_box_formats_are_kerass_and_max_objects_fixes_the_shape(folder: Path) -> None:
    from keras.utils import bounding_boxes

    size = (80, 128)
    plain = load(str(folder), batch_size=1, image_size=size, training=False)
    ((_, reference),) = list(plain)
    xyxy = reference["boxes"].numpy()
    for name in BOX_FORMATS:
        ds = load(
            str(folder), batch_size=1, image_size=size, training=False, decode=DecodeOptions(bounding_box_format=name)
        )
        ((_, targets),) = list(ds)
        want = bounding_boxes.convert_format(xyxy, "xyxy", name, height=size[0], width=size[1])
        assert np.allclose(targets["boxes"].numpy(), np.asarray(want), atol=1e-4), name
        assert targets["labels"].numpy().tolist() == reference["labels"].numpy().tolist()
    fixed = load(str(folder), batch_size=1, image_size=size, training=False, decode=DecodeOptions(max_objects=5))
    ((_, targets),) = list(fixed)
    assert fixed.element_spec[1]["boxes"].shape.as_list() == [None, 5, 4]
    assert targets["labels"].numpy()[0].tolist() == [0, 1, 0, -1, -1]
    assert (targets["boxes"].numpy()[0, 3:] == -1).all()
    ((_, two),) = list(
        load(str(folder), batch_size=1, image_size=size, training=False, decode=DecodeOptions(max_objects=2))
    )
    assert two["labels"].numpy()[0].tolist() == [0, 1]  # the first two in stored order
    with pytest.raises(OptionError, match="bounding_box_format must be one of"):
        DecodeOptions(bounding_box_format="xywhr")
    with pytest.raises(OptionError, match="max_objects must be a positive int"):
        DecodeOptions(max_objects=0)
