"""`grain_dataset` beyond one label: boxes, masks and k-hot vectors moved with the pixels by
the same rules as `load` (read/grain_targets.py), checked three ways: exact coordinates on a
coordinate-map image (the window each output shows is read off its own pixels), boxes and masks
on the pasted squares of real photos, and evaluation batches equal to `load`'s."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_box_geometry import BOXES, coordinate_map_folder, expected_boxes
from test_coco import boxes_frame_objects, coco  # noqa: F401  (a fixture)
from test_grain_pipeline import site_without_tensorflow  # noqa: F401  (a fixture)
from test_multi_label import converted, listed  # noqa: F401  (fixtures)
from test_segmentation import aligned, segmentation_folder

from shardfeed import Augment, ConvertOptions, DecodeOptions, IndexedRecords, convert, grain_dataset, load
from shardfeed.read.options import BOX_FORMATS
from shardfeed.read.order import global_order
from shardfeed.write.sources import CocoSource

pytest.importorskip("grain")


def batches(ds: object) -> list[tuple[np.ndarray, object]]:
    return list(ds)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def boxes_map(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return coordinate_map_folder(tmp_path_factory.mktemp("map"))


@pytest.fixture(scope="module")
def squares(coco: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("squares") / "out"
    convert(
        CocoSource(str(coco), str(coco.parent / "images")), str(out), ConvertOptions(split="train=1"), progress=False
    )
    return out


@pytest.fixture(scope="module")
def masks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("masks") / "out"
    source = segmentation_folder(tmp_path_factory.mktemp("seg"))
    convert(str(source), str(out), ConvertOptions(split="train=0.5,validation=0.5"), workers=1, progress=False)
    return out


def fitted_window(image: np.ndarray) -> tuple[float, float, float, float, bool]:
    """(x, y, width, height) of the source window a uint8 output of the coordinate map shows,
    and whether it was flipped: a line fitted to the middle row's red and the middle column's
    green (a bilinear resize of a ramp is the ramp, source = offset + (j + 0.5) * scale - 0.5),
    away from the edges, where the antialiasing filter meets the window's border."""
    out_h, out_w = image.shape[:2]
    j = np.arange(4, out_w - 4)
    slope_x, at_x = np.polyfit(j, image[out_h // 2, j, 0].astype(float), 1)
    flipped = slope_x < 0
    if flipped:
        image = image[:, ::-1]
        slope_x, at_x = np.polyfit(j, image[out_h // 2, j, 0].astype(float), 1)
    i = np.arange(4, out_h - 4)
    slope_y, at_y = np.polyfit(i, image[i, out_w // 2, 1].astype(float), 1)
    x, y = at_x + 0.5 - 0.5 * slope_x, at_y + 0.5 - 0.5 * slope_y
    return float(x), float(y), float(slope_x * out_w), float(slope_y * out_h), bool(flipped)


def test_random_crops_and_flips_give_the_exact_boxes(boxes_map: Path) -> None:
    size = (64, 96)
    flips, crops, dropped = set(), set(), 0
    for seed in range(40):
        ((images, targets),) = batches(grain_dataset(str(boxes_map), batch_size=1, image_size=size, seed=seed))
        window = fitted_window(images[0])
        want = expected_boxes(window, size, Augment().min_visible)
        labels = targets["labels"][0]
        got = targets["boxes"][0][labels >= 0]
        assert targets["boxes"].dtype == np.float32 and labels.dtype == np.int32
        assert got.shape == want.shape and np.allclose(got, want, atol=0.3), (seed, window, got, want)
        assert (targets["boxes"][0][labels < 0] == -1).all()
        flips.add(window[4])
        crops.add(round(window[2]))
        dropped += len(BOXES) - len(got)
    assert flips == {True, False} and len(crops) > 10 and dropped > 0  # the cases happened


@pytest.mark.slow
@pytest.mark.parametrize("letterbox", [False, True])
def test_evaluation_boxes_are_loads_in_every_format(boxes_map: Path, letterbox: bool) -> None:
    size = (80, 128)
    for name in BOX_FORMATS:
        decode = DecodeOptions(bounding_box_format=name, letterbox=letterbox, max_objects=5)
        ((_, theirs),) = list(load(str(boxes_map), batch_size=1, image_size=size, training=False, decode=decode))
        options = dict(bounding_box_format=name, letterbox=letterbox, max_objects=5)
        ((_, ours),) = batches(grain_dataset(str(boxes_map), batch_size=1, image_size=size, training=False, **options))
        assert ours["boxes"].shape == (1, 5, 4) and ours["labels"][0].tolist() == [0, 1, 0, -1, -1]
        assert np.allclose(ours["boxes"], theirs["boxes"].numpy(), atol=1e-3), name
        assert ours["labels"].tolist() == theirs["labels"].numpy().tolist()


def test_boxes_frame_their_objects_on_real_photos_and_resume_exactly(squares: Path) -> None:
    ((images, targets),) = batches(grain_dataset(str(squares), batch_size=3, image_size=(120, 160), training=False))
    assert targets["boxes"].shape == (3, 2, 4) and boxes_frame_objects(images, targets) == 4  # every box kept
    seen = 0
    for seed in range(30):
        for images, targets in batches(grain_dataset(str(squares), batch_size=1, image_size=96, seed=seed)):
            seen += boxes_frame_objects(images, targets)
    assert seen > 10
    whole = batches(grain_dataset(str(squares), batch_size=1, image_size=64, seed=4, epochs=2))
    resumed = batches(grain_dataset(str(squares), batch_size=1, image_size=64, seed=4, start_epoch=1, start_step=1))
    for (x, y), (x2, y2) in zip(resumed, whole[4:], strict=True):
        assert (x == x2).all() and all((y[k] == y2[k]).all() for k in ("boxes", "labels"))


def test_masks_follow_crops_flips_and_the_letterbox(masks: Path) -> None:
    flipped = 0
    for seed in range(6):
        for images, target in batches(grain_dataset(str(masks), batch_size=2, image_size=96, seed=seed)):
            aligned(images, target)
            flipped += 1
    assert flipped >= 6
    for images, target in batches(grain_dataset(str(masks), split="validation", batch_size=2, image_size=(64, 80))):
        aligned(images, target)
    ours = batches(grain_dataset(str(masks), split="validation", batch_size=2, image_size=96, letterbox=True))
    theirs = list(
        load(str(masks), split="validation", batch_size=2, image_size=96, decode=DecodeOptions(letterbox=True))
    )
    for (images, target), (_, their_masks) in zip(ours, theirs, strict=True):
        aligned(images, target)
        padding = target == 255
        assert (images[padding] == 0).all() and padding.any(axis=(1, 2)).all()
        assert (target == their_masks.numpy()).mean() > 0.99  # load's letterbox; nearest-neighbour rounding aside


def test_multi_label_batches_are_k_hot_in_the_global_order(converted: Path) -> None:  # noqa: F811
    records = IndexedRecords(str(converted))
    ds = grain_dataset(str(converted), batch_size=2, image_size=32, seed=9)
    k_hot = np.concatenate([y for _, y in batches(ds)])
    want = [records[int(i)][1] for i in global_order(len(records), 9, 0)[: len(k_hot)]]
    assert k_hot.dtype == np.float32 and k_hot.shape[1] == 4 and (k_hot == np.stack(want)).all()


SCRIPT = """import importlib.util, sys
assert importlib.util.find_spec("tensorflow") is None
import shardfeed
ds = shardfeed.grain_dataset(sys.argv[1], batch_size=3, image_size=64, seed=0, num_workers=1)
(images, targets), = list(ds)
print(images.shape, targets["boxes"].shape[0], targets["labels"].dtype, "tensorflow" in sys.modules)
"""


@pytest.mark.slow
def test_detection_batches_need_no_tensorflow(squares: Path, site_without_tensorflow: str) -> None:  # noqa: F811
    src = str(Path(__file__).resolve().parents[1] / "src")
    done = subprocess.run(
        [sys.executable, "-S", "-c", SCRIPT, str(squares)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": f"{site_without_tensorflow}:{src}"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["(3,", "64,", "64,", "3)", "3", "int32", "False"]
