"""COCO detection annotations converted to the records Model Garden's detection decoder reads:
boxes that frame their objects' pixels after the EXIF turn, the resize and the crop; every
annotation written, clipped, or reported with its reason.

The annotations file is written in COCO's own conventions (bbox [x, y, width, height] in pixels,
category ids with gaps, iscrowd, area), over real photos with solid squares pasted at known
places; the decoder is Model Garden's (tests/test_annotations.py cites the source).
"""

from __future__ import annotations

import importlib.util
import io
import json
import math
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import photos, shard_bytes
from PIL import Image
from test_annotations import model_garden_decode

from shardfeed import (
    Augment,
    ConvertError,
    ConvertOptions,
    DecodeOptions,
    ImageOptions,
    IndexedRecords,
    OptionError,
    ReadOptions,
    convert,
    load,
)
from shardfeed.format import manifest, schema, tfrecord
from shardfeed.write.sources import CocoSource

RED, BLUE = (255, 0, 0), (0, 0, 255)
CATEGORIES = [{"id": 18, "name": "dog"}, {"id": 1, "name": "person"}, {"id": 3, "name": "car"}]  # ids with gaps
# image -> squares (colour, COCO category id, (x, y, w, h)), pasted on the photo as stored
SQUARES = {
    "chelsea.png": [(RED, 1, (40, 30, 80, 70)), (BLUE, 18, (300, 150, 160, 110))],  # the blue one sticks out: clipped
    "coffee.png": [(BLUE, 3, (10, 200, 80, 90))],
    "astronaut.png": [],  # no objects: kept
}


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("coco")
    (root / "images").mkdir()
    images, annotations, next_id = [], [], 100
    for image_id, (name, squares) in enumerate(SQUARES.items(), start=1):
        photo = photos()[name.split(".")[0]].copy()
        for colour, category, (x, y, w, h) in squares:
            photo[y : y + h, x : x + w] = colour
            annotations.append(
                {"id": next_id, "image_id": image_id, "category_id": category, "bbox": [x, y, w, h], "iscrowd": 0}
            )
            next_id += 1
        if name == "coffee.png":
            photo[20:50, 20:50] = RED  # the crowd annotation (204, below)
        Image.fromarray(photo).save(root / "images" / name)
        images.append({"id": image_id, "file_name": name, "height": photo.shape[0], "width": photo.shape[1]})
    annotations += [
        {"id": 200, "image_id": 1, "category_id": 1, "bbox": [500, 10, 20, 20], "iscrowd": 0},  # outside 451 x 300
        {"id": 201, "image_id": 1, "category_id": 1, "bbox": [10, 10, 0, 30], "iscrowd": 0},  # no width
        {"id": 202, "image_id": 9, "category_id": 1, "bbox": [1, 1, 2, 2], "iscrowd": 0},  # no such image
        {"id": 203, "image_id": 2, "category_id": 7, "bbox": [1, 1, 2, 2], "iscrowd": 0},  # no such category
        {"id": 204, "image_id": 2, "category_id": 1, "bbox": [20, 20, 30, 30], "iscrowd": 1, "area": 400.0},
    ]
    images.append({"id": 5, "file_name": "missing.png", "height": 10, "width": 10})
    images.append({"id": 6, "file_name": "../outside.png", "height": 10, "width": 10})
    document = {"images": images, "annotations": annotations, "categories": CATEGORIES}
    (root / "instances.json").write_text(json.dumps(document))
    return root / "instances.json"


def decoded(out: Path) -> dict[str, dict[str, np.ndarray]]:
    rows = IndexedRecords(str(out), split="train")
    return {rows.example(i)[schema.FILENAME].decode(): model_garden_decode(rows.record(i)) for i in range(len(rows))}


def frames(image: np.ndarray, box: np.ndarray, colour: tuple[int, int, int], tolerance: int) -> None:
    """The decoded box [ymin, xmin, ymax, xmax] holds the object's pixels and no more of them."""
    height, width = image.shape[:2]
    ymin, xmin, ymax, xmax = box
    rows, cols = slice(round(ymin * height), round(ymax * height)), slice(round(xmin * width), round(xmax * width))
    near = np.abs(image.astype(int) - colour).max(axis=-1) <= tolerance
    inside = np.zeros_like(near)
    inside[rows, cols] = True
    assert near[rows, cols][1:-1, 1:-1].mean() > 0.98  # the box is the object (edges blur when resized)
    assert (near & ~inside).sum() <= 0.03 * near.sum()  # and the object is in the box


