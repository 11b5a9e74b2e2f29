"""Semantic segmentation folders (images/, masks/, classes.txt) converted to records Model
Garden's segmentation decoder reads, with each mask moved with its image's pixels.

Objects are solid squares pasted on real photos, and each mask marks the squares' pixels, so
alignment is checked against the stored image itself: where the stored mask says "red square"
the stored image is red. Model Garden's decoder is reproduced from its source:
official/vision/dataloaders/segmentation_input.py (`Decoder`, and the reshape its parser makes),
tensorflow/models at commit 00b830c7ca641413f37e5147cf059c89f79b0e8e.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import photos, shard_bytes, shardfeed_cli
from PIL import Image

from shardfeed import ConvertOptions, DecodeOptions, ImageOptions, IndexedRecords, OptionError, convert, load
from shardfeed.format import manifest, schema
from shardfeed.tools import verify

CLASSES = ["background", "red square", "blue square"]
RED, BLUE = (255, 0, 0), (0, 0, 255)


def painted(name: str, boxes: list[tuple[int, tuple[int, int, int, int]]]) -> tuple[np.ndarray, np.ndarray]:
    """A photo with squares pasted (class, (x0, y0, x1, y1)), and its mask of class ids."""
    image = photos()[name].copy()
    mask = np.zeros(image.shape[:2], np.uint8)
    for label, (x0, y0, x1, y1) in boxes:
        image[y0:y1, x0:x1] = RED if label == 1 else BLUE
        mask[y0:y1, x0:x1] = label
    mask[:2, :] = 255  # a band to ignore, as annotators leave borders
    return image, mask


def save(array: np.ndarray, path: Path, **kw: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path, **kw)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return segmentation_folder(tmp_path_factory.mktemp("seg"))


def segmentation_folder(parent: Path) -> Path:
    """Photos with red and blue squares and their masks, and a case of each problem."""
    root = parent / "data"
    (root / "images").mkdir(parents=True)
    (root / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    scenes = {
        "chelsea": [(1, (40, 30, 120, 100)), (2, (300, 150, 451, 260))],
        "coffee": [(2, (10, 200, 90, 300))],
        "astronaut": [(1, (200, 100, 300, 220))],
        "rocket": [],
    }
    for name, boxes in scenes.items():
        image, mask = painted(name, boxes)
        save(image, root / "images" / f"{name}.png")
        if name == "coffee":  # a palette PNG mask: its indices are the ids
            palette = Image.fromarray(mask, mode="P")
            palette.putpalette([0, 0, 0, 255, 0, 0, 0, 0, 255] + [128] * (253 * 3))
            (root / "masks").mkdir(exist_ok=True)
            palette.save(root / "masks" / "coffee.png")
        else:
            save(mask, root / "masks" / f"{name}.png")
    photo = photos()["chelsea"]
    save(photo, root / "images" / "no_mask.png")
    save(np.zeros((5, 5), np.uint8), root / "masks" / "orphan.png")
    save(photo, root / "images" / "small_mask.png")
    save(np.zeros((10, 10), np.uint8), root / "masks" / "small_mask.png")
    save(photo, root / "images" / "stray_id.png")
    save(np.full(photo.shape[:2], 7, np.uint8), root / "masks" / "stray_id.png")
    save(photo, root / "images" / "rgb_mask.png")
    save(photo, root / "masks" / "rgb_mask.png")
    return root


def model_garden_decode(record: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Model Garden's segmentation Decoder (and its parser's reshape), reproduced (module docstring)."""
    import tensorflow as tf

    spec = {
        "image/encoded": tf.io.FixedLenFeature((), tf.string, default_value=""),
        "image/height": tf.io.FixedLenFeature((), tf.int64, default_value=0),
        "image/width": tf.io.FixedLenFeature((), tf.int64, default_value=0),
        "image/segmentation/class/encoded": tf.io.FixedLenFeature((), tf.string, default_value=""),
    }
    data = tf.io.parse_single_example(record, spec)
    height, width = data["image/height"], data["image/width"]
    label = tf.reshape(tf.io.decode_image(data["image/segmentation/class/encoded"], channels=1), (1, height, width))
    image = tf.reshape(tf.io.decode_image(data["image/encoded"], channels=3, dtype=tf.uint8), (height, width, 3))
    return image.numpy(), label.numpy()[0]


