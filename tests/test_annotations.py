"""Objects on an image, as records store them: every annotation checked against its image, and
the record read unchanged by the decoders other programs use.

TF Model Garden's decoder is its own: official/vision/dataloaders/tf_example_decoder.py
(`TfExampleDecoder`, include_mask=True) from tf-models-official, installed by the Makefile without
its dependencies. The OD API's feature spec is reproduced from its source (it does not install
over Keras 3): research/object_detection/data_decoders/tf_example_decoder.py (`keys_to_features`:
the object keys it parses).
Objects are solid squares pasted on real photos at known pixels, so where a decoded box lands is
checked against the pixels themselves, not against the formula that wrote it.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from conftest import photos
from PIL import Image

from shardfeed.format import annotations, schema
from shardfeed.format.annotations import object_features, read_objects
from shardfeed.format.example_proto import Example, parse_example, serialize_example
from shardfeed.format.object_checks import check_objects, clean_object_features

RED, BLUE = (255, 0, 0), (0, 0, 255)
# (colour, class, box in pixels (xmin, ymin, xmax, ymax)) pasted on skimage's chelsea (451 x 300)
PASTED = ((RED, 0, (40, 30, 120, 100)), (BLUE, 1, (300, 150, 451, 260)))
NAMES = ["red square", "blue square"]


def scene() -> tuple[np.ndarray, list[np.ndarray]]:
    """The photo with the squares pasted, and each square's mask."""
    image = photos()["chelsea"].copy()
    masks = []
    for colour, _, (x0, y0, x1, y1) in PASTED:
        image[y0:y1, x0:x1] = colour
        mask = np.zeros(image.shape[:2], np.uint8)
        mask[y0:y1, x0:x1] = 1
        masks.append(mask)
    return image, masks


def record(image: np.ndarray, objects: annotations.Objects, source_id: int = 7) -> bytes:
    """A record as the writer makes it: the image's own features and its objects'."""
    png = io.BytesIO()
    Image.fromarray(image).save(png, "PNG")  # lossless, so pasted pixels keep their colour
    height, width = image.shape[:2]
    features = {
        schema.ENCODED: png.getvalue(),
        schema.FORMAT: "PNG",
        schema.HEIGHT: height,
        schema.WIDTH: width,
        **object_features(objects, width=width, height=height, class_names=NAMES, label_offset=0, source_id=source_id),
    }
    return serialize_example(features)


def model_garden_decode(serialized: bytes) -> dict[str, np.ndarray]:
    """Model Garden's own `TfExampleDecoder(include_mask=True).decode` (tf-models-official, which
    the Makefile installs without its dependencies), its tensors as NumPy arrays."""
    import tensorflow as tf
    from official.vision.dataloaders.tf_example_decoder import TfExampleDecoder

    decoded = TfExampleDecoder(include_mask=True).decode(tf.constant(serialized))
    return {key: value.numpy() for key, value in decoded.items()}


def test_model_gardens_decoder_reads_boxes_that_frame_the_objects_pixels() -> None:
    image, masks = scene()
    height, width = image.shape[:2]
    checked = check_objects(
        [box for _, _, box in PASTED], [c for _, c, _ in PASTED], width=width, height=height, num_classes=2, masks=masks
    )
    assert checked.skipped == () and checked.clipped == ()
    decoded = model_garden_decode(record(image, checked.objects))
    assert decoded["source_id"] == b"7" and decoded["groundtruth_classes"].tolist() == [0, 1]
    assert decoded["groundtruth_is_crowd"].tolist() == [False, False]
    for (colour, _, (x0, y0, x1, y1)), box, mask, area in zip(
        PASTED,
        decoded["groundtruth_boxes"],
        decoded["groundtruth_instance_masks"],
        decoded["groundtruth_area"],
        strict=True,
    ):
        ymin, xmin, ymax, xmax = box
        rows = slice(round(ymin * height), round(ymax * height))
        cols = slice(round(xmin * width), round(xmax * width))
        assert (decoded["image"][rows, cols] == colour).all()  # the box holds only the object
        around = decoded["image"][max(rows.start - 1, 0) : rows.stop + 1, max(cols.start - 1, 0) : cols.stop + 1]
        colour_pixels = int((around == colour).all(axis=-1).sum())
        assert colour_pixels == (rows.stop - rows.start) * (cols.stop - cols.start)  # nothing of it outside
        assert np.array_equal(mask != 0, (decoded["image"] == colour).all(axis=-1))  # the mask is its pixels
        assert area == (x1 - x0) * (y1 - y0)


