"""train, evaluate and predict on a detection folder: photo crops with 1-3 solid shapes pasted at
known, never overlapping places (COCO JSON, converted). The defaults pick KerasHub's RetinaNet at
the images' own size with flips; its loss falls; evaluate's COCO figures are pycocotools' on the
same detections, set up by hand here; predict's boxes lie on the files' pixels; what the
detector cannot train with is refused."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import zygote

from bench.corpus import TAGS, build_shapes_coco_corpus
from shardfeed import ConvertOptions, OptionError, convert
from shardfeed.read.options import ReadOptions
from shardfeed.training import evaluate, load_model, predict, train
from shardfeed.training.options import TrainOptions
from shardfeed.training.run_folder import RunFolder

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`

keras_hub = pytest.importorskip("keras_hub", reason="the detection extra (make install puts it in .venv)")

EPOCHS = 6
OPTIONS = TrainOptions(epochs=EPOCHS, batch_size=16)  # model, size and augmentation: the data's


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(build_shapes_coco_corpus(str(tmp_path_factory.mktemp("det") / "source"), 160, size=64)).parent


@pytest.fixture(scope="module")
def shards(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("det_shards") / "shards"
    convert(str(source / "instances.json"), str(out), ConvertOptions(split="train=0.8,validation=0.2"), progress=False)
    return out


@pytest.fixture(scope="module")
def run_dir(shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("det_run") / "run"
    train(str(shards), str(out), OPTIONS, verbose=0)
    return out


def test_the_defaults_train_the_detector_and_its_loss_falls(run_dir: Path) -> None:
    record = json.loads((run_dir / "run.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert record["task"] == "detection" and record["model"] == "retinanet"
    assert record["image_size"] == [64, 64] and record["augment"] == "flip"  # the images' own size, flips
    assert record["class_names"] == list(TAGS)
    with open(run_dir / "log.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == EPOCHS
    first, last = float(rows[0]["val_loss"]), float(rows[-1]["val_loss"])
    assert last < first / 2, (first, last)  # focal + smooth L1 from random weights: ~6 after one epoch
    assert set(metrics["val_per_class_ap"]) == set(TAGS) and metrics["val_examples"] == 32
    assert 0.0 <= metrics["val_mAP@0.5"] <= 1.0 and metrics["val_objects"] > 32
    net = load_model(str(run_dir / "model.keras"))
    assert isinstance(net, keras_hub.models.RetinaNetObjectDetector)


def test_a_loaded_checkpoint_keeps_its_optimizer(run_dir: Path) -> None:
    """Adam's state and the schedule's step load with the model (KerasHub's class would compile
    a fresh Adam and Keras would skip the saved one: a resumed run would restart its schedule)."""
    import warnings

    metrics = json.loads((run_dir / "metrics.json").read_text())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = load_model(str(run_dir / "checkpoints" / "last.keras"))
    assert not [w for w in caught if "Skipping variable loading" in str(w.message)], [str(w.message) for w in caught]
    assert int(net.optimizer.iterations.numpy()) == EPOCHS * metrics["steps_per_epoch"]
    assert len(net.optimizer.variables) > 100  # the moments of every weight, loaded


def test_evaluate_is_pycocotools_on_the_same_detections(run_dir: Path) -> None:
    """The ground truth and the detections written as COCO documents here, scored by COCOeval:
    evaluate's figures are its stats, and train's closing validation figures are evaluate's."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    result = evaluate(str(run_dir))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    net = load_model(str(run_dir / "model.keras"))
    shown = net.prediction_decoder
    assert shown.confidence_threshold == 0.5  # KerasHub's default, what predict shows
    # COCO's protocol (Detectron2, Model Garden, torchvision): detections down to 0.05, 100 at most
    net.prediction_decoder = keras_hub.layers.NonMaxSuppression(
        bounding_box_format="xyxy", from_logits=True, confidence_threshold=0.05, max_detections=100
    )
    images, annotations, detections = [], [], []
    for x, y in RunFolder(str(run_dir)).read_record().inputs().evaluation("validation"):
        out = net.decode_predictions(net(x, training=False), x)
        for i in range(len(x)):
            image_id = len(images) + 1
            images.append({"id": image_id, "width": 64, "height": 64})
            for box, label in zip(y["boxes"][i].numpy(), y["labels"][i].numpy(), strict=True):
                if label >= 0:
                    x0, y0, x1, y1 = (float(v) for v in box)
                    annotations.append(
                        {
                            "id": len(annotations) + 1,
                            "image_id": image_id,
                            "category_id": int(label) + 1,
                            "bbox": [x0, y0, x1 - x0, y1 - y0],
                            "area": (x1 - x0) * (y1 - y0),
                            "iscrowd": 0,
                        }
                    )
            for k in range(int(out["num_detections"][i])):
                x0, y0, x1, y1 = (float(v) for v in np.asarray(out["boxes"][i][k]))
                detections.append(
                    {
                        "image_id": image_id,
                        "category_id": int(out["labels"][i][k]) + 1,
                        "bbox": [x0, y0, x1 - x0, y1 - y0],
                        "score": float(out["confidence"][i][k]),
                    }
                )
    truth = COCO()
    truth.dataset = {
        "images": images,
        "annotations": annotations,
        "categories": [{"id": k + 1, "name": n} for k, n in enumerate(TAGS)],
    }
    truth.createIndex()
    scoring = COCOeval(truth, truth.loadRes(detections) if detections else COCO(), "bbox")
    scoring.evaluate()
    scoring.accumulate()
    scoring.summarize()
    assert result["examples"] == len(images) == 32
    assert result["mAP"] == pytest.approx(max(scoring.stats[0], 0.0), abs=1e-9)
    assert result["mAP@0.5"] == pytest.approx(max(scoring.stats[1], 0.0), abs=1e-9)
    assert result["mAP@0.5"] == pytest.approx(metrics["val_mAP@0.5"], abs=1e-9)
    assert sum(d["score"] < 0.5 for d in detections) > 0  # the low-confidence ones count


