"""train, evaluate, predict and report on a segmentation folder: photos with coloured shapes
pasted at random places and their masks of class ids. The U-Net learns them; evaluate's IoU is
Keras' MeanIoU on the same predictions; predict's masks lie on the files' own pixels."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import zygote
from PIL import Image

from bench.corpus import TAGS, build_segmentation_corpus
from shardfeed import ConvertOptions, OptionError, convert
from shardfeed.training import evaluate, load_model, predict, train
from shardfeed.training.models import predicted
from shardfeed.training.options import TrainOptions
from shardfeed.training.run_folder import RunFolder

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`

OPTIONS = TrainOptions(epochs=6, batch_size=16, augment="none", crop_fraction=1.0)  # the image size: the data's
NAMES = ["background", *TAGS]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(build_segmentation_corpus(str(tmp_path_factory.mktemp("seg") / "source"), 200, size=64))


@pytest.fixture(scope="module")
def shards(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("seg_shards") / "shards"
    convert(str(source), str(out), ConvertOptions(split="train=0.75,validation=0.25"), progress=False)
    return out


@pytest.fixture(scope="module")
def run_dir(shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("seg_run") / "run"
    train(str(shards), str(out), OPTIONS, verbose=0)
    return out


def test_the_unet_learns_the_masks(run_dir: Path) -> None:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    record = json.loads((run_dir / "run.json").read_text())
    assert record["task"] == "segmentation" and record["model"] == "small_unet"
    assert record["image_size"] == [64, 64]  # no size asked for: the masks' own, not 224
    assert record["class_names"] == NAMES
    assert metrics["val_mean_iou"] > 0.5, metrics
    net = load_model(str(run_dir / "model.keras"))
    assert net.output_shape == (None, 64, 64, 5)


def test_evaluate_is_kerass_mean_iou_on_the_same_predictions(run_dir: Path) -> None:
    import keras

    result = evaluate(str(run_dir))
    record = RunFolder(str(run_dir)).read_record()
    net = load_model(str(run_dir / "model.keras"))
    theirs = keras.metrics.MeanIoU(5, sparse_y_pred=False, ignore_class=255)
    hits, union = np.zeros(5), np.zeros(5)
    for images, masks in record.inputs().evaluation("validation"):
        scores, truth = predicted(net, images), masks.numpy()
        theirs.update_state(truth, scores)
        guessed, counted = scores.argmax(-1), truth != 255
        for k in range(5):
            hits[k] += ((guessed == k) & (truth == k) & counted).sum()
            union[k] += (((guessed == k) | (truth == k)) & counted).sum()
    assert result["examples"] == 50
    assert result["mean_iou"] == pytest.approx(float(theirs.result()), abs=1e-6)
    for k, name in enumerate(NAMES):
        assert result["per_class_iou"][name] == pytest.approx(hits[k] / union[k], abs=1e-9)
    assert result["mean_iou"] > 0.5 and (Path(result["output_dir"]) / "masks.png").stat().st_size > 0


def test_predicted_masks_lie_on_the_files_pixels(run_dir: Path, source: Path, tmp_path: Path) -> None:
    """A wide image (two of the corpus side by side) is letterboxed into the model and its mask
    cut back out at the file's size: it matches the true masks, also side by side."""
    folder = tmp_path / "images"
    folder.mkdir()
    truths = {}
    for i in range(4):
        left, right = (np.asarray(Image.open(source / "images" / f"{i * 2 + k:05d}.png")) for k in (0, 1))
        Image.fromarray(np.concatenate([left, right], axis=1)).save(folder / f"wide{i}.png")
        truths[f"wide{i}.png"] = np.concatenate(
            [np.asarray(Image.open(source / "masks" / f"{i * 2 + k:05d}.png")) for k in (0, 1)], axis=1
        )
    rows = predict(str(run_dir), str(folder), str(tmp_path / "p.csv"), grid=str(tmp_path / "grid.png"))
    with open(tmp_path / "p.csv") as f:
        assert next(csv.reader(f)) == ["file", "mask", "classes", "error"]
    assert [r["file"] for r in rows] == sorted(truths) and (tmp_path / "grid.png").exists()
    for row in rows:
        mask = np.asarray(Image.open(tmp_path / "p_masks" / row["mask"]))
        truth = truths[row["file"]]
        assert mask.shape == truth.shape == (64, 128)
        shapes = truth > 0  # most pixels are background: the shapes' own pixels say where the mask lies
        # (a mask not cut back out of the letterbox gets 0.45 of them; the shapes, shrunk to half
        # their trained size by the letterbox, are found, and over-painted: precision ~0.5)
        assert (mask == truth).mean() > 0.85 and (mask[shapes] == truth[shapes]).mean() > 0.75, row
        assert set(filter(None, row["classes"].split(";"))) <= set(TAGS)