def test_an_image_without_objects_decodes_to_empty_tensors() -> None:
    image, _ = scene()
    decoded = model_garden_decode(record(image, annotations.Objects.none()))
    assert decoded["groundtruth_boxes"].shape == (0, 4) and decoded["groundtruth_classes"].shape == (0,)
    assert decoded["groundtruth_instance_masks"].shape == (0, *image.shape[:2])


def test_the_object_detection_apis_keys_parse_our_records() -> None:
    """The OD API's object keys (and their types), as its decoder parses them."""
    import tensorflow as tf

    image, _ = scene()
    height, width = image.shape[:2]
    checked = check_objects([box for _, _, box in PASTED], [0, 1], width=width, height=height, num_classes=2)
    spec = {
        "image/encoded": tf.io.FixedLenFeature((), tf.string, default_value=""),
        "image/format": tf.io.FixedLenFeature((), tf.string, default_value="jpeg"),
        "image/source_id": tf.io.FixedLenFeature((), tf.string, default_value=""),
        "image/height": tf.io.FixedLenFeature((), tf.int64, default_value=1),
        "image/width": tf.io.FixedLenFeature((), tf.int64, default_value=1),
        "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
        "image/object/class/label": tf.io.VarLenFeature(tf.int64),
        "image/object/class/text": tf.io.VarLenFeature(tf.string),
        "image/object/area": tf.io.VarLenFeature(tf.float32),
        "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
    }
    parsed = tf.io.parse_single_example(record(image, checked.objects), spec)
    texts = tf.sparse.to_dense(parsed["image/object/class/text"], default_value="").numpy().tolist()
    assert texts == [b"red square", b"blue square"]
    assert tf.sparse.to_dense(parsed["image/object/bbox/xmax"]).numpy().tolist() == pytest.approx([120 / 451, 1.0])


def test_every_annotation_is_kept_clipped_or_skipped_with_its_reason() -> None:
    boxes = [
        (10, 10, 50, 40),  # kept
        (-20, 250, 60, 330),  # partly outside: clipped to (0, 250, 60, 300)
        (500, 10, 600, 40),  # wholly outside
        (30, 30, 30, 60),  # no width
        (80, 60, 40, 90),  # inverted
        (math.nan, 1, 2, 3),  # not a number
        (1, 1, 5, 5),  # class out of range
    ]
    classes = [0, 1, 0, 0, 1, 0, 2]
    checked = check_objects(boxes, classes, width=451, height=300, num_classes=2, is_crowd=[0, 1, 0, 0, 0, 0, 0])
    assert checked.objects.boxes.tolist() == [[10, 10, 50, 40], [0, 250, 60, 300]]
    assert checked.objects.classes.tolist() == [0, 1] and checked.objects.is_crowd.tolist() == [False, True]
    assert checked.objects.areas.tolist() == [40 * 30, 60 * 50] and [i for i, _ in checked.clipped] == [1]
    reasons = {s.index: s.reason for s in checked.skipped}
    assert sorted(reasons) == [2, 3, 4, 5, 6]
    assert "wholly outside the 451 x 300 image" in reasons[2] and "empty" in reasons[3]
    assert "inverted" in reasons[4] and "not a number" in reasons[5] and "class 2 is outside 0..1" in reasons[6]
    # a source's area must be a number of pixels; where it is not, the clean-boxes path must not keep it either
    clean = [(10, 10, 50, 40)] * 4
    areas = [math.nan, -1.0, math.inf, 12.5]
    checked = check_objects(clean, [0] * 4, width=451, height=300, num_classes=2, areas=areas)
    assert [s.index for s in checked.skipped] == [0, 1, 2] and checked.objects.areas.tolist() == [12.5]
    assert all("not a finite, non-negative number of pixels" in s.reason for s in checked.skipped)