def test_scoring_keeps_what_predict_shows_and_more(run_dir: Path) -> None:
    """Detections down to 0.05 (evaluate's) hold exactly the boxes at 0.5 (predict's) among those
    of 0.5 or more: NMS is greedy by confidence. The model keeps its own decoder afterwards."""
    from shardfeed.training.detector import detections, scoring_detections

    net = load_model(str(run_dir / "model.keras"))
    for x, _ in RunFolder(str(run_dir)).read_record().inputs().evaluation("validation"):
        shown = detections(net, x)
        with scoring_detections(net):
            scored = detections(net, x)
        for few, many in zip(shown, scored, strict=True):
            confident = many.scores >= 0.5
            np.testing.assert_allclose(many.boxes[confident], few.boxes, atol=1e-4)
            np.testing.assert_array_equal(many.classes[confident], few.classes)
            assert len(many.boxes) >= len(few.boxes)
    assert net.prediction_decoder.confidence_threshold == 0.5


def test_the_cli_prints_coco_map_and_the_report_renders(run_dir: Path) -> None:
    done = zygote.run(
        [sys.executable, "-m", "shardfeed", "evaluate", str(run_dir)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mAP@0.5 " in done.stdout and "by object size" in done.stdout and "yellow triangle" in done.stdout
    report = zygote.run(
        [sys.executable, "-m", "shardfeed", "report", str(run_dir)], capture_output=True, text=True, timeout=300
    )
    assert report.returncode == 0, report.stderr[-2000:]
    page = (run_dir / "report.html").read_text()
    assert "cls_logits_loss" in page and "Worst detected (validation)" in page
    worst = page[page.index("Worst detected (validation)") :]
    true_tiles = re.findall(r"<figcaption>([^<]*) true: ([^<]*)</figcaption>", worst)
    errors = [(int(m), int(f)) for m, f in re.findall(r"found: (\d+) missed, (\d+) false", worst)]
    assert 0 < len(true_tiles) == len(errors) <= 16  # each image twice: true boxes, then detected ones
    assert all(m + f > 0 for m, f in errors) and [m + f for m, f in errors] == sorted(
        (m + f for m, f in errors), reverse=True
    )
    assert all(caption != "(no objects)" for _, caption in true_tiles)  # every image of the corpus has shapes


def test_predicted_boxes_lie_on_the_files_pixels(run_dir: Path, source: Path, tmp_path: Path) -> None:
    """Wide files (two corpus images side by side, 64 x 128) are read whole at the model's 64 x 64,
    as it trained: each box in the CSV is the model's own detection on that input (decoded here
    with KerasHub's API) scaled back by the file's 2 across and 1 down; COCO's results document
    holds the same boxes as [x, y, width, height]."""
    from PIL import Image

    from shardfeed import load
    from shardfeed.write.sources import UnlabeledSource

    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(3):
        halves = [np.asarray(Image.open(source / "images" / f"{i * 2 + k:05d}.png")) for k in (0, 1)]
        Image.fromarray(np.concatenate(halves, axis=1)).save(folder / f"wide{i}.png")
    rows = predict(str(run_dir), str(folder), str(tmp_path / "p.csv"), grid=str(tmp_path / "grid.png"))
    assert (tmp_path / "grid.png").stat().st_size > 0 and {r["file"] for r in rows} == {
        f"wide{i}.png" for i in range(3)
    }
    net = load_model(str(run_dir / "model.keras"))
    convert(UnlabeledSource(str(folder)), str(tmp_path / "shards"), progress=False)
    expected = []
    read = ReadOptions(with_filenames=True)
    for images, files in load(str(tmp_path / "shards"), split="test", batch_size=4, image_size=64, read=read):
        out = net.decode_predictions(net(images, training=False), images)
        for i, file in enumerate(files.numpy()):
            for k in range(int(out["num_detections"][i])):
                x0, y0, x1, y1 = np.asarray(out["boxes"][i][k], np.float64)
                box = np.clip([x0 * 2, y0, x1 * 2, y1], 0, [128, 64, 128, 64])
                expected.append((file.decode(), TAGS[int(out["labels"][i][k])], float(out["confidence"][i][k]), *box))
    found = [
        (r["file"], r["class"], r["score"], r["xmin"], r["ymin"], r["xmax"], r["ymax"]) for r in rows if "class" in r
    ]
    assert expected, "the model found nothing: the test would check nothing"
    assert [f[:2] for f in sorted(found)] == [e[:2] for e in sorted(expected)]
    assert np.array([f[2:] for f in sorted(found)]) == pytest.approx(
        np.array([e[2:] for e in sorted(expected)]), abs=1e-3
    )
    coco = json.loads((tmp_path / "p_coco.json").read_text())
    assert len(coco) == len(found)
    by_file = {f"wide{i}.png": i + 1 for i in range(3)}
    theirs = sorted((d["image_id"], *d["bbox"]) for d in coco)
    ours = sorted((by_file[f], x0, y0, x1 - x0, y1 - y0) for f, _, _, x0, y0, x1, y1 in found)
    assert np.array(theirs) == pytest.approx(np.array(ours), abs=1e-6)
    with open(tmp_path / "p.csv") as f:
        assert next(csv.reader(f)) == ["file", "class", "score", "xmin", "ymin", "xmax", "ymax", "error"]


def test_a_killed_run_resumes_at_its_step_with_its_optimizer(shards: Path, tmp_path: Path) -> None:
    """train(save_every=...) on boxes: mid-epoch snapshots hold the detector's weights and
    Adam's state; a run stopped after step 3 (as a kill leaves it, the resume point rewritten
    here) trains steps 4.. of that epoch only, from the snapshot's optimizer (its step count
    continues). The exactness of the batches after a SIGKILL is test_resume's, for any model."""
    from shardfeed.training import read_resume_point

    out = tmp_path / "m"
    options = TrainOptions(epochs=1, batch_size=16, shuffle="global", save_every=3, validation_split=None)
    train(str(shards), str(out), options, verbose=0)
    snapshots = out / "checkpoints"
    point = read_resume_point(str(snapshots))
    assert point is not None and (point.epoch, point.step) == (1, 0) and point.optimizer_variables > 100
    (snapshots / "resume.json").write_text(json.dumps({**point.__dict__, "epoch": 0, "step": 3}))
    metrics = train(str(shards), str(out), options, resume=True, verbose=0)
    assert (metrics["initial_epoch"], metrics["initial_step"]) == (0, 3)
    after = read_resume_point(str(snapshots))
    assert after is not None and (after.epoch, after.step, after.seed) == (1, 0, point.seed)
    net = load_model(str(out / "model.keras"))
    steps = metrics["steps_per_epoch"]  # 128 images, batch 16: 8
    assert int(net.optimizer.iterations.numpy()) == steps + (steps - 3)  # the snapshot's 8, then 5 more


FINGERPRINTED_DETECTOR = """
import os, signal, sys
import numpy as np, shardfeed, shardfeed.training
from shardfeed.training.detector import build_detector, compile_args, detector_class
data, run_dir, log, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
kill_at = int(os.environ.get("KILL_AT", "-1"))

class Fingerprinted(detector_class()):  # not registered with Keras: resume must not need it
    # logs each batch it trains on (file names, pixel sum, the boxes and labels as augmented);
    # SIGKILLs its own process at step KILL_AT
    steps = 0
    def train_step(self, data):
        x, y, files = data
        if Fingerprinted.steps == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        Fingerprinted.steps += 1
        labels = y["labels"].numpy()
        boxes = np.round(y["boxes"].numpy()[labels >= 0], 3).tolist()
        with open(log, "a") as f:
            f.write(",".join(v.decode() for v in files.numpy()) + f" {int(np.sum(x.numpy(), dtype=np.int64))}"
                    + f" {labels[labels >= 0].tolist()} {boxes}\\n")
        return super().train_step((x, y))

def build():
    model = Fingerprinted.from_config(build_detector(names, (64, 64)).get_config())
    model.compile(optimizer="adam", run_eagerly=True, **compile_args())
    return model

shardfeed.training.fit_resumable(build, data, run_dir, epochs=2, batch_size=16, seed=7, save_every=3, image_size=64,
                                 augment=True, read=shardfeed.ReadOptions(with_filenames=True), verbose=0)
"""


def test_a_detection_run_killed_mid_epoch_trains_on_the_uninterrupted_runs_batches(
    shards: Path, tmp_path: Path
) -> None:
    """The package's detector, fit the way `train --save-every` fits it (`fit_resumable`, with
    crops and flips that move the boxes), SIGKILLed at step 5 of 16 and restarted: it trains on
    exactly the batches of an uninterrupted run — the same records, pixels, boxes and labels.
    (Batches of 16: its steps run eagerly, to log what they train on, and cost by the step.)"""

    def batches(run_dir: Path, kill_at: int | None) -> list[str]:
        log = tmp_path / "log"
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **({"KILL_AT": str(kill_at)} if kill_at is not None else {}))
        argv = [str(shards), str(run_dir), str(log), ",".join(TAGS)]
        done = zygote.run(
            [sys.executable, "-c", FINGERPRINTED_DETECTOR, *argv], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == (-signal.SIGKILL if kill_at is not None else 0), done.stderr[-3000:]
        lines = log.read_text().splitlines()
        log.unlink()
        return lines

    from shardfeed.training import read_resume_point

    reference = batches(tmp_path / "reference", None)
    assert len(reference) == 2 * 8  # 128 training images, batches of 16, two epochs
    first_epoch = [name for line in reference[:8] for name in line.split()[0].split(",")]
    assert len(set(first_epoch)) == 128  # every record once in the first epoch
    first = batches(tmp_path / "killed", 5)
    assert len(first) == 5
    point = read_resume_point(str(tmp_path / "killed"))
    assert point is not None and (point.epoch, point.step) == (0, 3)  # the snapshot after step 3
    second = batches(tmp_path / "killed", None)
    assert first[:3] + second == reference


def test_every_training_batch_is_padded_to_the_most_objects_in_one_image(source: Path, shards: Path) -> None:
    """The manifest keeps the most objects one image of each split holds (here against the
    COCO file's own annotations per image); `train` pads every batch's boxes to the most of its
    splits, so the step has one shape (XLA, JAX and PyTorch compile it once, not per count)."""
    from collections import Counter

    from shardfeed import load
    from shardfeed.format import manifest
    from shardfeed.format.schema import DETECTION
    from shardfeed.read.options import DecodeOptions
    from shardfeed.training.tasks import objective_for

    coco = json.loads((source / "instances.json").read_text())
    per_image = Counter(a["image_id"] for a in coco["annotations"])
    facts = manifest.read(str(shards))
    most = {name: facts.split(name).objects.most for name in ("train", "validation")}  # type: ignore[union-attr]
    assert max(most.values()) == max(per_image.values()) and min(most.values()) >= 1
    decode = objective_for(DETECTION, str(shards)).decode(DecodeOptions(), facts, ["train", "validation"])
    assert decode.max_objects == max(most.values())
    shapes = {tuple(targets["boxes"].shape[1:]) for _, targets in load(str(shards), batch_size=16, decode=decode)}
    assert shapes == {(decode.max_objects, 4)}
    # a mixture of folders, or a folder written before the count was kept: each batch its own most
    assert objective_for(DETECTION, str(shards)).decode(DecodeOptions(), None, ["train"]).max_objects is None


def test_what_the_detector_cannot_train_with_is_refused(shards: Path, tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="detection boxes are learned by retinanet, not 'small_unet'"):
        train(str(shards), str(tmp_path / "a"), TrainOptions(model="small_unet"))
    backbone = TrainOptions(model="resnet50", weights="none", image_size=48, epochs=1, batch_size=16)
    with pytest.raises(
        OptionError, match=r"resnet50 as an encoder takes sides that are multiples of 32, got \(48, 48\)"
    ):
        train(str(shards), str(tmp_path / "e"), backbone, verbose=0)
    with pytest.raises(OptionError, match="retinanet takes sides that are multiples of 32"):
        train(str(shards), str(tmp_path / "b"), TrainOptions(image_size=48, epochs=1, batch_size=16), verbose=0)
    with pytest.raises(OptionError, match="retinanet trains from random weights here"):
        train(str(shards), str(tmp_path / "c"), TrainOptions(weights="imagenet", epochs=1, batch_size=16), verbose=0)
    # at 32 px the shapes are 4-11 px across, below the 16 px of the smallest anchors: KerasHub's
    # losses would be 0 from the first step (no anchor is a positive) and nothing learned
    with pytest.raises(OptionError, match=r"at 32 x 32 px no anchor of retinanet overlaps any of the \d+ objects"):
        train(str(shards), str(tmp_path / "d"), TrainOptions(image_size=32, epochs=1, batch_size=16), verbose=0)


def test_which_objects_the_anchors_reach() -> None:
    """In a 64 x 64 image the smallest anchors (KerasHub's, level 3: stride 8) are squares of
    16, 20 and 24 px (and their 1:2, 2:1 ratios) centred at every multiple of 8: 16 px squares
    centred on one ((8, 8), (40, 40)) are reached (IoU 1); a 4 px square is not (IoU at most
    16/256); nor a 16 px square shifted half the stride off (centre (12, 12)), whose best
    overlap is 4/9 (inside the 24 px anchor centred at (16, 16)); padding (-1) is no object."""
    from shardfeed.training.detector import anchor_reach

    boxes = np.array([[[0, 0, 16, 16], [10, 10, 14, 14], [0, 0, 0, 0]], [[32, 32, 48, 48], [0, 0, 0, 0], [0, 0, 0, 0]]])
    labels = np.array([[0, 1, -1], [2, -1, -1]])
    images = np.zeros((2, 64, 64, 3), np.uint8)
    objects, missed, side = anchor_reach([(images, {"boxes": boxes, "labels": labels})], (64, 64))
    assert (objects, missed, side) == (3, 1, 4.0)
    shifted = np.array([[[4, 4, 20, 20]]])
    assert anchor_reach([(images[:1], {"boxes": shifted, "labels": np.array([[0]])})], (64, 64)) == (1, 1, 16.0)


def test_defaults_left_to_boxes(shards: Path) -> None:
    """No epochs or batch size asked for: a detector's 60 and 16 (a classifier's 10 and 64); the
    size is the images' own, rounded up to a multiple of 32."""
    from shardfeed.format import manifest
    from shardfeed.training.model_choice import resolved

    chosen = resolved(TrainOptions(), manifest.read(str(shards)))
    assert (chosen.epochs, chosen.batch_size, chosen.image_size, chosen.augment) == (60, 16, 64, "flip")


@pytest.fixture(scope="module")
def few(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conftest import few_converted

    return few_converted(tmp_path_factory, build_shapes_coco_corpus)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_train_and_evaluate_on_the_backend(backend: str, few: Path, tmp_path: Path) -> None:
    from test_train_multi_label import trained_on

    trained_on(backend, few, tmp_path / "run", "mAP ", image_size=64)