def test_the_cli_prints_mean_iou_and_the_report_renders(run_dir: Path) -> None:
    done = zygote.run(
        [sys.executable, "-m", "shardfeed", "evaluate", str(run_dir)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mean IoU 0." in done.stdout and "pixel accuracy" in done.stdout and "blue disc" in done.stdout
    report = zygote.run(
        [sys.executable, "-m", "shardfeed", "report", str(run_dir)], capture_output=True, text=True, timeout=300
    )
    assert report.returncode == 0, report.stderr[-2000:]
    page = (run_dir / "report.html").read_text()
    assert "mean IoU" in page and "mean_iou" in page


def test_what_segmentation_cannot_train_with_is_refused(shards: Path, tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="segmentation masks are learned by small_unet, not 'retinanet'"):
        train(str(shards), str(tmp_path / "a"), TrainOptions(model="retinanet"))
    backbone = TrainOptions(model="resnet50", weights="none", image_size=48, epochs=1, batch_size=16)
    with pytest.raises(
        OptionError, match=r"resnet50 as an encoder takes sides that are multiples of 32, got \(48, 48\)"
    ):
        train(str(shards), str(tmp_path / "c"), backbone, verbose=0)
    with pytest.raises(OptionError, match="small_unet takes sides that are multiples of 8"):
        train(str(shards), str(tmp_path / "b"), TrainOptions(image_size=60, epochs=1, batch_size=16), verbose=0)


def test_the_flattened_pixel_loss_is_keras_own_and_the_mean_over_pixels_not_ignored() -> None:
    """What a segmentation run on the torch backend is compiled with (Keras' own loss fails in
    PyTorch's backward pass there): the same value as Keras' loss and as the cross-entropy
    worked out in NumPy over the pixels not marked 255."""
    import keras

    from shardfeed.training.models import pixel_crossentropy

    rng = np.random.default_rng(0)
    truth = rng.integers(0, 4, (3, 8, 8))
    truth[0, :3] = 255
    scores = rng.random((3, 8, 8, 4)).astype("float32")
    scores /= scores.sum(-1, keepdims=True)
    ours = float(pixel_crossentropy()(ignore_class=255)(truth, scores))
    keras_own = float(keras.losses.SparseCategoricalCrossentropy(ignore_class=255)(truth, scores))
    kept = truth.reshape(-1) != 255
    by_hand = float(np.mean(-np.log(scores.reshape(-1, 4)[kept, truth.reshape(-1)[kept]])))
    assert ours == pytest.approx(keras_own, rel=1e-6) and ours == pytest.approx(by_hand, rel=1e-5)


@pytest.fixture(scope="module")
def few(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conftest import few_converted

    return few_converted(tmp_path_factory, build_segmentation_corpus)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_train_and_evaluate_on_the_backend(backend: str, few: Path, tmp_path: Path) -> None:
    from test_train_multi_label import trained_on

    trained_on(backend, few, tmp_path / "run", "mean IoU 0.")


def test_the_input_size_left_to_the_data_is_the_masks_own_up_to_224(shards: Path, tmp_path: Path) -> None:
    """Segmentation trains at its images' median shorter side rounded up to a multiple of 8
    (the U-Net's), never upsampled past it; classes keep 224."""
    from shardfeed.training.model_choice import choose_image_size

    assert choose_image_size(str(shards), "train").side == 64
    odd = Path(build_segmentation_corpus(str(tmp_path / "odd"), 12, size=100))
    big = Path(build_segmentation_corpus(str(tmp_path / "big"), 12, size=300))
    for source, side in ((odd, 104), (big, 224)):
        convert(str(source), str(tmp_path / f"{side}"), ConvertOptions(split="train=1"), progress=False)
        assert choose_image_size(str(tmp_path / f"{side}"), "train").side == side
    classes = tmp_path / "classes" / "a"
    classes.mkdir(parents=True)
    Image.open(next((odd / "images").iterdir())).save(classes / "one.png")
    convert(str(tmp_path / "classes"), str(tmp_path / "classes_out"), ConvertOptions(split="train=1"), progress=False)
    assert choose_image_size(str(tmp_path / "classes_out"), "train").side == 224


def test_a_resumed_run_keeps_the_size_it_was_trained_at(run_dir: Path, shards: Path, tmp_path: Path) -> None:
    """With no size asked for, a resumed run takes its own recorded size, not the one the data
    would get today (a run made before the data-sized default trained masks at 224)."""
    import shutil

    from shardfeed.training.trainer import _TrainingRun

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    record = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps(dict(record, image_size=[72, 72])))
    assert _TrainingRun(str(shards), RunFolder(str(copy)), OPTIONS, resume=True).options.image_size == 72
    assert _TrainingRun(str(shards), RunFolder(str(tmp_path / "new")), OPTIONS, resume=False).options.image_size == 64