def test_a_box_that_is_empty_in_float32_is_skipped_as_empty_never_stored_flat() -> None:
    """10.0000001 - 10.0 passes a float64 check, but records hold float32 (10.0 both) divided by
    the side in float32: it was stored with xmin == xmax. It is skipped as empty, by both the
    per-box check and the clean-boxes path (no record features for the image as it is)."""
    from shardfeed.format.annotations import SourceObjects

    flat = (10.0, 10.0, 10.0000001, 20.0)
    assert flat[2] > flat[0] and np.float32(flat[2]) == np.float32(flat[0])  # the premise, independently
    for boxes, index in (([flat], 0), ([(1.0, 1.0, 5.0, 5.0), flat], 1), ([flat, (-4.0, 1.0, 5.0, 5.0)], 0)):
        checked = check_objects(boxes, [0] * len(boxes), width=640, height=480, num_classes=1)
        assert [s.index for s in checked.skipped] == [index], checked.skipped
        assert "empty" in checked.skipped[0].reason
        assert (checked.objects.boxes[:, 2] > checked.objects.boxes[:, 0]).all()
    edge = check_objects([(0.0, 10.0, 0.0, 20.0)], [0], width=640, height=480, num_classes=1)  # on the left edge
    assert "empty (no width or no height)" in edge.skipped[0].reason  # was "wholly outside"
    source = SourceObjects(boxes=(flat,), classes=(0,), is_crowd=(False,), areas=(None,), ids=(1,), source_id=1)
    assert clean_object_features(source, width=640, height=480, class_names=["a"], label_offset=0) is None


def test_the_thin_box_gate_never_passes_a_box_that_rounds_to_nothing() -> None:
    """`empty_when_stored` rounds only boxes thinner than 2^-20 of their far edge; over boxes of
    every thinness down to 2^-60 of the edge, its answer is the float32 rounding's own."""
    import random
    from array import array

    from shardfeed.format.object_checks import empty_when_stored

    def rounded_flat(xmin: float, ymin: float, xmax: float, ymax: float, width: int, height: int) -> bool:
        p = array("f", (xmin, ymin, xmax, ymax))
        s = array("f", (p[0] / width, p[1] / height, p[2] / width, p[3] / height))
        return not (s[0] < s[2] and s[1] < s[3])

    rng, flat = random.Random(1), 0
    for _ in range(20_000):
        width, height = rng.choice((1, 7, 640, 65535)), rng.choice((1, 480, 3000))
        x, y = rng.uniform(0, width), rng.uniform(0, height)
        box = (x, y, min(x + x * 2 ** -rng.uniform(0, 60), width), min(y + 5, height))
        if box[2] > box[0]:
            assert empty_when_stored(*box, width, height) == rounded_flat(*box, width, height), (box, width)
            flat += rounded_flat(*box, width, height)
    assert flat > 1000  # the sample holds many boxes that do round to nothing


def test_an_image_of_clean_boxes_is_kept_as_the_per_box_check_keeps_it() -> None:
    """`check_objects` keeps an image whose boxes need nothing clipped or skipped in one go; what
    it keeps must be what it keeps box by box. One more annotation it must skip (NaN) sends the
    same boxes through the per-box path; both must equal values worked out here."""
    rng = np.random.default_rng(7)
    for _ in range(60):
        count = int(rng.integers(1, 6))
        width, height = int(rng.integers(20, 900)), int(rng.integers(20, 900))
        x0, y0 = rng.uniform(0, width - 1, count), rng.uniform(0, height - 1, count)
        x1, y1 = rng.uniform(x0 + 0.5, width), rng.uniform(y0 + 0.5, height)
        boxes = [[float(a), float(b), float(c), float(d)] for a, b, c, d in zip(x0, y0, x1, y1, strict=True)]
        boxes[0] = [0.0, 0.0, float(width), float(height)]  # the whole image: on every edge, not clipped
        classes = rng.integers(0, 3, count).tolist()
        areas = [float(a) if rng.random() < 0.5 else None for a in rng.uniform(1, 1e4, count)]
        crowd = (rng.random(count) < 0.3).tolist()
        flags = rng.integers(0, 2, count).tolist()
        quick = check_objects(
            boxes, classes, width=width, height=height, num_classes=3, is_crowd=crowd, areas=areas,
            attributes={"difficult": flags},
        )  # fmt: skip
        careful = check_objects(
            [*boxes, [math.nan, 0, 1, 1]], [*classes, 0], width=width, height=height, num_classes=3,
            is_crowd=[*crowd, False], areas=[*areas, None], attributes={"difficult": [*flags, 0]},
        )  # fmt: skip
        assert not quick.skipped and quick.clipped == () and [s.index for s in careful.skipped] == [count]
        stored = np.array(boxes, np.float32)
        box_areas = (stored[:, 2] - stored[:, 0]) * (stored[:, 3] - stored[:, 1])
        expected_areas = np.array([a if a is not None else b for a, b in zip(areas, box_areas, strict=True)])
        for checked in (quick, careful):
            kept = checked.objects
            assert kept.boxes.dtype == np.float32 and np.array_equal(kept.boxes, stored)
            assert kept.classes.dtype == np.int64 and kept.classes.tolist() == classes
            assert kept.is_crowd.dtype == bool and kept.is_crowd.tolist() == crowd
            assert kept.areas.dtype == np.float32 and np.array_equal(kept.areas, expected_areas.astype(np.float32))
            assert kept.attributes["difficult"].tolist() == flags and kept.masks is None
        boxes[-1][2] = width + 2.5  # past the right edge: clipped and counted, whichever path looks
        sticking_out = check_objects(boxes, classes, width=width, height=height, num_classes=3)
        assert [i for i, _ in sticking_out.clipped] == [count - 1] and float(sticking_out.objects.boxes[-1, 2]) == width
        assert "(2.50 px outside)" in sticking_out.clipped[0][1]
        boxes[-1][2] = width * (1 + 0.9e-6)  # as far out as a YOLO export's six decimals put a box: not counted
        boxes[0][1] = -height * 0.9e-6  # the whole image's box, just above its top edge
        rounded = check_objects(boxes, classes, width=width, height=height, num_classes=3)
        assert rounded.clipped == () and float(rounded.objects.boxes[-1, 2]) == width
        assert float(rounded.objects.boxes[0, 1]) == 0.0