def records(out: Path) -> dict[str, bytes]:
    rows = IndexedRecords(str(out), split="train")
    return {rows.example(i)[schema.FILENAME].decode(): rows.record(i) for i in range(len(rows))}


def test_masks_are_stored_where_model_garden_reads_them_and_every_problem_is_reported(
    folder: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    convert(str(folder), str(out), ConvertOptions(split="train=1"), workers=1, progress=False)
    m = manifest.read(str(out))
    assert m.header.task == "segmentation" and m.labels == CLASSES
    # images whose mask shows each class (every mask has background; the 255 band is no class)
    assert m.split("train").class_counts == {"background": 4, "red square": 2, "blue square": 2}
    assert set(m.data["features"]) == {*schema.IMAGE_TYPES, *schema.SEGMENTATION_TYPES}
    found = records(out)
    assert sorted(found) == ["images/astronaut.png", "images/chelsea.png", "images/coffee.png", "images/rocket.png"]
    for key, record in found.items():
        image, mask = model_garden_decode(record)
        assert mask.shape == image.shape[:2]
        assert set(np.unique(mask)) <= {0, 1, 2, 255}
        for label, colour in ((1, RED), (2, BLUE)):
            painted_pixels = (image == colour).all(axis=-1)
            assert np.array_equal(mask == label, painted_pixels & (mask != 255)), key
    rows = IndexedRecords(str(out), split="train")  # without TensorFlow: (image, mask), as Model Garden reads them
    for i in range(len(rows)):
        image, mask = rows[i]
        want_image, want_mask = model_garden_decode(rows.record(i))
        assert np.array_equal(image, want_image) and np.array_equal(mask, want_mask)
    report = json.loads((out / "report.json").read_text())
    reasons = {entry["file"]: entry["reason"] for entry in report["skipped"]}
    assert "no mask: masks/no_mask.png does not exist" in reasons["images/no_mask.png"]
    assert reasons["masks/orphan.png"] == "a mask without an image"
    assert "is 10 x 10, its image 451 x 300" in reasons["images/small_mask.png"]
    assert "holds class id 7, but classes.txt names 3" in reasons["images/stray_id.png"]
    assert "is a RGB image; masks hold class ids in one channel" in reasons["images/rgb_mask.png"]
    assert verify(str(out), progress=False).ok


def test_resize_and_crop_move_the_mask_with_the_pixels(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    image_options = ImageOptions(resize=120, center_crop=112, image_format="png")
    convert(str(folder), str(out), ConvertOptions(split="train=1", image=image_options), workers=2, progress=False)
    for key, record in records(out).items():
        image, mask = model_garden_decode(record)
        assert image.shape == (112, 112, 3) and mask.shape == (112, 112)
        for label, colour in ((1, RED), (2, BLUE)):
            near = np.abs(image.astype(int) - colour).max(axis=-1) <= 10  # pure object colour
            if near.sum() > 20:
                assert (mask[near] == label).mean() > 0.98, key  # painted pixels carry the object's class
            inside = mask == label
            if inside.sum() > 50:
                assert np.abs(image[inside].astype(int) - colour).max(axis=-1).mean() < 40, key


def test_an_exif_rotated_photo_turns_its_mask_alike(tmp_path: Path) -> None:
    """The mask is drawn on the pixels as the file holds them; the photo is stored upright (EXIF 6:
    turned 90 degrees clockwise), so the mask must turn with it."""
    root = tmp_path / "data"
    image, mask = painted("chelsea", [(1, (40, 30, 120, 100))])
    exif = Image.Exif()
    exif[0x0112] = 6
    save(image, root / "images" / "turned.jpg", quality=95, exif=exif.tobytes())
    save(mask, root / "masks" / "turned.png")
    (root / "classes.txt").write_text("\n".join(CLASSES))
    out = tmp_path / "out"
    convert(str(root), str(out), ConvertOptions(split="train=1"), workers=1, progress=False)
    stored, stored_mask = model_garden_decode(records(out)["images/turned.jpg"])
    assert stored.shape[:2] == (451, 300) and stored_mask.shape == (451, 300)  # upright: taller than wide
    red = np.abs(stored.astype(int) - RED).max(axis=-1) <= 30
    assert (stored_mask[red] == 1).mean() > 0.98 and (red[stored_mask == 1]).mean() > 0.9  # JPEG blurs edges


def test_workers_do_not_change_the_bytes(folder: Path, tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    convert(str(folder), str(one), ConvertOptions(split="train=1", shards=2), workers=1, progress=False)
    convert(str(folder), str(two), ConvertOptions(split="train=1", shards=2), workers=2, progress=False)
    assert shard_bytes(one) == shard_bytes(two)


def aligned(images: np.ndarray, masks: np.ndarray) -> None:
    """Where a batch's masks say "red square" (or "blue") the images are that colour, and the
    other way round: checked on the pixels, away from the squares' bilinear-blurred edges."""
    assert images.dtype == np.uint8 and masks.dtype == np.uint8 and masks.shape == images.shape[:3]
    for label, colour in ((1, RED), (2, BLUE)):
        inside = masks == label
        core = inside.copy()  # pixels whose 4 neighbours carry the label too
        core[:, 1:-1, 1:-1] &= inside[:, :-2, 1:-1] & inside[:, 2:, 1:-1] & inside[:, 1:-1, :-2] & inside[:, 1:-1, 2:]
        core[:, [0, -1], :] = False
        core[:, :, [0, -1]] = False
        if core.sum():
            assert np.abs(images[core].astype(int) - colour).max(axis=-1).mean() < 25
        pure = np.abs(images.astype(int) - colour).max(axis=-1) <= 12
        if pure.sum() > 20:
            assert (masks[pure] == label).mean() > 0.97


@pytest.mark.slow
@pytest.mark.parametrize("image_format", ["keep", "jpeg"])
def test_load_cuts_and_flips_each_mask_with_its_image(folder: Path, tmp_path: Path, image_format: str) -> None:
    """Random-resized crops and flips in training, the centre crop in evaluation: masks follow
    (PNG images decoded whole; JPEG ones through decode_and_crop_jpeg's window)."""
    out = tmp_path / "out"
    options = ConvertOptions(
        split="train=0.5,validation=0.5", image=ImageOptions(image_format=image_format, quality=98)
    )
    convert(str(folder), str(out), options, workers=1, progress=False)
    flipped = 0
    for seed in range(6):
        for images, masks in load(str(out), batch_size=2, image_size=96, seed=seed, training=True):
            aligned(images.numpy(), masks.numpy())
            flipped += 1
    assert flipped >= 6
    for images, masks in load(str(out), split="validation", batch_size=2, image_size=(64, 80)):
        assert images.shape[1:3] == (64, 80)
        aligned(images.numpy(), masks.numpy())
    letterbox, bars = DecodeOptions(letterbox=True), 0
    for images, masks in load(str(out), split="validation", batch_size=2, image_size=(96, 96), decode=letterbox):
        images, masks = images.numpy(), masks.numpy()
        aligned(images, masks)
        padding = masks == 255  # the bars: black in the image, ignored in the mask, whole rows or columns
        assert (images[padding] == 0).all()
        assert (padding == (padding.all(axis=2, keepdims=True) | padding.all(axis=1, keepdims=True))).all()
        bars += int(padding.sum())
    assert bars > 0


def test_what_masks_cannot_follow_is_refused(folder: Path, tmp_path: Path) -> None:
    from shardfeed import Augment, ReadOptions, grain_dataset

    out = tmp_path / "out"
    convert(str(folder), str(out), ConvertOptions(split="train=1"), workers=1, progress=False)
    with pytest.raises(OptionError, match="rotate= and translate= would move the images off their segmentation masks"):
        load(str(out), batch_size=2, augment=Augment(rotate=10))
    with pytest.raises(OptionError, match="balance='class' samples by each image's one class"):
        load(str(out), batch_size=2, seed=0, read=ReadOptions(balance="class"))
    with pytest.raises(OptionError, match="grain_dataset augments with the random-resized crop and the flip; rotate="):
        grain_dataset(str(out), batch_size=2, augment=Augment(rotate=10))


def test_a_damaged_stored_mask_is_found_by_verify(folder: Path, tmp_path: Path) -> None:
    from shardfeed.write.images.masks import check_stored_mask

    good = io.BytesIO()
    Image.fromarray(np.zeros((4, 6), np.uint8)).save(good, "PNG")
    assert check_stored_mask(good.getvalue(), 4, 6, 3) is None
    assert "is 6 x 4, the image 5 x 4" in str(check_stored_mask(good.getvalue(), 4, 5, 3))
    assert check_stored_mask(None, 4, 6, 3) == "record has no segmentation mask"
    stray = io.BytesIO()
    Image.fromarray(np.full((4, 6), 9, np.uint8)).save(stray, "PNG")
    assert "class id 9, outside 0..2" in str(check_stored_mask(stray.getvalue(), 4, 6, 3))


def test_show_draws_the_masks_and_info_says_the_task(folder: Path, tmp_path: Path) -> None:
    from shardfeed.tools import info, show

    out = tmp_path / "out"
    convert(str(folder), str(out), ConvertOptions(split="train=1"), workers=1, progress=False)
    facts = info(str(out))
    assert facts["task"] == "segmentation"
    coverage = facts["splits"]["train"]["images"]["mask_coverage"]  # the sampled masks' pixels per class
    assert set(coverage) == {"background", "red square", "blue square", "ignored"}
    assert abs(sum(coverage.values()) - 1) < 1e-3
    pixels = 451 * 300 + 600 * 400 + 512 * 512 + 640 * 427  # chelsea, coffee, astronaut, rocket
    assert coverage["red square"] == pytest.approx((80 * 70 + 100 * 120) / pixels, abs=1e-4)  # chelsea's, astronaut's
    tiles = {t.key: t for t in show(str(out), None, rows=2, cols=2)}
    chelsea = tiles["images/chelsea.png"]
    assert chelsea.caption == "red square, blue square"
    stored, mask = model_garden_decode(records(out)["images/chelsea.png"])
    changed = (chelsea.image != stored).any(axis=-1)
    assert np.array_equal(changed, (mask == 1) | (mask == 2))  # tinted exactly where the objects are
    augmented = show(str(out), None, rows=2, cols=2, augmented=True, image_size=64)  # the masks as load cut them
    assert len(augmented) == 4 and all(t.image.shape == (64, 64, 3) for t in augmented)
    assert {c for t in augmented for c in t.caption.split(", ")} <= {"red square", "blue square", ""}


def test_tfds_reads_the_masks(folder: Path, tmp_path: Path) -> None:
    """TFDS itself, on our metadata: the mask a one-channel PNG image."""
    import tensorflow_datasets as tfds

    out = tmp_path / "out"
    convert(str(folder), str(out), ConvertOptions(split="train=1"), workers=1, progress=False)
    stored = records(out)
    for example in tfds.builder_from_directory(str(out)).as_dataset(split="train"):
        key = example["image/filename"].numpy().decode()
        mask = example["image/segmentation/class/encoded"].numpy()
        assert np.array_equal(mask[..., 0], model_garden_decode(stored[key])[1])


def test_masks_without_classes_txt_name_their_ids(folder: Path, tmp_path: Path) -> None:
    """images/ + masks/ without classes.txt became class folders 'images' and 'masks' (the masks
    converted as photos). Now the masks' ids name the classes, class_0 .. class_N (N the largest id
    any mask holds: 7 in stray_id's), said in one warning; the masks stored are those the
    classes.txt conversion stores."""
    import shutil

    root = tmp_path / "data"
    shutil.copytree(folder, root)
    (root / "classes.txt").unlink()
    out = tmp_path / "out"
    done = shardfeed_cli("convert", str(root), str(out), "--split", "train=1")
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "has no classes.txt" in line]
    assert len(warned) == 1 and "its 7 masks hold class ids up to 7, named class_0 .. class_7" in warned[0], warned
    m = manifest.read(str(out))
    assert m.header.task == "segmentation" and m.labels == [f"class_{i}" for i in range(8)]
    ours = records(out)
    assert "images/stray_id.png" in ours  # its 7 is a class now
    named = tmp_path / "named"
    convert(str(folder), str(named), ConvertOptions(split="train=1"), progress=False)
    for key, record in records(named).items():
        assert np.array_equal(model_garden_decode(ours[key])[1], model_garden_decode(record)[1]), key