def test_coco_boxes_frame_their_objects_and_every_skip_is_reported(coco: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    convert(
        CocoSource(str(coco), str(coco.parent / "images")), str(out), ConvertOptions(split="train=1"), progress=False
    )
    m = manifest.read(str(out))
    assert m.header.task == "detection" and m.labels == ["person", "car", "dog"]  # COCO id order: 1, 3, 18
    assert m.split("train").class_counts == {"person": 2, "car": 1, "dog": 1}  # images showing each class
    objects = m.split("train").objects
    assert objects is not None and dict(objects.instances) == {"person": 2, "car": 1, "dog": 1}
    # red 80 x 70 (medium), blue clipped to 151 x 110 (large), coffee's 80 x 90 (medium), the crowd's area 400 (small)
    assert dict(objects.sizes) == {"small": 1, "medium": 2, "large": 1} and objects.without_objects == 1
    found = decoded(out)
    assert sorted(found) == ["astronaut.png", "chelsea.png", "coffee.png"]
    chelsea = found["chelsea.png"]
    assert chelsea["groundtruth_classes"].tolist() == [1, 3] and chelsea["source_id"] == b"1"  # 0: background
    for box, colour in zip(chelsea["groundtruth_boxes"], (RED, BLUE), strict=True):
        frames(chelsea["image"], box, colour, tolerance=0)
    coffee = found["coffee.png"]
    assert coffee["groundtruth_classes"].tolist() == [2, 1] and coffee["groundtruth_is_crowd"].tolist() == [False, True]
    assert coffee["groundtruth_area"].tolist() == [80 * 90, 400.0]  # the box's, and COCO's own
    assert found["astronaut.png"]["groundtruth_boxes"].shape == (0, 4)
    rows = IndexedRecords(str(out), split="train")  # without TensorFlow: (image, {"boxes", "labels"}) in pixels
    by_name = {rows.example(i)[schema.FILENAME].decode(): rows[i] for i in range(len(rows))}
    image, target = by_name["chelsea.png"]
    assert image.shape == (300, 451, 3) and target["labels"].tolist() == [0, 2]
    assert np.allclose(target["boxes"], [[40, 30, 120, 100], [300, 150, 451, 260]], atol=1e-3)
    assert by_name["astronaut.png"][1]["boxes"].shape == (0, 4)
    report = json.loads((out / "report.json").read_text())
    assert {(s["file"], s["annotation"]): s["reason"] for s in report["skipped_annotations"]} == {
        ("chelsea.png", 200): "box [500.0, 10.0, 520.0, 30.0]: wholly outside the 451 x 300 image",
        ("chelsea.png", 201): "box [10.0, 10.0, 10.0, 40.0]: empty (no width or no height)",
    }
    skipped = {s["file"]: s["reason"] for s in report["skipped"]}
    assert skipped["instances.json: annotation 202"] == "image_id 9 is not in images"
    assert skipped["instances.json: annotation 203"] == "category_id 7 is not in categories"
    assert "(image 5) but not found" in skipped["missing.png"]
    assert "leaves the folder" in skipped["instances.json: image 6"]
    assert m.data["num_skipped_annotations"] == 2


def test_resize_crop_and_exif_move_the_boxes_with_the_pixels(coco: Path, tmp_path: Path) -> None:
    """A photo stored turned (EXIF 6), annotated on its pixels as stored; converted upright,
    resized and centre-cropped: each box still frames its square."""
    root = tmp_path / "data"
    (root / "images").mkdir(parents=True)
    photo = photos()["chelsea"].copy()
    photo[30:100, 40:120] = RED
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(photo).save(root / "images" / "turned.jpg", quality=97, exif=exif.tobytes())
    document = {
        "images": [{"id": 3, "file_name": "images/turned.jpg", "height": 300, "width": 451}],
        "annotations": [{"id": 1, "image_id": 3, "category_id": 1, "bbox": [40, 30, 80, 70], "iscrowd": 0}],
        "categories": [{"id": 1, "name": "square"}],
    }
    (root / "instances.json").write_text(json.dumps(document))
    image = ImageOptions(resize=200, center_crop=180, image_format="png")
    out = tmp_path / "out"
    convert(str(root / "instances.json"), str(out), ConvertOptions(split="train=1", image=image), progress=False)
    record = decoded(out)["images/turned.jpg"]
    assert record["image"].shape == (180, 180, 3)
    frames(record["image"], record["groundtruth_boxes"][0], RED, tolerance=40)


@pytest.mark.slow
def test_the_cli_workers_strict_and_load(coco: Path, tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    command = [
        sys.executable,
        "-m",
        "shardfeed",
        "convert",
        str(coco),
        str(one),
        "--images",
        str(coco.parent / "images"),
    ]
    done = subprocess.run(
        [*command, "--split", "train=1", "--shards", "2", "--workers", "1"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "objects: 2 annotations skipped, 1 boxes clipped to their image" in done.stdout
    assert json.loads((one / "report.json").read_text())["clipped_annotations"] == [  # which box, and how far out
        {
            "file": "chelsea.png",
            "annotation": 101,
            "reason": "box [300.0, 150.0, 460.0, 260.0] clipped to the 451 x 300 image (9.00 px outside)",
        }
    ]
    images = str(coco.parent / "images")
    convert(
        CocoSource(str(coco), images), str(two), ConvertOptions(split="train=1", shards=2), workers=2, progress=False
    )
    assert {k: v for k, v in shard_bytes(one).items() if k != "report.html"} == shard_bytes(two)  # the CLI adds it
    with pytest.raises(ConvertError, match=r"annotation 202: image_id 9 is not in images .*--strict"):
        convert(CocoSource(str(coco), images), str(tmp_path / "s"), ConvertOptions(split="train=1"), strict=True)
    document = json.loads(coco.read_text())  # the references all good: what fails is an object's box
    document["annotations"] = [a for a in document["annotations"] if a["id"] not in (202, 203)]
    document["images"] = [i for i in document["images"] if i["id"] < 5]
    (tmp_path / "good.json").write_text(json.dumps(document))
    with pytest.raises(ConvertError, match=r"chelsea.png: annotation 200: box .* wholly outside .*--strict"):
        convert(CocoSource(str(tmp_path / "good.json"), images), str(tmp_path / "t"), ConvertOptions(), strict=True)
    with pytest.raises(OptionError, match="rotate= and translate= would move the images off"):
        load(str(one), batch_size=2, augment=Augment(rotate=5))


def boxes_frame_objects(images: np.ndarray, targets: dict[str, np.ndarray]) -> int:
    """Every box of a batch lies on its object's colour, and the colour does not run past its
    edges: a ring two pixels outside the box (where inside the image, away from the other
    squares) holds none of it (padding -1 aside); returns the boxes seen."""
    seen = 0
    colours = {0: RED, 1: BLUE, 2: BLUE}  # person: red; car, dog: blue
    for image, boxes, labels in zip(images, targets["boxes"], targets["labels"], strict=True):
        height, width = image.shape[:2]
        for (x0, y0, x1, y1), label in zip(boxes, labels, strict=True):
            if label < 0:
                assert (boxes[labels < 0] == -1).all()
                continue
            seen += 1
            colour = colours[int(label)]
            inner = image[int(np.ceil(y0)) + 1 : int(y1) - 1, int(np.ceil(x0)) + 1 : int(x1) - 1]
            if inner.size:
                assert np.abs(inner.astype(int) - colour).max(axis=-1).mean() < 30
            near = np.abs(image.astype(int) - colour).max(axis=-1) < 30  # pixels of the object's colour
            ring = np.zeros((height, width), bool)
            ring[max(0, int(y0) - 3) : int(np.ceil(y1)) + 3, max(0, int(x0) - 3) : int(np.ceil(x1)) + 3] = True
            ring[max(0, int(y0) - 1) : int(np.ceil(y1)) + 1, max(0, int(x0) - 1) : int(np.ceil(x1)) + 1] = False
            others = [b for b, lab in zip(boxes, labels, strict=True) if lab >= 0 and b is not None]
            for ox0, oy0, ox1, oy1 in others:  # another square of the same colour may touch this ring
                ring[max(0, int(oy0) - 1) : int(np.ceil(oy1)) + 1, max(0, int(ox0) - 1) : int(np.ceil(ox1)) + 1] = False
            if ring.sum() > 20:
                assert (near & ring).sum() <= 0.05 * ring.sum(), (x0, y0, x1, y1)
    return seen


@pytest.mark.slow
def test_load_moves_boxes_with_crops_and_flips(coco: Path, tmp_path: Path) -> None:
    """KerasHub's format, padded with -1; each box on its object after random crops and flips
    (training, many seeds) and on the whole image (evaluation)."""
    out = tmp_path / "out"
    convert(
        CocoSource(str(coco), str(coco.parent / "images")), str(out), ConvertOptions(split="train=1"), progress=False
    )
    ((images, targets),) = list(load(str(out), batch_size=3, image_size=(120, 160), training=False))
    assert targets["boxes"].shape == (3, 2, 4) and targets["labels"].shape == (3, 2)
    assert boxes_frame_objects(images.numpy(), {k: v.numpy() for k, v in targets.items()}) == 4  # every box kept
    seen = 0
    # 30 epochs (each draws its crops and flips anew) of one repeated pipeline: random-resized
    # crops keep a small square in about one case in five
    repeated = load(str(out), batch_size=3, image_size=96, seed=0, training=True, repeat=True)
    for images, targets in repeated.take(30):
        seen += boxes_frame_objects(images.numpy(), {k: v.numpy() for k, v in targets.items()})
    assert seen > 10


def test_tfds_reads_the_objects(coco: Path, tmp_path: Path) -> None:
    """TFDS itself, on our metadata: one value per object in each object feature."""
    import tensorflow_datasets as tfds

    out = tmp_path / "out"
    convert(
        CocoSource(str(coco), str(coco.parent / "images")), str(out), ConvertOptions(split="train=1"), progress=False
    )
    found = {}
    for example in tfds.builder_from_directory(str(out)).as_dataset(split="train"):
        found[example["image/filename"].numpy().decode()] = example
    assert found["chelsea.png"]["image/object/bbox/xmin"].numpy().tolist() == pytest.approx([40 / 451, 300 / 451])
    assert found["coffee.png"]["image/object/is_crowd"].numpy().tolist() == [0, 1]
    assert found["astronaut.png"]["image/object/bbox/ymax"].shape == (0,)


def test_verify_checks_the_boxes_and_show_draws_them(coco: Path, tmp_path: Path) -> None:
    from shardfeed.format.annotations import stored_objects_problem
    from shardfeed.tools import show, verify

    out = tmp_path / "out"
    convert(
        CocoSource(str(coco), str(coco.parent / "images")), str(out), ConvertOptions(split="train=1"), progress=False
    )
    assert verify(str(out), progress=False).ok
    data = json.loads((out / "manifest.json").read_text())
    data["splits"]["train"]["instance_counts"]["dog"] = 2
    (out / "manifest.json").write_text(json.dumps(data))
    problems = [p.message for p in verify(str(out), progress=False, decode=False).problems]
    assert any("objects per class {" in p and "differ from the manifest's" in p for p in problems), problems
    data["splits"]["train"]["instance_counts"]["dog"] = 1
    (out / "manifest.json").write_text(json.dumps(data))
    tiles = {t.key: t for t in show(str(out), None, rows=2, cols=2)}
    assert tiles["chelsea.png"].caption == "dog, person" and tiles["astronaut.png"].caption == "(no objects)"
    drawn = decoded(out)["chelsea.png"]["image"]
    changed = (tiles["chelsea.png"].image != drawn).any(axis=-1)
    ys, xs = np.nonzero(changed)
    assert (xs.min(), ys.min()) == (40, 30)  # the red box's outline starts at its corner
    augmented = show(str(out), None, rows=1, cols=3, augmented=True, augment=False, image_size=(300, 451))
    by_caption = {t.caption: t.image for t in augmented}  # no crop, no flip: the boxes where they were stored
    assert set(by_caption) == {"dog, person", "car", "(no objects)"}  # coffee's crowd: not in training batches
    assert ((by_caption["dog, person"] != drawn).any(axis=-1) == changed).all()
    good = (
        {k: [0.1] for k in schema.BOX_KEYS[:2]} | {k: [0.5] for k in schema.BOX_KEYS[2:]} | {schema.OBJECT_LABEL: [0]}
    )
    assert stored_objects_problem(good, 1, 0) is None
    assert "not inside [0, 1]" in str(stored_objects_problem({**good, schema.BOX_XMAX: [1.2]}, 1, 0))
    assert "class 3 is outside 0..0" in str(stored_objects_problem({**good, schema.OBJECT_LABEL: [3]}, 1, 0))
    assert "different lengths" in str(stored_objects_problem({**good, schema.OBJECT_LABEL: []}, 1, 0))


@pytest.mark.slow
def test_exact_box_coordinates_without_and_with_a_flip(coco: Path, tmp_path: Path) -> None:
    """Read at the stored size, without a crop: boxes are COCO's own pixels (the blue one clipped
    at the right edge), or, where the image was flipped, those mirrored: W - x. Whether an image
    was flipped is read off its pixels (where the red square is). Seeds are tried until both
    cases were seen (the first six all flip chelsea where no global seed is set; another test's
    `tf.random.set_seed` in the same process changes the draws)."""
    out = tmp_path / "out"
    convert(
        CocoSource(str(coco), str(coco.parent / "images")), str(out), ConvertOptions(split="train=1"), progress=False
    )
    plain = [[40.0, 30.0, 120.0, 100.0], [300.0, 150.0, 451.0, 260.0]]  # chelsea: red, then blue (clipped)
    mirrored = [[451 - 120.0, 30.0, 451 - 40.0, 100.0], [0.0, 150.0, 451 - 300.0, 260.0]]
    flips = set()
    read = ReadOptions(with_filenames=True)
    for seed in range(32):
        if flips == {True, False}:
            break
        augment = Augment(crop=False, flip=True)
        ds = load(str(out), batch_size=3, image_size=(300, 451), seed=seed, training=True, augment=augment, read=read)
        for images, targets, names in ds:
            row = [n.decode() for n in names.numpy()].index("chelsea.png")
            image, boxes = images.numpy()[row], targets["boxes"].numpy()[row]
            flipped = bool((image[60, 451 - 80] == RED).all())  # the red square's centre, mirrored
            assert np.allclose(boxes, mirrored if flipped else plain, atol=1e-3), (seed, flipped, boxes)
            flips.add(flipped)
    assert flips == {True, False}


def test_polygons_and_rle_become_instance_masks_on_the_objects_pixels(tmp_path: Path) -> None:
    """COCO's three forms of a segmentation, written as COCO writes them (a polygon, a compressed
    RLE made by pycocotools, a crowd's uncompressed RLE), over shapes pasted on a photo: each
    stored mask is its object's pixels, before and after a resize and crop; a segmentation that
    cannot be a mask is a skipped annotation with its reason."""
    from PIL import ImageDraw
    from pycocotools import mask as mask_api

    root = tmp_path / "data"
    (root / "images").mkdir(parents=True)
    photo = Image.fromarray(photos()["coffee"].copy())  # 600 x 400
    triangle = [(100.0, 50.0), (220.0, 50.0), (160.0, 170.0)]
    ImageDraw.Draw(photo).polygon(triangle, fill=RED)
    pixels = np.asarray(photo).copy()
    pixels[200:300, 300:420] = BLUE  # the RLE square
    pixels[20:60, 500:580] = (0, 255, 0)  # the crowd
    Image.fromarray(pixels).save(root / "images" / "scene.png")
    square = np.zeros((400, 600), np.uint8)
    square[200:300, 300:420] = 1
    compressed = mask_api.encode(np.asfortranarray(square))
    crowd = np.zeros((400, 600), np.uint8)
    crowd[20:60, 500:580] = 1
    flat = crowd.flatten(order="F")  # uncompressed RLE: run lengths, column-major, a run of 0s first
    counts = np.diff([0, *(np.flatnonzero(np.diff(flat)) + 1), flat.size]).tolist()
    assert flat[0] == 0 and sum(counts) == flat.size
    polygon = [v for point in triangle for v in point]
    annotations = [
        {"id": 1, "image_id": 1, "category_id": 1, "bbox": [100, 50, 120, 120], "segmentation": [polygon]},
        {
            "id": 2,
            "image_id": 1,
            "category_id": 2,
            "bbox": [300, 200, 120, 100],
            "segmentation": {"size": [400, 600], "counts": compressed["counts"].decode()},
        },
        {
            "id": 3,
            "image_id": 1,
            "category_id": 3,
            "bbox": [500, 20, 80, 40],
            "iscrowd": 1,
            "segmentation": {"size": [400, 600], "counts": counts},
        },
        {"id": 4, "image_id": 1, "category_id": 1, "bbox": [250, 150, 20, 20]},  # no segmentation
        {
            "id": 5,
            "image_id": 1,
            "category_id": 1,
            "bbox": [250, 150, 20, 20],
            "segmentation": {"size": [9, 9], "counts": ""},
        },
    ]
    document = {
        "images": [{"id": 1, "file_name": "scene.png", "width": 600, "height": 400}],
        "annotations": annotations,
        "categories": [{"id": 1, "name": "triangle"}, {"id": 2, "name": "square"}, {"id": 3, "name": "crowd"}],
    }
    (root / "instances.json").write_text(json.dumps(document))
    colours = (RED, BLUE, (0, 255, 0))
    for image in (ImageOptions(), ImageOptions(resize=300, center_crop=280, image_format="png")):
        out = tmp_path / f"out{image.resize}"
        if image.resize is None:  # through the CLI
            command = ["convert", str(root / "instances.json"), str(out), "--images", str(root / "images"), "--masks"]
            done = subprocess.run(
                [sys.executable, "-m", "shardfeed", *command, "--split", "train=1"], capture_output=True
            )
            assert done.returncode == 0, done.stderr
        else:
            source = CocoSource(str(root / "instances.json"), str(root / "images"), masks=True)
            convert(source, str(out), ConvertOptions(split="train=1", image=image), progress=False)
        (record,) = decoded(out).values()
        masks = record["groundtruth_instance_masks"]
        kept = 3 if image.resize is None else 2  # the centre crop cuts the crowd (top right) away
        assert masks.shape == (kept, *record["image"].shape[:2]) and set(np.unique(masks)) == {0.0, 1.0}
        for mask, colour in zip(masks.astype(bool), colours[:kept], strict=True):
            near = np.abs(record["image"].astype(int) - colour).max(axis=-1) <= 30
            iou = (mask & near).sum() / (mask | near).sum()
            assert iou > 0.95, (colour, iou)  # the polygon's edge pixels are rasterised by two programs
        if image.resize is None:
            assert (masks[1] == square).all() and (masks[2] == crowd).all()  # RLE: exact
        report = json.loads((out / "report.json").read_text())
        reasons = {s["annotation"]: s["reason"] for s in report["skipped_annotations"]}
        assert reasons.pop(3, "wholly outside").endswith("wholly outside the 280 x 280 image") == (kept == 2)
        assert reasons == {
            4: "mask: no segmentation (polygons or RLE) to make its mask from",
            5: "mask: RLE of size [9, 9] for a 600 x 400 image (size [400, 600])",
        }
    m = manifest.read(str(out))
    assert m.data["features"][schema.OBJECT_MASK] == "bytes"
    from shardfeed.tools import show, verify
    from shardfeed.tools.preview import OVERLAY_COLOURS

    assert verify(str(out), progress=False).ok
    (tile,) = show(str(tmp_path / "outNone"), None, rows=1, cols=1)  # each instance tinted in its class's colour
    drawn, source = tile.image.astype(float), pixels.astype(float)
    for (top, left, bottom, right), colour, c in (
        ((210, 310, 290, 410), BLUE, 1),
        ((26, 506, 54, 574), (0, 255, 0), 2),
    ):
        want = 0.55 * np.array(colour) + 0.45 * np.array(OVERLAY_COLOURS[c])
        assert np.abs(drawn[top:bottom, left:right] - want).max() <= 1, c
    assert (drawn[330:390, 20:90] == source[330:390, 20:90]).all()  # no object there: untouched


@pytest.mark.slow
def test_balance_class_repeats_images_of_rare_classes(coco: Path, tmp_path: Path) -> None:
    """Repeat-factor sampling on a detection folder: with t = 1, person (on 2 of 3 images) gives
    sqrt(3/2), car and dog (1 of 3) sqrt(3); so chelsea (person, dog) and coffee (car, person)
    weigh sqrt(3) and astronaut (no objects) 1: of each epoch's 3 places they take 1.16 each and
    astronaut 0.67, as the floor or the ceiling."""
    out = tmp_path / "out"
    convert(
        CocoSource(str(coco), str(coco.parent / "images")), str(out), ConvertOptions(split="train=1"), progress=False
    )
    read = ReadOptions(balance="class", repeat_threshold=1.0, with_filenames=True)
    ds = load(str(out), batch_size=3, image_size=64, seed=3, training=True, read=read)
    astronauts = 0
    for _ in range(12):  # each iteration: the next epoch
        ((_, _, names),) = list(ds)
        seen = Counter(n.decode() for n in names.numpy())
        assert seen["chelsea.png"] in (1, 2) and seen["coffee.png"] in (1, 2) and seen["astronaut.png"] <= 1
        astronauts += seen["astronaut.png"]
    assert 4 <= astronauts <= 11  # 0.67 of 12 epochs, not every one
    with pytest.raises(OptionError, match="repeat_threshold must be in"):
        ReadOptions(repeat_threshold=0)


@pytest.mark.slow
def test_global_order_exact_resume_even_splits_and_mixtures_read_objects(coco: Path, tmp_path: Path) -> None:
    """The index-based reading paths carry the objects as they carry class ids: a resumed epoch
    is the rest of the uninterrupted one, box for box; two workers' even shares cover the split
    once; a Mixture of two detection folders yields KerasHub's batches."""
    from shardfeed import Mixture

    out = tmp_path / "out"
    convert(CocoSource(str(coco), str(coco.parent / "images")), str(out), ConvertOptions(split="train=1", shards=2))

    def batches(**read: object) -> list[tuple[list[bytes], list[list[float]]]]:
        options = ReadOptions(shuffle="global", with_filenames=True, **read)  # type: ignore[arg-type]
        ds = load(str(out), batch_size=1, image_size=64, seed=5, training=True, read=options)
        return [(n.numpy().tolist(), t["boxes"].numpy().round(4).tolist()) for _, t, n in ds]

    whole = batches()
    assert len(whole) == 3 and batches(start_step=1) == whole[1:]
    shares = [batches(num_workers=2, worker_index=w, even="pad") for w in (0, 1)]
    names = sorted(n for share in shares for names, _ in share for n in names)
    assert len(shares[0]) == len(shares[1]) == 2 and set(names) == {b"astronaut.png", b"chelsea.png", b"coffee.png"}
    mixed = load(Mixture((str(out), str(out)), (0.5, 0.5)), batch_size=2, image_size=64, seed=1, training=True)
    for images, targets in mixed:
        assert images.shape[1:] == (64, 64, 3) and targets["boxes"].shape[-1] == 4
        assert targets["boxes"].shape[:2] == targets["labels"].shape


def test_object_detection_api_records_are_adopted_and_read(coco: Path, tmp_path: Path) -> None:
    """TFRecords as the OD API's create_coco_tf_record.py writes them (tf.train.Example by
    TensorFlow itself; label map ids from 1): adopted with --label-offset 1, counted, verified and
    read by `load` with each box on its square."""
    import tensorflow as tf

    from shardfeed import adopt
    from shardfeed.tools import verify

    def feature(key: str, values: list[object]) -> tf.train.Feature:
        if key.endswith("/text") or (values and isinstance(values[0], bytes)):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        if "/bbox/" in key:  # float lists, empty ones too (dataset_util.float_list_feature)
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    folder = tmp_path / "od_api"
    folder.mkdir()
    names = {1: b"person", 3: b"car", 18: b"dog"}  # COCO's label map ids, as the OD API keeps them
    with tf.io.TFRecordWriter(str(folder / "coco_train.record-00000-of-00001")) as writer:
        for image_id, (name, squares) in enumerate(SQUARES.items(), start=1):
            data = (coco.parent / "images" / name).read_bytes()
            height, width = Image.open(coco.parent / "images" / name).size[::-1]
            boxes = [(x, y, min(x + w, width), y + h) for _, _, (x, y, w, h) in squares]
            example = {
                "image/encoded": [data],
                "image/format": [b"png"],
                "image/height": [height],
                "image/width": [width],
                "image/filename": [name.encode()],
                "image/source_id": [str(image_id).encode()],
                "image/object/bbox/xmin": [b[0] / width for b in boxes],
                "image/object/bbox/ymin": [b[1] / height for b in boxes],
                "image/object/bbox/xmax": [b[2] / width for b in boxes],
                "image/object/bbox/ymax": [b[3] / height for b in boxes],
                "image/object/class/label": [c for _, c, _ in squares],
                "image/object/class/text": [names[c] for _, c, _ in squares],
                "image/object/is_crowd": [0 for _ in squares],
            }
            features = tf.train.Features(feature={k: feature(k, v) for k, v in example.items()})
            writer.write(tf.train.Example(features=features).SerializeToString())
    from shardfeed.tools.foreign_scan import AdoptOptions

    result = adopt(str(folder), options=AdoptOptions(foreign=schema.ForeignKeys(label_offset=1)), progress=False)
    assert result.splits == {"train": 3}
    m = manifest.read(str(folder))
    assert m.header.task == "detection" and m.labels[0] == "person" and m.labels[17] == "dog"
    objects = m.split("train").objects
    assert objects is not None and dict(objects.instances) == {"person": 1, "car": 1, "dog": 1}
    assert objects.without_objects == 1 and m.split("train").class_counts == {"person": 1, "car": 1, "dog": 1}
    assert objects.most == max(len(squares) for squares in SQUARES.values())  # the most in one record
    assert verify(str(folder), progress=False).ok
    ((images, targets),) = list(load(str(folder), batch_size=3, image_size=(120, 160), training=False))
    ours = {-1: -1, 0: 0, 2: 1, 17: 2}  # label map id - 1 -> the COCO conversion's class (boxes_frame_objects' colours)
    labels = np.vectorize(ours.get)(targets["labels"].numpy())
    assert boxes_frame_objects(images.numpy(), {"boxes": targets["boxes"].numpy(), "labels": labels}) == 3


def _od_api_example(image: bytes, name: str, squares: list[Any], extra: list[Any]) -> bytes:
    """A tf.train.Example as the OD API tutorial's generate_tfrecord.py writes one from a LabelImg
    XML: every key, empty lists for an image without objects, ids from the label map (no class
    text, so names can only come from label_map.pbtxt); `extra`: (label, box) objects beside."""
    import tensorflow as tf

    height, width = Image.open(io.BytesIO(image)).size[::-1]
    boxes = [(x, y, min(x + w, width), y + h, c) for _, c, (x, y, w, h) in squares]
    boxes += [(x, y, x + w, y + h, label) for label, (x, y, w, h) in extra]
    floats = {
        key: [b[i] / (width if i % 2 == 0 else height) for b in boxes]
        for i, key in enumerate(("xmin", "ymin", "xmax", "ymax"))
    }
    feature = {
        "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[height])),
        "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[width])),
        "image/filename": tf.train.Feature(bytes_list=tf.train.BytesList(value=[name.encode()])),
        "image/source_id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[name.encode()])),
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
        "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"png"])),
        "image/object/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[b[4] for b in boxes])),
    }
    for key, values in floats.items():
        feature[f"image/object/bbox/{key}"] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def test_a_folder_as_the_od_api_tutorial_leaves_it_is_adopted_with_its_label_map(coco: Path, tmp_path: Path) -> None:
    """The TF2 OD API tutorial's annotations/ folder: label_map.pbtxt beside train.record and
    test.record. The label map was taken for a split file; a test split of images without objects
    was refused for lacking image/class/label; one box labelled 0 (below --label-offset 1) refused
    the folder naming no record; the label map's names were never used. Now: two splits, the
    names from the label map, the 0-labelled box a skipped annotation naming its record (left out
    by load), and verify passes."""
    import tensorflow as tf

    from shardfeed import adopt
    from shardfeed.tools import verify
    from shardfeed.tools.foreign_scan import AdoptOptions

    folder = tmp_path / "annotations"
    folder.mkdir()
    (folder / "label_map.pbtxt").write_text(
        "".join(f"item {{\n    id: {i}\n    name: '{n}'\n}}\n\n" for i, n in ((1, "person"), (3, "car"), (18, "dog")))
    )
    images = {name: (coco.parent / "images" / name).read_bytes() for name in SQUARES}
    stray = [(0, (200, 10, 30, 30))]  # a 0 among 1-based ids, on chelsea's record
    with tf.io.TFRecordWriter(str(folder / "train.record")) as writer:
        for name, squares in SQUARES.items():
            writer.write(_od_api_example(images[name], name, squares, stray if name == "chelsea.png" else []))
    with tf.io.TFRecordWriter(str(folder / "test.record")) as writer:
        writer.write(_od_api_example(images["astronaut.png"], "astronaut.png", [], []))
    result = adopt(str(folder), options=AdoptOptions(foreign=schema.ForeignKeys(label_offset=1)), progress=False)
    assert result.splits == {"train": 3, "test": 1}
    m = manifest.read(str(folder))
    assert m.header.task == "detection" and (m.labels[0], m.labels[2], m.labels[17]) == ("person", "car", "dog")
    assert dict(m.split("train").objects.instances) == {"person": 1, "car": 1, "dog": 1}
    with open(folder / "train.record", "rb") as stream:
        offsets = [offset for offset, _ in tfrecord.iter_records(stream)]
    chelsea = list(SQUARES).index("chelsea.png")
    report = json.loads((folder / "report.json").read_text())
    assert report["skipped_annotations"] == [
        {
            "file": f"{folder / 'train.record'}: record {chelsea} at byte {offsets[chelsea]}",
            "annotation": 2,
            "reason": "label 0 is below the label offset 1: no class",
        }
    ]
    assert verify(str(folder), progress=False).ok
    ((images_, targets),) = list(load(str(folder), split="train", batch_size=3, image_size=(120, 160), training=False))
    ours = {-1: -1, 0: 0, 2: 1, 17: 2}  # label map id - 1 -> the COCO conversion's class (boxes_frame_objects' colours)
    labels = np.vectorize(ours.get)(targets["labels"].numpy())
    assert boxes_frame_objects(images_.numpy(), {"boxes": targets["boxes"].numpy(), "labels": labels}) == 3


def test_report_html_counts_objects_and_lists_every_skipped_annotation(coco: Path, tmp_path: Path) -> None:
    from shardfeed.tools.dataset_report import dataset_report

    out = tmp_path / "out"
    convert(
        CocoSource(str(coco), str(coco.parent / "images")), str(out), ConvertOptions(split="train=1"), progress=False
    )
    page = Path(dataset_report(str(out))).read_text()
    assert "Objects per class" in page and "train: 4 objects (small 1, medium 2, large 1); 1 images without any" in page
    assert "Annotations skipped (their images are stored without them): 2" in page
    assert "annotation 200: box [500.0, 10.0, 520.0, 30.0]: wholly outside the 451 x 300 image" in page
    assert "<h3>person</h3>" in page and "<h3>(no objects)</h3>" in page  # samples by their first object's class


def test_an_area_that_is_no_number_of_pixels_is_skipped_with_its_reason(tmp_path: Path) -> None:
    """COCO files are JSON, and Python's json reads NaN and Infinity: such an `area` (or a
    negative one) is no object size, so its annotation is reported and its image kept; it
    once stopped the conversion with a worker's StopIteration."""
    source = tmp_path / "coco"
    (source / "images").mkdir(parents=True)
    photo = photos()["coffee"].copy()
    photo[200:290, 10:90] = BLUE
    Image.fromarray(photo).save(source / "images" / "coffee.png")
    box = [10, 200, 80, 90]
    annotations = [
        {"id": 1, "image_id": 1, "category_id": 3, "bbox": box, "iscrowd": 0, "area": area}
        for area in (math.nan, -4.0, math.inf, 7200.0)
    ]
    document = {
        "images": [{"id": 1, "file_name": "images/coffee.png", "height": photo.shape[0], "width": photo.shape[1]}],
        "annotations": [dict(a, id=i) for i, a in enumerate(annotations, start=1)],
        "categories": CATEGORIES,
    }
    (source / "instances.json").write_text(json.dumps(document))  # NaN and Infinity as Python writes them
    out = tmp_path / "out"
    convert(str(source / "instances.json"), str(out), ConvertOptions(split="train=1"), progress=False)
    report = json.loads((out / "report.json").read_text())
    assert {(s["annotation"], s["reason"]) for s in report["skipped_annotations"]} == {
        (1, "area nan: not a finite, non-negative number of pixels"),
        (2, "area -4.0: not a finite, non-negative number of pixels"),
        (3, "area inf: not a finite, non-negative number of pixels"),
    }
    assert report["skipped_annotations_by_reason"] == {"not a finite, non-negative number of pixels": 3}
    coffee = decoded(out)["images/coffee.png"]
    assert coffee["groundtruth_area"].tolist() == [7200.0] and coffee["groundtruth_classes"].tolist() == [2]
    frames(coffee["image"], coffee["groundtruth_boxes"][0], BLUE, tolerance=0)


@pytest.mark.slow
def test_coco_files_of_the_wrong_shape_are_refused_naming_the_entry(coco: Path, tmp_path: Path) -> None:
    """A string id, an entry that is a list, a name that is a number, repeated category ids: each
    was a traceback or a silent merge; each is one SourceError naming the JSON path."""
    from shardfeed.errors import SourceError

    good = json.loads(coco.read_text())
    edits = {
        "images[1].id: expected a whole number, got '2'": lambda d: d["images"][1].__setitem__("id", "2"),
        "images[0]: expected an object, got list": lambda d: d["images"].__setitem__(0, [1]),
        "images[2].file_name: expected text, got None": lambda d: d["images"][2].__setitem__("file_name", None),
        "categories[1].name: expected text, got 7": lambda d: d["categories"][1].__setitem__("name", 7),
        "categories[0].id: expected a whole number, got True": lambda d: d["categories"][0].__setitem__("id", True),
        "annotations[3]: expected an object, got str": lambda d: d["annotations"].__setitem__(3, "x"),
        "category ids repeat: [1]": lambda d: d["categories"].append({"id": 1, "name": "another"}),
    }
    for expected, edit in edits.items():
        document = json.loads(json.dumps(good))
        edit(document)
        (tmp_path / "src").mkdir(exist_ok=True)
        path = tmp_path / "src" / f"edited-{len(expected)}.json"
        path.write_text(json.dumps(document))
        with pytest.raises(SourceError) as raised:
            convert(str(path), str(tmp_path / "out"), ConvertOptions(split="train=1"), progress=False)
        assert expected in str(raised.value), (expected, str(raised.value))
        assert not (tmp_path / "out" / "manifest.json").exists()


def test_an_image_id_or_file_listed_twice_is_reported_never_merged(coco: Path, tmp_path: Path) -> None:
    """Two entries with one id: the earlier was in no shard and not in report.json, its boxes on
    the later's pixels. One file under two ids: written twice with different boxes. Now every
    such entry and its annotations are in report.json with the reason, the rest converted; an
    annotation whose image_id is a list is reported, not a TypeError."""
    shutil.copytree(coco.parent, tmp_path / "coco")
    Image.fromarray(photos()["rocket"]).save(tmp_path / "coco" / "images" / "rocket.png")
    document = json.loads(coco.read_text())
    document["images"].append({"id": 1, "file_name": "rocket.png", "height": 427, "width": 640})  # id 1 again
    document["images"].append({"id": 7, "file_name": "astronaut.png", "height": 512, "width": 512})  # a file again
    document["annotations"].append({"id": 300, "image_id": [2], "category_id": 1, "bbox": [1, 1, 2, 2]})
    path = tmp_path / "coco" / "twice.json"
    path.write_text(json.dumps(document))
    out = tmp_path / "out"
    source = CocoSource(str(path), str(tmp_path / "coco" / "images"))
    convert(source, str(out), ConvertOptions(split="train=1"), progress=False)
    report = json.loads((out / "report.json").read_text())
    reasons = {s["file"]: s["reason"] for s in report["skipped"]}
    assert "names 2 entries of images" in reasons["twice.json: image 1 (chelsea.png)"]
    assert "names 2 entries of images" in reasons["twice.json: image 1 (rocket.png)"]
    assert "listed under ids [3, 7]" in reasons["twice.json: image 3 (astronaut.png)"]
    assert "listed under ids [3, 7]" in reasons["twice.json: image 7 (astronaut.png)"]
    assert "image_id [2] is not in images" in reasons["twice.json: annotation 300"]
    assert "twice.json: annotation 100" in reasons and "names 2 entries" in reasons["twice.json: annotation 100"]
    records = IndexedRecords(str(out), "train")
    names = [records.example(i, (schema.FILENAME,))[schema.FILENAME].decode() for i in range(len(records))]
    assert names == ["coffee.png"]  # image 2: its id and its file each once


def test_compressed_rle_runs_read_as_pycocotools_writes_them() -> None:
    """`compressed_runs` against masks pycocotools encodes; the runs computed independently from
    the mask (column-major, a run of 0s first)."""
    from pycocotools import mask as mask_api

    from shardfeed.write.images.masks import compressed_runs

    rng = np.random.default_rng(3)
    for shape in ((7, 5), (40, 30), (400, 600)):
        for density in (0.0, 0.02, 0.5, 1.0):
            mask = (rng.random(shape) < density).astype(np.uint8)
            flat = mask.flatten(order="F")
            runs = np.diff([0, *(np.flatnonzero(np.diff(flat)) + 1), flat.size]).tolist()
            runs = runs if flat[0] == 0 else [0, *runs]
            assert compressed_runs(mask_api.encode(np.asfortranarray(mask))["counts"].decode()) == runs
    assert compressed_runs("\x7f") is None and compressed_runs("P") is None  # outside the alphabet; cut short


def test_segmentations_that_would_crash_pycocotools_are_reported_annotations(tmp_path: Path) -> None:
    """A NaN or 1e308 in a polygon killed a worker with a segmentation fault (BrokenProcessPool,
    nothing written); a polygon of strings or a negative RLE count ended the conversion; 1.6 M
    points took 1.47 GB. Each is now a skipped annotation with its reason, the image and its
    good object converted."""
    from pycocotools import mask as mask_api

    root = tmp_path / "data"
    (root / "images").mkdir(parents=True)
    pixels = photos()["coffee"].copy()  # 600 x 400
    pixels[100:200, 100:250] = BLUE
    Image.fromarray(pixels).save(root / "images" / "scene.png")
    good = [100, 100, 250, 100, 250, 200, 100, 200]
    overshoot = mask_api.encode(np.asfortranarray(np.ones((401, 600), np.uint8)))["counts"].decode()
    bad = {
        2: ([[1.0, 2.0, math.nan, 4.0, 5.0, 6.0]], "not a finite number (nan)"),
        3: ([[1.0, 2.0, 1e308, 4.0, 5.0, 6.0]], "reaches far outside the 600 x 400 image"),
        4: ([["1", "2", "3", "4", "5", "6"]], "not a finite number ('1')"),
        5: ([list(np.tile([10.0, 10.0, 20.0, 10.0], 60_000))], "polygons of more than 100,000 points"),
        6: ({"size": [400, 600], "counts": [-5, 240_005]}, "RLE counts hold a negative run"),
        7: ({"size": [400, 600], "counts": [5, 10]}, "RLE runs cover 15 pixels, not the image's 240,000"),
        8: ({"size": [400, 600], "counts": overshoot}, "RLE runs cover 240,600 pixels"),
        9: ({"size": [400, 600], "counts": "~~~\x7f"}, "not COCO's run-length string"),
    }
    annotations = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [100, 100, 150, 100], "segmentation": [good]}]
    annotations += [
        {"id": i, "image_id": 1, "category_id": 1, "bbox": [100, 100, 150, 100], "segmentation": seg}
        for i, (seg, _) in bad.items()
    ]
    document = {
        "images": [{"id": 1, "file_name": "scene.png", "width": 600, "height": 400}],
        "annotations": annotations,
        "categories": [{"id": 1, "name": "square"}],
    }
    (root / "instances.json").write_text(json.dumps(document))  # NaN as Python's json writes it
    out = tmp_path / "out"
    source = CocoSource(str(root / "instances.json"), str(root / "images"), masks=True)
    convert(source, str(out), ConvertOptions(split="train=1"), progress=False)
    report = json.loads((out / "report.json").read_text())
    reasons = {s["annotation"]: s["reason"] for s in report["skipped_annotations"]}
    assert sorted(reasons) == sorted(bad)
    for i, (_, expected) in bad.items():
        assert expected in reasons[i], (i, reasons[i])
    (record,) = decoded(out).values()
    (mask,) = record["groundtruth_instance_masks"].astype(bool)
    assert mask[110:190, 110:240].all() and not mask[:90].any() and not mask[210:].any()


def test_crowd_regions_are_left_out_of_training_batches_unless_asked(coco: Path, tmp_path: Path) -> None:
    """COCO's crowd region on coffee (annotation 204: iscrowd=1, a box over many instances) was an
    ordinary training box; Model Garden's parsers skip crowds in training. Left out of `load`'s
    and `grain_dataset`'s training batches now, kept with crowd_targets=True and in evaluation
    batches; IndexedRecords' targets flag it."""
    out = tmp_path / "out"
    convert(
        CocoSource(str(coco), str(coco.parent / "images")), str(out), ConvertOptions(split="train=1"), progress=False
    )
    crowd_box, car_box = [20.0, 20.0, 50.0, 50.0], [10.0, 200.0, 90.0, 290.0]  # coffee's, in its pixels

    def coffee_boxes(training: bool, **decode: bool) -> list[list[float]]:
        read = ReadOptions(with_filenames=True)
        options = DecodeOptions(**decode)
        ds = load(
            str(out), batch_size=3, image_size=(400, 600), training=training, augment=False, read=read, decode=options
        )
        ((_, targets, names),) = list(ds.take(1))
        row = [n.decode() for n in names.numpy()].index("coffee.png")
        return sorted(np.round(b, 3).tolist() for b in targets["boxes"].numpy()[row] if b[0] >= 0)

    assert coffee_boxes(True) == [car_box]
    assert coffee_boxes(True, crowd_targets=True) == coffee_boxes(False) == sorted([car_box, crowd_box])
    rows = IndexedRecords(str(out), split="train")
    coffee = next(i for i in range(len(rows)) if rows.example(i)["image/filename"] == b"coffee.png")
    assert rows.target(rows.example(coffee))["is_crowd"].tolist() == [False, True]
    if importlib.util.find_spec("grain") is None:
        return
    from shardfeed import grain_dataset

    for crowd_targets, expected in ((False, 3), (True, 4)):  # one epoch's boxes: chelsea's 2, coffee's 1 (+ the crowd)
        batches = grain_dataset(
            str(out), batch_size=3, image_size=(400, 600), training=True, augment=False, seed=1,
            crowd_targets=crowd_targets,
        )  # fmt: skip
        seen = sum(int((labels >= 0).sum()) for _, targets in batches for labels in [targets["labels"]])
        assert seen == expected, crowd_targets


def test_a_coco_file_named_for_a_split_keeps_that_split(coco: Path, tmp_path: Path) -> None:
    """instances_val2017.json alone was divided 80/20 into 'train' and 'validation'; Roboflow's
    valid/_annotations.coco.json alike. Each keeps the split its name (or its folder) says, and
    --split still divides it when given."""
    images = str(coco.parent / "images")
    named = tmp_path / "annotations" / "instances_val2017.json"
    roboflow = tmp_path / "valid" / "_annotations.coco.json"
    for path in (named, roboflow):
        path.parent.mkdir()
        shutil.copy(coco, path)
    for path, split in ((named, "val"), (roboflow, "valid")):
        out = tmp_path / f"out-{split}"
        convert(CocoSource(str(path), images), str(out), progress=False)
        m = manifest.read(str(out))
        assert m.split_names == [split] and m.split(split).num_records == 3, path
    divided = tmp_path / "divided"
    convert(CocoSource(str(named), images), str(divided), ConvertOptions(split="train=0.67,test=0.33"), progress=False)
    assert manifest.read(str(divided)).split_names == ["test", "train"]


def _split_coco(coco: Path, splits: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """The fixture's annotations divided by image into one COCO document per split."""
    document = json.loads(coco.read_text())
    out = {}
    for split, names in splits.items():
        images = [i for i in document["images"] if i["file_name"] in names]
        ids = {i["id"] for i in images}
        annotations = [a for a in document["annotations"] if a["image_id"] in ids]
        out[split] = {"images": images, "annotations": annotations, "categories": document["categories"]}
    return out


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["coco2017", "roboflow"])
def test_a_coco_root_converts_its_splits_never_as_class_folders(coco: Path, tmp_path: Path, layout: str) -> None:
    """COCO 2017's root (annotations/instances_{train,val}2017.json beside train2017/, val2017/)
    became class folders 'annotations', 'train2017', 'val2017'; Roboflow's COCO export
    ({train,valid}/_annotations.coco.json beside the images) 'no images found'. `shardfeed
    convert ROOT OUT` alone now makes each file its split, with every image and box accounted."""
    root = tmp_path / "root"
    splits = {"train": ["chelsea.png", "coffee.png"], "val": ["astronaut.png"]}
    documents = _split_coco(coco, splits)
    for split, names in splits.items():
        folder = root / (f"{split}2017" if layout == "coco2017" else {"train": "train", "val": "valid"}[split])
        folder.mkdir(parents=True)
        for name in names:
            shutil.copy(coco.parent / "images" / name, folder / name)
        if layout == "coco2017":
            (root / "annotations").mkdir(exist_ok=True)
            (root / "annotations" / f"instances_{split}2017.json").write_text(json.dumps(documents[split]))
        else:
            (folder / "_annotations.coco.json").write_text(json.dumps(documents[split]))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "shardfeed", "convert", str(root), str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    m = manifest.read(str(out))
    val = "val" if layout == "coco2017" else "valid"
    assert m.header.task == "detection" and m.labels == [c["name"] for c in sorted(CATEGORIES, key=lambda c: c["id"])]
    assert m.split_names == ["train", val] and (m.split("train").num_records, m.split(val).num_records) == (2, 1)
    train = IndexedRecords(str(out), split="train")
    prefix = "train2017" if layout == "coco2017" else "train"
    assert sorted(train.example(i)[schema.FILENAME].decode() for i in range(2)) == [
        f"{prefix}/chelsea.png",
        f"{prefix}/coffee.png",
    ]
    written = sum(len(train.target(train.example(i))["labels"]) for i in range(2))
    assert written == 4  # chelsea's 2, coffee's car and crowd; its outside and empty boxes reported
    skipped = json.loads((out / "report.json").read_text())["skipped_annotations"]
    assert sorted(s["annotation"] for s in skipped) == [200, 201]


def test_convert_dry_run_says_what_it_would_read_and_writes_nothing(coco: Path, tmp_path: Path) -> None:
    """`convert SRC OUT --dry-run` (Datumaro's detect-format): the layout recognised, its classes,
    images per split, the objects listed and the first skipped file; OUT is never created."""
    root = tmp_path / "root"
    documents = _split_coco(coco, {"train": ["chelsea.png", "coffee.png"], "val": ["astronaut.png"]})
    for split, document in documents.items():
        (root / "annotations").mkdir(parents=True, exist_ok=True)
        (root / "annotations" / f"instances_{split}2017.json").write_text(json.dumps(document))
        (root / f"{split}2017").mkdir()
        for image in document["images"]:
            shutil.copy(coco.parent / "images" / image["file_name"], root / f"{split}2017" / image["file_name"])
    out = tmp_path / "out"
    command = [sys.executable, "-m", "shardfeed", "convert", str(root), str(out), "--dry-run"]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    listed = sum(len(d["annotations"]) for d in documents.values()) - 1  # annotation 203: no such category
    assert done.stdout.splitlines()[:4] == [
        "layout: coco (detection), seen: annotations/instances_train2017.json, annotations/instances_val2017.json",
        "classes: 3 (person, car, dog)",
        "images: 3 (train: 2, val: 1)",
        f"objects listed: {listed}",
    ]
    assert done.stdout.splitlines()[-1] == "nothing written (--dry-run)" and not out.exists()