def test_clean_objects_make_the_record_the_checked_path_makes() -> None:
    """`clean_object_features` (the shortcut for images whose annotations all pass as they are)
    must write the very bytes the per-annotation path writes (`check_objects` then
    `object_features`), with the values float32 arithmetic gives, worked out here with NumPy:
    fractional pixel coordinates, areas given, missing or mixed, class ids past one varint
    byte, attributes, no objects at all."""
    rng = np.random.default_rng(11)
    names = [f"class {i}" for i in range(300)]
    for trial in range(80):
        count = 0 if trial % 10 == 0 else int(rng.integers(1, 7))
        width, height = int(rng.integers(20, 2000)), int(rng.integers(20, 2000))
        x0, y0 = rng.uniform(0, width - 1, count), rng.uniform(0, height - 1, count)
        x1, y1 = rng.uniform(x0 + 0.5, width), rng.uniform(y0 + 0.5, height)
        boxes = tuple((float(a), float(b), float(c), float(d)) for a, b, c, d in zip(x0, y0, x1, y1, strict=True))
        if trial % 3 == 0:  # whole pixels, as VOC's and most COCO files' boxes are
            boxes = tuple((math.floor(a), math.floor(b), math.ceil(c), math.ceil(d)) for a, b, c, d in boxes)
        classes = tuple(rng.integers(0, 300, count).tolist())
        given = rng.uniform(1, 1e5, count).tolist()
        areas = tuple(a if trial % 4 == 1 or (trial % 4 == 2 and rng.random() < 0.5) else None for a in given)
        crowd = tuple((rng.random(count) < 0.3).tolist())
        flags = tuple(rng.integers(0, 2, count).tolist())
        source = annotations.SourceObjects(
            boxes, classes, crowd, areas, tuple(range(count)), source_id=trial, attributes=(("difficult", flags),)
        )
        offset = 1 if trial % 2 else 0
        clean = clean_object_features(source, width=width, height=height, class_names=names, label_offset=offset)
        checked = check_objects(
            boxes, classes, width=width, height=height, num_classes=300, is_crowd=crowd, areas=areas,
            attributes={"difficult": flags},
        )  # fmt: skip
        careful = object_features(
            checked.objects, width=width, height=height, class_names=names, label_offset=offset, source_id=trial
        )
        assert clean is not None and serialize_example(clean) == serialize_example(careful)
        record = Example.FromString(serialize_example(clean)).features.feature
        stored = np.array(boxes, np.float32).reshape(-1, 4)
        scale = np.array([width, height, width, height], np.float32)
        for column, key in enumerate((schema.BOX_XMIN, schema.BOX_YMIN, schema.BOX_XMAX, schema.BOX_YMAX)):
            assert record[key].WhichOneof("kind") == "float_list"
            assert np.array_equal(np.array(record[key].float_list.value, np.float32), stored[:, column] / scale[column])
        box_areas = (stored[:, 2] - stored[:, 0]) * (stored[:, 3] - stored[:, 1])
        expected = np.array([a if a is not None else b for a, b in zip(areas, box_areas, strict=True)], np.float32)
        assert np.array_equal(np.array(record[schema.OBJECT_AREA].float_list.value, np.float32), expected)
        assert list(record[schema.OBJECT_LABEL].int64_list.value) == [c + offset for c in classes]
        assert list(record[schema.OBJECT_TEXT].bytes_list.value) == [names[c].encode() for c in classes]
        assert list(record[schema.OBJECT_IS_CROWD].int64_list.value) == [int(c) for c in crowd]
        assert record[schema.OBJECT_TEXT].WhichOneof("kind") == "bytes_list"  # even with no objects
        assert record[schema.OBJECT_IS_CROWD].WhichOneof("kind") == "int64_list"


