"""Pascal VOC and YOLO folders converted to the records Model Garden's detection decoder reads.

Each folder is written in its format's own conventions over real photos with solid squares
pasted at known places: VOC's XML with 1-based inclusive pixel indices, `difficult` and
`truncated`, ImageSets/Main split lists; YOLO's normalised `class cx cy w h` lines (and a
polygon line), Ultralytics' data.yaml and images/train + images/val. The expected coordinates
are computed here from where the squares were pasted, not by the code under test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import photos, shardfeed_cli
from PIL import Image
from test_coco import BLUE, RED, decoded, frames

from shardfeed import ConvertOptions, convert, load
from shardfeed.errors import SourceError
from shardfeed.format import manifest, schema
from shardfeed.format.annotations import key_number
from shardfeed.read.indexed import IndexedRecords
from shardfeed.write.sources import VocSource, YoloSource, resolve_source

# photo -> squares (colour, class name, (x, y, w, h)) pasted on it
SQUARES = {
    "chelsea": [(RED, "person", (40, 30, 80, 70)), (BLUE, "car", (300, 150, 151, 110))],  # blue: to the right edge
    "coffee": [(BLUE, "car", (10, 200, 80, 90))],
    "rocket": [],
}


def pasted(name: str) -> np.ndarray:
    photo = photos()[name].copy()
    for colour, _, (x, y, w, h) in SQUARES[name]:
        photo[y : y + h, x : x + w] = colour
    return photo


def voc_object(name: str, box: tuple[int, int, int, int], difficult: int = 0, truncated: int = 0) -> str:
    x, y, w, h = box
    return (
        f"<object><name>{name}</name><pose>Unspecified</pose><truncated>{truncated}</truncated>"
        f"<difficult>{difficult}</difficult><bndbox><xmin>{x + 1}</xmin><ymin>{y + 1}</ymin>"
        f"<xmax>{x + w}</xmax><ymax>{y + h}</ymax></bndbox></object>"
    )


@pytest.fixture(scope="module")
def voc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """VOC2012's layout: the chelsea XML has a difficult and a truncated object, a box-less
    object, and one of an unlisted class; broken XMLs and one naming a file outside beside them."""
    root = tmp_path_factory.mktemp("voc")
    for folder in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / folder).mkdir(parents=True)
    for name in SQUARES:
        filename = f"{name}.png" if name == "chelsea" else f"{name}.jpg"  # VOC's are JPEGs; PNG keeps edges exact
        Image.fromarray(pasted(name)).save(root / "JPEGImages" / filename, quality=97)
        objects = [voc_object(c, box, difficult=int(c == "person")) for _, c, box in SQUARES[name]]
        if name == "chelsea":
            objects[1] = voc_object("car", SQUARES[name][1][2], truncated=1)
            objects += ["<object><name>dog</name></object>", voc_object("horse", (1, 1, 5, 5))]
        h, w = photos()[name].shape[:2]
        (root / "Annotations" / f"{name}.xml").write_text(
            f"<annotation><folder>VOC2012</folder><filename>{filename}</filename>"
            f"<size><width>{w}</width><height>{h}</height><depth>3</depth></size>{''.join(objects)}</annotation>"
        )
    (root / "Annotations" / "broken.xml").write_text("<annotation><filename>x.jpg</filename>")
    (root / "Annotations" / "entities.xml").write_text('<!DOCTYPE a [<!ENTITY e "x">]><annotation>&e;</annotation>')
    (root / "Annotations" / "outside.xml").write_text("<annotation><filename>../../etc/passwd</filename></annotation>")
    (root / "Annotations" / "gone.xml").write_text("<annotation><filename>gone.jpg</filename></annotation>")
    return root


def test_voc_boxes_are_its_pixels_and_every_skip_is_reported(voc: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert isinstance(resolve_source(str(voc)), VocSource)
    convert(str(voc), str(out), ConvertOptions(split="train=1"), progress=False)
    m = manifest.read(str(out))
    assert m.header.task == "detection" and m.labels == ["car", "horse", "person"]  # the names used, sorted
    assert m.split("train").num_records == 3
    found = decoded(out)
    chelsea = found["JPEGImages/chelsea.png"]
    assert chelsea["groundtruth_classes"].tolist() == [3, 1, 2]  # person, car, horse: the XML's order; 0: background
    expected = [[30 / 300, 40 / 451, 100 / 300, 120 / 451], [150 / 300, 300 / 451, 260 / 300, 1.0]]  # y, x, y, x
    assert np.allclose(chelsea["groundtruth_boxes"][:2], expected, atol=1e-6)
    for box, colour in zip(chelsea["groundtruth_boxes"][:2], (RED, BLUE), strict=True):
        frames(chelsea["image"], box, colour, tolerance=0)
    frames(found["JPEGImages/coffee.jpg"]["image"], found["JPEGImages/coffee.jpg"]["groundtruth_boxes"][0], BLUE, 40)
    assert found["JPEGImages/rocket.jpg"]["groundtruth_boxes"].shape == (0, 4)
    rows = IndexedRecords(str(out), split="train")
    example = next(rows.example(i) for i in range(3) if rows.example(i)[schema.FILENAME] == b"JPEGImages/chelsea.png")
    assert list(example["image/object/difficult"]) == [1, 0, 0] and list(example["image/object/truncated"]) == [0, 1, 0]
    assert chelsea["source_id"] == str(key_number("JPEGImages/chelsea.png")).encode()  # from the key: stable
    skipped = {s["file"]: s["reason"] for s in json.loads((out / "report.json").read_text())["skipped"]}
    assert skipped["Annotations/chelsea.xml: object 2"] == "<bndbox> does not hold four numbers xmin, ymin, xmax, ymax"
    assert skipped["Annotations/broken.xml"].startswith("not readable XML")
    assert skipped["Annotations/entities.xml"].startswith("has a DOCTYPE")
    assert "leaves the folder" in skipped["Annotations/outside.xml"] or "../" in skipped["Annotations/outside.xml"]
    assert skipped["Annotations/gone.xml"] == "its image JPEGImages/gone.jpg does not exist"
    assert len(skipped) == 5


def test_voc_split_lists_and_classes_txt(voc: Path, tmp_path: Path) -> None:
    """ImageSets/Main's lists make the splits (an image in none is reported); classes.txt fixes
    the ids, and an object of a class it lacks is reported."""
    root = tmp_path / "voc"
    subprocess.run(["cp", "-r", str(voc), str(root)], check=True)
    for name in ("broken", "entities", "outside", "gone"):
        (root / "Annotations" / f"{name}.xml").unlink()
    (root / "ImageSets" / "Main" / "train.txt").write_text("chelsea\ncoffee\n")
    (root / "ImageSets" / "Main" / "val.txt").write_text("coffee_never_listed_elsewhere\n")
    (root / "classes.txt").write_text("person\ncar\n")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "shardfeed", "convert", str(root), str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    m = manifest.read(str(out))
    assert m.labels == ["person", "car"] and m.split_names == ["train"]
    assert m.split("train").num_records == 2
    chelsea = decoded(out)["JPEGImages/chelsea.png"]
    assert chelsea["groundtruth_classes"].tolist() == [1, 2]
    skipped = {s["file"]: s["reason"] for s in json.loads((out / "report.json").read_text())["skipped"]}
    assert skipped["Annotations/chelsea.xml: object 3"] == "class 'horse' is not in classes.txt"
    assert skipped["Annotations/rocket.xml"] == "in none of ImageSets/Main's lists (train, val): not converted"


def yolo_line(label: int, box: tuple[int, int, int, int], width: int, height: int) -> str:
    x, y, w, h = box
    return f"{label} {(x + w / 2) / width:.6f} {(y + h / 2) / height:.6f} {w / width:.6f} {h / height:.6f}"


@pytest.fixture(scope="module")
def yolo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ultralytics' layout: images/{train,val}, labels/{train,val}, data.yaml with names as a
    mapping. The coffee photo is stored turned (EXIF 6), its labels on the upright image."""
    root = tmp_path_factory.mktemp("yolo")
    names = {"person": 0, "car": 1}
    for split in ("train", "val"):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
    Image.fromarray(pasted("chelsea")).save(root / "images" / "train" / "chelsea.png")
    lines = [yolo_line(names[c], box, 451, 300) for _, c, box in SQUARES["chelsea"]]
    lines += ["0 0.1 0.1 0.2 0.1 0.2 0.3 0.15 0.2", "1 one two", "7 0.5 0.5 0.1 0.1", "0 0.5 0.5"]
    (root / "labels" / "train" / "chelsea.txt").write_text("\n".join(lines) + "\n")
    exif = Image.Exif()
    exif[0x0112] = 6  # view turned 90 degrees clockwise: store it turned the other way
    Image.fromarray(np.rot90(pasted("coffee"))).save(root / "images" / "val" / "coffee.jpg", quality=97, exif=exif)
    (root / "labels" / "val" / "coffee.txt").write_text(yolo_line(1, SQUARES["coffee"][0][2], 600, 400) + "\n")
    Image.fromarray(pasted("rocket")).save(root / "images" / "train" / "rocket.jpg", quality=97)  # no label file
    (root / "labels" / "train" / "orphan.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    (root / "data.yaml").write_text("path: .\ntrain: images/train\nval: images/val\nnames:\n  0: person\n  1: car\n")
    return root


def test_yolo_boxes_after_the_exif_turn_and_every_skip_is_reported(yolo: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert isinstance(resolve_source(str(yolo)), YoloSource)
    convert(str(yolo), str(out), progress=False)
    m = manifest.read(str(out))
    assert m.header.task == "detection" and m.labels == ["person", "car"]
    assert sorted(m.split_names) == ["train", "val"]
    found = decoded(out) | {k: v for k, v in _decoded(out, "val").items()}
    chelsea = found["images/train/chelsea.png"]
    assert chelsea["groundtruth_classes"].tolist() == [1, 2, 1]
    expected = [[30 / 300, 40 / 451, 100 / 300, 120 / 451], [150 / 300, 300 / 451, 260 / 300, 1.0]]
    assert np.allclose(chelsea["groundtruth_boxes"][:2], expected, atol=2e-6)
    assert np.allclose(chelsea["groundtruth_boxes"][2], [0.1, 0.1, 0.3, 0.2], atol=1e-6)  # the polygon's extent
    for box, colour in zip(chelsea["groundtruth_boxes"][:2], (RED, BLUE), strict=True):
        frames(chelsea["image"], box, colour, tolerance=0)
    coffee = found["images/val/coffee.jpg"]
    assert coffee["image"].shape == (400, 600, 3)  # turned upright
    frames(coffee["image"], coffee["groundtruth_boxes"][0], BLUE, tolerance=40)
    assert found["images/train/rocket.jpg"]["groundtruth_boxes"].shape == (0, 4)
    report = json.loads((out / "report.json").read_text())
    skipped = {s["file"]: s["reason"] for s in report["skipped"]}
    assert skipped["labels/train/chelsea.txt: line 4"].endswith("is not `class cx cy w h` (numbers)")
    assert skipped["labels/train/chelsea.txt: line 6"] == "2 numbers after the class: a box has 4, a polygon 6 or more"
    assert skipped["labels/train/orphan.txt"] == "a label file without an image"
    annotations = {(s["file"], s["annotation"]): s["reason"] for s in report["skipped_annotations"]}
    assert annotations == {("images/train/chelsea.png", 5): "class 7 is outside 0..1"}
    from shardfeed.tools.dataset_info import format_info, info

    facts = info(str(out))
    # chelsea: red 80 x 70 and the polygon's 90 x 30 (medium), blue 151 x 110 (large); coffee: 80 x 90 (medium)
    assert facts["splits"]["train"]["objects"] == {
        "instance_counts": {"car": 1, "person": 2},
        "box_sizes": {"small": 0, "medium": 2, "large": 1},
        "images_without_objects": 1,
        "max_objects_per_image": 3,  # chelsea's three
    }
    assert "train objects: 3 (1.50 per image, at most 3; small 0, medium 2, large 1), 1 image without any" in (
        format_info(facts)
    )


def _decoded(out: Path, split: str) -> dict[str, dict[str, np.ndarray]]:
    from test_annotations import model_garden_decode

    rows = IndexedRecords(str(out), split=split)
    return {rows.example(i)[schema.FILENAME].decode(): model_garden_decode(rows.record(i)) for i in range(len(rows))}


def test_yolo_classes_txt_and_load(yolo: Path, tmp_path: Path) -> None:
    """classes.txt instead of data.yaml; `load` gives each box on its square."""
    root = tmp_path / "yolo"
    subprocess.run(["cp", "-r", str(yolo), str(root)], check=True)
    (root / "data.yaml").unlink()
    (root / "classes.txt").write_text("person\ncar\n")
    out = tmp_path / "out"
    convert(str(root), str(out), progress=False)
    ((images, targets),) = list(load(str(out), split="train", batch_size=2, image_size=(150, 200), training=False))
    colours = {0: RED, 1: BLUE}
    seen = 0
    for image, boxes, labels in zip(images.numpy(), targets["boxes"].numpy(), targets["labels"].numpy(), strict=True):
        for (x0, y0, x1, y1), label in zip(boxes[:2], labels[:2], strict=True):  # the third: a polygon, not pasted
            if label < 0:
                continue
            inner = image[int(np.ceil(y0)) + 1 : int(y1) - 1, int(np.ceil(x0)) + 1 : int(x1) - 1]
            assert np.abs(inner.astype(int) - colours[int(label)]).max(axis=-1).mean() < 30
            seen += 1
    assert seen == 2


def test_a_hub_detection_table_cppe5_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The layout of the Hub's detection datasets (cppe-5, the Hugging Face object detection
    guide's): an `objects` column of COCO boxes and ClassLabel categories, written by `datasets`
    itself to Hub-layout Parquet. Each box frames its square, and
    a box outside its image is a skipped annotation."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    names = ["person", "car"]
    features = datasets.Features(
        {
            "image_id": datasets.Value("int64"),
            "image": datasets.Image(),
            "objects": datasets.Sequence(
                {
                    "id": datasets.Value("int64"),
                    "area": datasets.Value("int64"),
                    "bbox": datasets.Sequence(datasets.Value("float32"), length=4),
                    "category": datasets.ClassLabel(names=names),
                }
            ),
        }
    )
    rows: dict[str, list] = {"image_id": [], "image": [], "objects": []}
    for number, name in enumerate(SQUARES, start=1):
        png = tmp_path / f"{name}.png"
        Image.fromarray(pasted(name)).save(png)
        squares = SQUARES[name]
        rows["image_id"].append(number)
        rows["image"].append({"bytes": png.read_bytes(), "path": None})
        rows["objects"].append(
            {
                "id": [10 * number + i for i in range(len(squares))],
                "area": [w * h for _, _, (_, _, w, h) in squares],
                "bbox": [list(box) for _, _, box in squares],
                "category": [names.index(c) for _, c, _ in squares],
            }
        )
    rows["objects"][2] = {"id": [31], "area": [400], "bbox": [[700.0, 10.0, 20.0, 20.0]], "category": [0]}  # outside
    table = datasets.Dataset.from_dict(rows, features=features)
    hub = tmp_path / "hub" / "data"
    hub.mkdir(parents=True)
    table.to_parquet(str(hub / "train-00000-of-00001.parquet"))
    out = tmp_path / "out"
    convert(str(hub.parent), str(out), progress=False)
    m = manifest.read(str(out))
    assert m.header.task == "detection" and m.labels == names and m.split_names == ["train"]
    found = decoded(out)
    chelsea = found["data/train-00000-of-00001.parquet/0000000.png"]
    assert chelsea["groundtruth_classes"].tolist() == [1, 2]
    assert chelsea["source_id"] == str(key_number("data/train-00000-of-00001.parquet/0000000")).encode()
    for box, colour in zip(chelsea["groundtruth_boxes"], (RED, BLUE), strict=True):
        frames(chelsea["image"], box, colour, tolerance=0)
    assert chelsea["groundtruth_area"].tolist() == [80 * 70, 151 * 110]
    report = json.loads((out / "report.json").read_text())
    annotations = {(s["file"], s["annotation"]): s["reason"] for s in report["skipped_annotations"]}
    where = ("data/train-00000-of-00001.parquet/0000002.png", 31)
    assert annotations == {where: "box [700.0, 10.0, 720.0, 30.0]: wholly outside the 640 x 427 image"}


def test_objects_cells_other_writers_make() -> None:
    """A list of dicts (one per object) reads as the dict of lists `datasets` writes; a cell
    whose lists do not add up, or whose boxes are not four numbers, is the row's reason."""
    from shardfeed.write.sources.table_objects import row_objects

    listed = row_objects([{"bbox": [10, 20, 30, 40], "category": 1}, {"bbox": [0, 0, 5, 5], "category": 0}], 7)
    assert not isinstance(listed, str)
    assert listed.boxes == ((10.0, 20.0, 40.0, 60.0), (0.0, 0.0, 5.0, 5.0)) and listed.classes == (1, 0)
    assert listed.source_id == 7 and listed.ids == (0, 1) and listed.is_crowd == (False, False)
    empty = row_objects(None, 1)
    assert not isinstance(empty, str) and empty.boxes == ()
    assert row_objects({"bbox": [[1, 2, 3, 4]], "category": []}, 1) == "its objects cell has 1 boxes and 0 categories"
    assert row_objects({"bbox": [[1, 2, 3]], "category": [0]}, 1).startswith("a bbox of its objects is not four")


def test_append_reports_changed_annotations_and_keeps_source_ids(yolo: Path, tmp_path: Path) -> None:
    """An image whose label file changed while its bytes did not is reported by `--append`
    (its record keeps what was converted), and the source ids written before stay what they were
    when images are added (they come from the keys)."""
    root = tmp_path / "yolo"
    subprocess.run(["cp", "-r", str(yolo), str(root)], check=True)
    out = tmp_path / "out"
    options = ConvertOptions(split_rule="hash", append=True)
    convert(str(root), str(out), options, progress=False)
    before = {k: v["source_id"] for k, v in decoded(out).items()}
    (root / "labels" / "train" / "chelsea.txt").write_text("0 0.5 0.5 0.2 0.2\n")  # redrawn
    Image.fromarray(pasted("coffee")).save(root / "images" / "train" / "another.png")  # and a new image
    done = subprocess.run(
        [sys.executable, "-m", "shardfeed", "convert", str(root), str(out), "--append"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "1 converted images have changed annotations (objects, labels or mask)" in done.stdout
    changed = json.loads((out / "report.json").read_text())["changed"]
    assert [c["file"] for c in changed] == ["images/train/chelsea.png"] and "now_annotations" in changed[0]
    after = {k: v["source_id"] for k, v in decoded(out).items()}
    assert {k: after[k] for k in before} == before and after["images/train/another.png"] not in before.values()
    # the most objects in one image, over both generations: chelsea's three, as first converted
    assert manifest.read(str(out)).split("train").objects.most == 3  # type: ignore[union-attr]


def test_voc2007_as_distributed_trainval_and_test_lists_and_unannotated_test_images(voc: Path, tmp_path: Path) -> None:
    """VOC2007's tars ship ImageSets/Main/trainval.txt and test.txt (every trainval image was
    'in none of the lists': 12 of 52 written, exit 0); VOC2012's test images have no XML (a
    listed image without one was in no shard and not in report.json). trainval is the train
    split; a listed image without an XML is a test image without objects; a name with neither
    is reported; an XML whose <filename> names no file is paired with JPEGImages/<its name>.jpg,
    with a warning, as torchvision and mmdet read VOC."""
    root = tmp_path / "voc"
    subprocess.run(["cp", "-r", str(voc), str(root)], check=True)
    for name in ("broken", "entities", "outside", "gone"):
        (root / "Annotations" / f"{name}.xml").unlink()
    xml = root / "Annotations" / "coffee.xml"
    xml.write_text(xml.read_text().replace("<filename>coffee.jpg</filename>", "<filename>000042.jpg</filename>"))
    Image.fromarray(photos()["astronaut"]).save(root / "JPEGImages" / "2008_000001.jpg", quality=90)
    (root / "ImageSets" / "Main" / "trainval.txt").write_text("chelsea\ncoffee\n")
    (root / "ImageSets" / "Main" / "test.txt").write_text("rocket\n2008_000001\n2008_000002\n")
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match=r"1 VOC annotation files name a <filename> that is not in JPEGImages/"):
        convert(str(root), str(out), progress=False)
    m = manifest.read(str(out))
    assert m.split_names == ["test", "train"]
    assert (m.split("train").num_records, m.split("test").num_records) == (2, 2)
    assert decoded(out)["JPEGImages/coffee.jpg"]["groundtruth_boxes"].shape == (1, 4)  # its own XML's box
    tests = IndexedRecords(str(out), split="test")
    unannotated = next(tests.example(i) for i in range(2) if tests.example(i)[schema.FILENAME].endswith(b"01.jpg"))
    assert len(unannotated["image/object/bbox/xmin"]) == 0
    skipped = {s["file"]: s["reason"] for s in json.loads((out / "report.json").read_text())["skipped"]}
    assert skipped == {
        "Annotations/chelsea.xml: object 2": "<bndbox> does not hold four numbers xmin, ymin, xmax, ymax",
        "ImageSets/Main/test.txt: 2008_000002": "listed, but neither Annotations/2008_000002.xml nor "
        "JPEGImages/2008_000002.jpg exists",
    }
    (root / "ImageSets" / "Main" / "test.txt").write_text("rocket\nchelsea\n")
    with pytest.raises(SourceError, match=r"test.txt: chelsea is listed in trainval.txt too; an image is in one split"):
        convert(str(root), str(tmp_path / "out2"), progress=False)


def _layout(root: Path, files: dict[str, bytes | str]) -> Path:
    """A folder holding `files` (relative path -> content)."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


@pytest.mark.parametrize(
    ("layout", "resembles"),
    [
        ("roboflow_no_labels", "a YOLO export (Ultralytics' or Roboflow's data.yaml"),
        ("darknet_no_names", "a YOLO export"),
        ("yolo_no_names", "a YOLO folder (images/ and labels/) without its class names"),
        ("labelimg_no_images", "a Pascal VOC folder, which needs both Annotations/ and JPEGImages/"),
        ("masks_elsewhere", "a segmentation folder (images/ and masks/) whose masks are not at their images' paths"),
        ("voc_half", "a Pascal VOC folder, which needs both Annotations/ and JPEGImages/"),
    ],
)
def test_annotated_layouts_that_match_none_in_full_are_refused_never_class_folders(
    tmp_path: Path, layout: str, resembles: str
) -> None:
    """Each became class folders named images, labels, annotations, masks (every label file 'not
    an image'), exit 0. Now `convert` refuses it in one line naming what it resembles, and writes
    nothing."""
    jpeg = _jpeg()
    line = "0 0.5 0.5 0.2 0.2\n"

    def three(pattern: str, content: bytes | str) -> dict[str, bytes | str]:
        return {pattern.format(i=i): content for i in range(3)}

    layouts: dict[str, dict[str, bytes | str]] = {
        "roboflow_no_labels": {"data.yaml": "names: [cat]\n", **three("train/images/{i}.jpg", jpeg)},
        "darknet_no_names": {
            "obj.data": "classes = 1\nnames = data/obj.names\n",
            "train.txt": "obj_train_data/0.jpg\n",
            **three("obj_train_data/{i}.jpg", jpeg),
            **three("obj_train_data/{i}.txt", line),
        },
        "yolo_no_names": {**three("images/{i}.jpg", jpeg), **three("labels/{i}.txt", line)},
        "labelimg_no_images": {**three("photos/{i}.jpg", jpeg), **three("annotations/{i}.xml", "<annotation/>")},
        "masks_elsewhere": {**three("images/{i}.jpg", jpeg), **three("masks/{i}_mask.png", jpeg)},
        "voc_half": {**three("JPEGImages/{i}.jpg", jpeg), "ImageSets/Main/train.txt": "0\n"},
    }
    source = _layout(tmp_path / layout, layouts[layout])
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "shardfeed", "convert", str(source), str(out)], capture_output=True, text=True
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {source} is not a folder of class folders") and resembles in last, last
    assert not (out / "manifest.json").exists()


def _jpeg() -> bytes:
    import io

    buffer = io.BytesIO()
    Image.fromarray(photos()["coffee"][:64, :64]).save(buffer, "JPEG")
    return buffer.getvalue()


def _converted_beside(root: Path, reference: Path, tmp_path: Path) -> tuple[manifest.Manifest, manifest.Manifest]:
    """The manifests of `root` converted by `shardfeed convert ROOT OUT` alone and of the same
    annotations in the layout the fixture `reference` has."""
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "shardfeed", "convert", str(root), str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    convert(str(reference), str(tmp_path / "reference"), progress=False)
    return manifest.read(str(out)), manifest.read(str(tmp_path / "reference"))


def test_a_roboflow_yolo_export_converts_its_splits(yolo: Path, tmp_path: Path) -> None:
    """Roboflow's (and Ultralytics' exported) YOLO layout: data.yaml at the top, then
    train/images + train/labels, valid/images + valid/labels. It became class folders 'images' and
    'labels'; now each split folder is its split, with the same boxes as the images/ + labels/
    layout gives."""
    root = tmp_path / "export"
    for split, theirs in (("train", "train"), ("valid", "val")):
        for kind in ("images", "labels"):
            shutil.copytree(yolo / kind / theirs, root / split / kind)
    shutil.copy(yolo / "data.yaml", root / "data.yaml")
    m, r = _converted_beside(root, yolo, tmp_path)
    assert m.header.task == "detection" and m.labels == r.labels and m.split_names == ["train", "valid"]
    for ours, theirs in (("train", "train"), ("valid", "val")):
        assert m.split(ours).num_records == r.split(theirs).num_records
        assert dict(m.split(ours).objects.instances) == dict(r.split(theirs).objects.instances)


def test_labelimg_annotations_beside_images_convert_as_voc(voc: Path, tmp_path: Path) -> None:
    """LabelImg saves Pascal VOC XML; its users keep them in annotations/ beside images/ (the
    raccoon tutorial's layout). All 200 photos became class 'images'; now the XMLs' boxes are read
    as VOC's, the same as from Annotations/ + JPEGImages/."""
    root = tmp_path / "labelimg"
    shutil.copytree(voc / "JPEGImages", root / "images")
    shutil.copytree(voc / "Annotations", root / "annotations")
    for name in ("broken", "entities", "outside", "gone"):
        (root / "annotations" / f"{name}.xml").unlink()
    m, r = _converted_beside(root, voc, tmp_path)
    assert m.header.task == "detection" and m.labels == r.labels
    ours = sum(m.split(s).num_records for s in m.split_names)
    assert ours == sum(r.split(s).num_records for s in r.split_names) == 3
    assert sum(sum(m.split(s).objects.instances.values()) for s in m.split_names) == sum(
        sum(r.split(s).objects.instances.values()) for s in r.split_names
    )


def test_darknet_and_cvat_yolo_folders_convert_their_splits(yolo: Path, tmp_path: Path) -> None:
    """Darknet's layout as CVAT's "YOLO 1.1" export writes it: obj.names, obj.data, train.txt and
    obj_train_data/ (obj_valid_data/) holding each image with its .txt beside it. It became class
    folders 'obj_train_data'; now each obj_<split>_data folder is its split, with the boxes the
    images/ + labels/ layout gives."""
    root = tmp_path / "darknet"
    for split, theirs in (("train", "train"), ("valid", "val")):
        shutil.copytree(yolo / "images" / theirs, root / f"obj_{split}_data")
        for label in (yolo / "labels" / theirs).iterdir():
            shutil.copy(label, root / f"obj_{split}_data" / label.name)
    (root / "obj.names").write_text("person\ncar\n")
    (root / "obj.data").write_text("classes = 2\ntrain = data/train.txt\nnames = data/obj.names\nbackup = backup/\n")
    (root / "train.txt").write_text(
        "".join(f"data/obj_train_data/{p.name}\n" for p in (yolo / "images" / "train").iterdir())
    )
    m, r = _converted_beside(root, yolo, tmp_path)
    assert m.header.task == "detection" and m.labels == r.labels == ["person", "car"]
    assert m.split_names == ["train", "valid"]
    for ours, theirs in (("train", "train"), ("valid", "val")):
        assert m.split(ours).num_records == r.split(theirs).num_records
        assert dict(m.split(ours).objects.instances) == dict(r.split(theirs).objects.instances)


def test_class_ids_from_1_and_a_label_map_as_model_garden_and_the_od_api_train_on_them(
    yolo: Path, tmp_path: Path
) -> None:
    """Model Garden's and the OD API's detection training drop class 0 as the background: records
    written 0..K-1 never taught them the first class. Now ids are 1..K with label_map.pbtxt beside
    labels.txt, read back by Model Garden's own decoder; load gives KerasHub 0..K-1 all the same,
    and `--label-offset 0` still writes 0..K-1 (no label map: the OD API refuses an id 0 that is
    not the background)."""
    from shardfeed.format import label_map

    out = tmp_path / "out"
    done = shardfeed_cli("convert", str(yolo), str(out))
    assert done.returncode == 0, done.stderr
    assert "class ids 1..2 (0: background) with label_map.pbtxt" in done.stdout
    assert (out / "labels.txt").read_text() == "1:person\n2:car\n"
    text = (out / "label_map.pbtxt").read_text()
    assert text == 'item {\n  name: "person"\n  id: 1\n}\nitem {\n  name: "car"\n  id: 2\n}\n'
    assert label_map.parse(text, "label_map.pbtxt") == {1: "person", 2: "car"}
    assert manifest.read(str(out)).label_offset == 1
    records = _decoded(out, "train") | _decoded(out, "val")
    # chelsea: red person, blue car, the polygon a person; coffee: a blue car; rocket: no label file
    classes = {name: r["groundtruth_classes"].tolist() for name, r in records.items()}
    assert classes == {
        "images/train/chelsea.png": [1, 2, 1],
        "images/val/coffee.jpg": [2],
        "images/train/rocket.jpg": [],
    }
    for box, colour in zip(records["images/train/chelsea.png"]["groundtruth_boxes"][:2], (RED, BLUE), strict=True):
        frames(records["images/train/chelsea.png"]["image"], box, colour, tolerance=0)

    zero = tmp_path / "zero"
    done = shardfeed_cli("convert", str(yolo), str(zero), "--label-offset", "0")
    assert done.returncode == 0, done.stderr
    assert "never learn the first class; no label_map.pbtxt written" in done.stdout
    assert not (zero / "label_map.pbtxt").exists() and (zero / "labels.txt").read_text() == "0:person\n1:car\n"
    assert _decoded(zero, "train")["images/train/chelsea.png"]["groundtruth_classes"].tolist() == [0, 1, 0]

    def labels(folder: Path) -> list[list[int]]:
        batches = load(str(folder), split="train", batch_size=2, image_size=(150, 200), training=False)
        return [row[row >= 0].tolist() for _, targets in batches for row in targets["labels"].numpy()]

    assert labels(out) == labels(zero) and sorted(map(sorted, labels(out))) == [[], [0, 0, 1]]


def test_labelimg_xmls_saved_beside_their_images_convert_as_voc(voc: Path, tmp_path: Path) -> None:
    """LabelImg's default: each XML saved beside its image (its <filename> the image's name in
    that folder). Read as VOC, with the boxes of the Annotations/ + JPEGImages/ layout; first-level
    folders named for splits are the splits; an image with no XML is reported, not dropped
    unsaid (in VOC's layout too)."""
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in ("chelsea", "coffee", "rocket"):
        image = next((voc / "JPEGImages").glob(f"{name}.*"))
        shutil.copy(image, flat / image.name)
        shutil.copy(voc / "Annotations" / f"{name}.xml", flat / f"{name}.xml")
    shutil.copy(flat / "rocket.jpg", flat / "unlabelled.jpg")
    assert isinstance(resolve_source(str(flat)), VocSource)
    m, r = _converted_beside(flat, voc, tmp_path)
    assert m.header.task == "detection" and m.labels == r.labels == ["car", "horse", "person"]
    ours = decoded_all(tmp_path / "out", m)
    theirs = decoded_all(tmp_path / "reference", r)
    assert sorted(ours) == ["chelsea.png", "coffee.jpg", "rocket.jpg"]
    for name, record in ours.items():
        reference = theirs[f"JPEGImages/{name}"]
        assert record["groundtruth_classes"].tolist() == reference["groundtruth_classes"].tolist(), name
        assert np.array_equal(record["groundtruth_boxes"], reference["groundtruth_boxes"]), name
    skipped = {s["file"]: s["reason"] for s in json.loads((tmp_path / "out" / "report.json").read_text())["skipped"]}
    assert skipped["unlabelled.jpg"] == "no annotation file (unlabelled.xml does not exist): not converted"
    assert skipped["chelsea.xml: object 2"] == "<bndbox> does not hold four numbers xmin, ymin, xmax, ymax"
    assert len(skipped) == 2

    split = tmp_path / "split"
    for folder, names in (("train", ("chelsea", "rocket")), ("val", ("coffee",))):
        (split / folder).mkdir(parents=True)
        for name in names:
            for file in flat.glob(f"{name}.*"):
                shutil.copy(file, split / folder / file.name)
    out = tmp_path / "split_out"
    convert(str(split), str(out), progress=False)
    m = manifest.read(str(out))
    assert m.split_names == ["train", "val"] and m.split("train").num_records == 2 and m.split("val").num_records == 1


def decoded_all(out: Path, m: manifest.Manifest) -> dict[str, dict[str, np.ndarray]]:
    """Every record of every split of `out`, decoded by Model Garden's decoder, by key."""
    return {key: record for split in m.split_names for key, record in _decoded(out, split).items()}


def test_the_layout_with_the_most_evidence_wins_and_dry_run_says_what_it_saw(voc: Path, tmp_path: Path) -> None:
    """A VOC root that also holds images/ + masks/ beside its Annotations/ (VOC2012 ships its
    segmentation masks beside the XMLs): the first layout tested (segmentation) took it. Now each
    layout's evidence is counted: VOC's four (Annotations/, JPEGImages/, ImageSets/Main/,
    classes.txt) beat segmentation's three, and `--dry-run` names them."""
    from shardfeed.write.sources.layouts import candidates, recognise

    root = tmp_path / "voc"
    shutil.copytree(voc, root)
    for name in ("broken", "entities", "outside", "gone"):
        (root / "Annotations" / f"{name}.xml").unlink()
    (root / "ImageSets" / "Main" / "train.txt").write_text("chelsea\ncoffee\nrocket\n")
    (root / "classes.txt").write_text("person\ncar\nhorse\n")
    (root / "images").mkdir()
    (root / "masks").mkdir()
    Image.fromarray(pasted("rocket")).save(root / "images" / "rocket.png")
    Image.fromarray(np.zeros((427, 640), np.uint8)).save(root / "masks" / "rocket.png")
    assert [c.layout for c in candidates(str(root))] == ["voc", "masks"]
    assert recognise(str(root)).evidence == ("Annotations/", "JPEGImages/", "ImageSets/Main/", "classes.txt")
    assert isinstance(resolve_source(str(root)), VocSource)
    done = shardfeed_cli("convert", str(root), str(tmp_path / "out"), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (
        "layout: voc (detection), seen: Annotations/, JPEGImages/, ImageSets/Main/, classes.txt"
    )