def test_clean_objects_decline_what_needs_a_look() -> None:
    """Whatever `check_objects` would clip, skip or turn into masks, and boxes given as fractions,
    go the per-annotation way (None)."""
    box = (10.0, 10.0, 50.0, 40.0)

    def source(**changes: object) -> annotations.SourceObjects:
        fields: dict[str, object] = {
            "boxes": (box,), "classes": (0,), "is_crowd": (False,), "areas": (None,), "ids": (1,), "source_id": 1,
        }  # fmt: skip
        return annotations.SourceObjects(**(fields | changes))  # type: ignore[arg-type]

    def clean(objects: annotations.SourceObjects) -> object:
        return clean_object_features(objects, width=100, height=50, class_names=NAMES, label_offset=0)

    assert clean(source()) is not None
    assert clean(source(boxes=((10.0, 10.0, 101.0, 40.0),))) is None  # sticks out: clipped
    assert clean(source(boxes=((10.0, 10.0, 10.0, 40.0),))) is None  # empty
    assert clean(source(boxes=((math.nan, 10.0, 50.0, 40.0),))) is None
    assert clean(source(classes=(2,))) is None  # no such class
    assert clean(source(areas=(-1.0,))) is None
    assert clean(source(is_crowd=(False, True))) is None  # lists of other lengths
    assert clean(source(normalised=True, boxes=((0.1, 0.2, 0.5, 0.8),))) is None
    assert clean(source(segmentations=("[[10, 10, 50, 10, 50, 40]]",))) is None


def test_a_mask_must_match_its_image() -> None:
    good, wrong = np.ones((300, 451), np.uint8), np.ones((300, 450), np.uint8)
    checked = check_objects(
        [(0, 0, 5, 5)] * 3, [0, 0, 0], width=451, height=300, num_classes=1, masks=[good, wrong, None]
    )
    assert [s.index for s in checked.skipped] == [1, 2] and len(checked.objects) == 1
    assert "mask of shape (300, 450) for a 451 x 300 image" in checked.skipped[0].reason
    assert "no mask" in checked.skipped[1].reason


def test_read_objects_undoes_object_features() -> None:
    image, masks = scene()
    checked = check_objects(
        [box for _, _, box in PASTED],
        [0, 1],
        width=451,
        height=300,
        num_classes=2,
        areas=[5000.0, None],
        masks=masks,
        attributes={"difficult": [1, 0]},
    )
    back = read_objects(parse_example(record(image, checked.objects)), width=451, height=300, label_offset=0)
    assert np.allclose(back.boxes, checked.objects.boxes, atol=1e-3)
    assert back.classes.tolist() == [0, 1] and back.areas.tolist() == [5000.0, 151 * 110]
    assert back.attributes["difficult"].tolist() == [1, 0] and back.masks == checked.objects.masks


@pytest.mark.parametrize("orientation", range(1, 9))
def test_boxes_turn_as_pillow_turns_the_pixels(orientation: int) -> None:
    """Each EXIF orientation: a box drawn on the pixels as stored lands where Pillow's
    exif_transpose puts those pixels."""
    from PIL import ImageOps

    from shardfeed.format.annotations import turned_boxes

    pixels = np.zeros((30, 50), np.uint8)
    pixels[5:12, 20:41] = 255
    im = Image.fromarray(pixels)
    exif = im.getexif()
    exif[0x0112] = orientation
    data = io.BytesIO()
    im.save(data, "PNG", exif=exif.tobytes())
    upright = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data.getvalue()))))
    ys, xs = np.nonzero(upright)
    found = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
    assert turned_boxes(np.array([[20.0, 5, 41, 12]]), (50, 30), orientation)[0].tolist() == found
