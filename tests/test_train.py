"""train, evaluate and predict on real handwritten digits."""

from __future__ import annotations

import csv
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from shardfeed import ConvertOptions, DecodeOptions, convert, load, read_manifest
from shardfeed.cli.main import main
from shardfeed.training import build_model, evaluate, load_model, predict, read_resume_point, train
from shardfeed.training.models import model_class_names
from shardfeed.training.options import TrainOptions
from shardfeed.training.samples import write_digits_folders

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`


@pytest.fixture(scope="module")
def digits_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("digits_run")
    labeled, unlabeled = write_digits_folders(str(root / "images"), size=24, holdout=30)
    convert(labeled, str(root / "shards"), ConvertOptions(shards=2), workers=1, progress=False)
    return root / "shards", Path(unlabeled)


@pytest.fixture(scope="module")
def run_dir(digits_data: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "run"
    train(
        str(digits_data[0]),
        str(out),
        TrainOptions(epochs=3, batch_size=64, image_size=24, augment="none", crop_fraction=1.0),
        verbose=0,
    )
    return out


def test_training_learns_and_writes_the_run_folder(run_dir: Path) -> None:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["val_accuracy"] > 0.5  # chance is 0.1
    assert metrics["epochs"] == 3 and metrics["steps_per_epoch"] == 23  # every image: the last batch partial
    assert metrics["augment"] == "none" and 0.5 < metrics["train_accuracy_inference"] <= 1.0
    for name in ("model.keras", "checkpoints/last.keras", "checkpoints/best.keras", "log.csv", "run.json"):
        assert (run_dir / name).exists(), name
    assert list((run_dir / "tensorboard").rglob("events.out.tfevents.*"))
    assert model_class_names(load_model(str(run_dir / "model.keras"))) == [str(i) for i in range(10)]
    assert len((run_dir / "log.csv").read_text().splitlines()) == 4
    assert "phase" not in metrics  # log.csv's column, not a metric (it showed as 'phase: 1.0000' beside them)


def test_the_model_is_the_last_epochs_and_the_best_epoch_is_named(run_dir: Path) -> None:
    """model.keras holds the last epoch's weights (not the epoch picked on validation, whose
    figure there would be optimistic); metrics.json names the best epoch as log.csv has it."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    rows = list(csv.DictReader((run_dir / "log.csv").open()))
    scores = [float(row["val_accuracy"]) for row in rows]
    best = max(range(len(scores)), key=lambda i: (scores[i], -i))  # the first of equals
    assert metrics["kept_weights"] == "last"
    assert metrics["best_epoch"] == best + 1 and metrics["best_epoch_val_accuracy"] == pytest.approx(scores[best])
    final, last = load_model(str(run_dir / "model.keras")), load_model(str(run_dir / "checkpoints/last.keras"))
    for a, b in zip(final.trainable_weights, last.trainable_weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_best_epoch_reads_the_log_by_mode(tmp_path: Path) -> None:
    from shardfeed.training.run_folder import RunFolder

    (tmp_path / "log.csv").write_text("epoch,loss,val_loss\n0,1.0,0.5\n1,0.8,0.3\n2,0.7,0.3\n3,0.6,0.4\n")
    folder = RunFolder(str(tmp_path))
    assert folder.best_epoch("val_loss", "min") == (2, 0.3)  # the first of two equal epochs, 1-based
    assert folder.best_epoch("val_loss", "max") == (1, 0.5)
    assert folder.best_epoch("val_accuracy", "max") is None  # never logged: no validation split
    assert RunFolder(str(tmp_path / "none")).best_epoch("val_loss", "min") is None


def test_resume_continues_from_the_saved_epoch(run_dir: Path, digits_data: tuple[Path, Path], tmp_path: Path) -> None:
    copy = shutil.copytree(run_dir, tmp_path / "run")
    metrics = train(
        str(digits_data[0]),
        str(copy),
        TrainOptions(epochs=4, batch_size=64, image_size=24, augment="none", crop_fraction=1.0),
        resume=True,
        verbose=0,
    )
    assert metrics["initial_epoch"] == 3
    epochs = [row["epoch"] for row in csv.DictReader((copy / "log.csv").open())]
    assert epochs == ["0", "1", "2", "3"]
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        train(str(digits_data[0]), str(tmp_path / "fresh"), TrainOptions(epochs=1), resume=True, verbose=0)


def test_evaluate_agrees_with_keras(run_dir: Path, digits_data: tuple[Path, Path]) -> None:
    result = evaluate(str(run_dir), str(digits_data[0]), split="validation", top_k=3)
    net = load_model(str(run_dir / "model.keras"))
    val = load(
        str(digits_data[0]), split="validation", batch_size=64, image_size=24, decode=DecodeOptions(crop_fraction=1.0)
    )
    loss, accuracy = net.evaluate(val, verbose=0)[:2]
    assert result["accuracy"] == pytest.approx(accuracy, abs=1e-6)
    assert result["loss"] == pytest.approx(loss, rel=1e-4)
    confusion = np.array(result["confusion_matrix"])
    expected = read_manifest(str(digits_data[0])).split("validation").num_records
    assert confusion.sum() == result["examples"] == expected and result["top3_accuracy"] >= result["accuracy"]
    assert set(result["per_class_accuracy"]) == {str(i) for i in range(10)}
    assert (run_dir / "eval-validation" / "confusion_matrix.png").stat().st_size > 5000


def test_predict_writes_one_row_per_input_file(run_dir: Path, digits_data: tuple[Path, Path], tmp_path: Path) -> None:
    folder = shutil.copytree(digits_data[1], tmp_path / "unlabeled")
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    from test_png_check import rows_missing

    # Pillow decodes this one (it pads the missing rows); TensorFlow does not: it ended predict
    # without a CSV. Now it gets its row with the reason, like any unusable file.
    (folder / "half.png").write_bytes(rows_missing(np.full((28, 28, 3), 200, np.uint8), 14))
    out = tmp_path / "pred.csv"
    assert main(["predict", str(run_dir), str(folder), "-o", str(out), "--grid", str(tmp_path / "g.png")]) == 0
    rows = list(csv.DictReader(out.open()))
    assert sorted(r["file"] for r in rows) == sorted(p.name for p in folder.iterdir())
    good = [r for r in rows if not r["error"]]
    assert len(good) == 30 and {r["class"] for r in good} <= {str(i) for i in range(10)}
    assert all(float(r["probability"]) >= float(r["probability_2"]) >= float(r["probability_3"]) for r in good)
    broken = next(r for r in rows if r["file"] == "broken.png")
    assert "PNG" in broken["error"] and broken["class"] == ""
    half = next(r for r in rows if r["file"] == "half.png")
    assert half["error"].startswith("truncated PNG: image data ends after 50% of the rows") and half["class"] == ""
    assert (tmp_path / "g.png").stat().st_size > 5000
    # labels the demo's held-out digits carry in their file names' order: most predictions are right
    from shardfeed.training.samples import digits_arrays

    truth = digits_arrays()[1]
    right = sum(int(r["class"]) == truth[int(r["file"].split(".")[0])] for r in good)
    assert right / len(good) > 0.5


def test_predict_on_unlabeled_shards_matches_folder(
    run_dir: Path, digits_data: tuple[Path, Path], tmp_path: Path
) -> None:
    from shardfeed import UnlabeledSource

    convert(
        UnlabeledSource(str(digits_data[1])), str(tmp_path / "u"), ConvertOptions(shards=3), workers=1, progress=False
    )
    from_shards = predict(str(run_dir), str(tmp_path / "u"), str(tmp_path / "a.csv"))
    from_folder = predict(str(run_dir), str(digits_data[1]), str(tmp_path / "b.csv"))
    assert [(r["file"], r["class"]) for r in from_shards] == [(r["file"], r["class"]) for r in from_folder]


@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet50"])
def test_application_models_build_and_run(name: str) -> None:
    net = build_model(name, ["a", "b", "c"], (32, 32))
    out = net(np.zeros((2, 32, 32, 3), np.uint8))
    assert out.shape == (2, 3) and np.allclose(np.asarray(out).sum(axis=1), 1.0, atol=1e-4)


def test_train_errors(digits_data: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"model must be one of \['auto', 'small_cnn', 'mobilenet_v2'"):
        train(str(digits_data[0]), str(tmp_path / "r"), TrainOptions(model="vgg"), verbose=0)
    with pytest.raises(ValueError, match="augment must be one of"):
        train(str(digits_data[0]), str(tmp_path / "r"), TrainOptions(augment="heavy"), verbose=0)
    with pytest.raises(FileNotFoundError, match="is not a shardfeed training run"):
        evaluate(str(tmp_path))


def test_local_weights_are_loaded(tmp_path: Path) -> None:
    import keras

    source = build_model("small_cnn", ["a", "b"], (24, 24))
    source.save_weights(str(tmp_path / "cnn.weights.h5"))
    copy = build_model("small_cnn", ["a", "b"], (24, 24), weights=str(tmp_path / "cnn.weights.h5"))
    x = np.random.default_rng(0).integers(0, 255, (2, 24, 24, 3)).astype(np.uint8)
    assert np.allclose(source(x, training=False), copy(x, training=False), atol=1e-6)
    backbone = keras.applications.MobileNetV2(include_top=False, weights=None, input_shape=(32, 32, 3), pooling="avg")
    backbone.save_weights(str(tmp_path / "mobilenet_notop.weights.h5"))
    net = build_model("mobilenet_v2", ["a", "b"], (32, 32), weights=str(tmp_path / "mobilenet_notop.weights.h5"))
    loaded = next(layer for layer in net.layers if isinstance(layer, keras.Model))
    assert all(np.array_equal(a, b) for a, b in zip(loaded.get_weights(), backbone.get_weights(), strict=True))


def test_cli_trains_with_global_shuffle(
    digits_data: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "g"
    args = ["train", str(digits_data[0]), "--out", str(out), "--epochs", "2", "--image-size", "24"]
    with caplog.at_level(logging.INFO, logger="shardfeed"):
        assert main([*args, "--shuffle", "global", "--crop-fraction", "1"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["shuffle"] == "global" and run["augment"] == "light"  # auto: 24-px digits
    assert "augment: light, chosen for small images (median shorter side 24 px" in caplog.text
    assert "(inference mode)" in caplog.text and "while fitting" in caplog.text
    assert "after the first epoch: " in caplog.text and "images/s" in caplog.text  # input vs model verdict
    assert json.loads((out / "metrics.json").read_text())["val_accuracy"] > 0.3  # chance is 0.1


def test_mid_epoch_snapshots_resume_at_the_saved_step(digits_data: tuple[Path, Path], tmp_path: Path) -> None:
    """The plumbing of train(save_every=...); the exactness itself is tested with SIGKILL in test_resume."""
    out = tmp_path / "m"
    args = ["train", str(digits_data[0]), "--out", str(out), "--image-size", "24", "--augment", "none"]
    assert main([*args, "--epochs", "1", "--shuffle", "global", "--save-every", "5"]) == 0
    snapshots = out / "checkpoints"
    point = read_resume_point(str(snapshots))
    assert point is not None and (point.epoch, point.step) == (1, 0)  # 22 steps: 5, 10, 15, 20, end
    # as if killed after step 10 of epoch 0: the next run must train steps 11..22 of epoch 0 only
    (snapshots / "resume.json").write_text(json.dumps({**point.__dict__, "epoch": 0, "step": 10}))
    metrics = train(
        str(digits_data[0]),
        str(out),
        TrainOptions(epochs=1, image_size=24, augment="none", shuffle="global", save_every=5),
        resume=True,
        verbose=0,
    )
    assert (metrics["initial_epoch"], metrics["initial_step"]) == (0, 10) and "val_accuracy" in metrics
    after = read_resume_point(str(snapshots))
    assert after is not None and (after.epoch, after.step, after.seed) == (1, 0, point.seed)
    assert len(list(csv.DictReader((out / "log.csv").open()))) == 2  # epoch 0, then its resumed rest
    with pytest.raises(ValueError, match="save_every=5 needs shuffle='global'"):
        train(str(digits_data[0]), str(tmp_path / "b"), TrainOptions(epochs=1, save_every=5), verbose=0)
    with pytest.raises(FileNotFoundError, match=r"no checkpoints/resume\.json"):
        train(
            str(digits_data[0]),
            str(tmp_path / "c"),
            TrainOptions(epochs=1, shuffle="global", save_every=5),
            resume=True,
            verbose=0,
        )


def test_a_one_epoch_run_reads_the_manifest_at_most_twice(
    digits_data: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run holds the manifest it read; every dataset of the run (training stream, validation,
    input probe, inference check, augmentation choice) is built from it."""
    from shardfeed.format import manifest

    reads: list[str] = []
    real = manifest.read
    monkeypatch.setattr(manifest, "read", lambda path: reads.append(path) or real(path))
    train(str(digits_data[0]), str(tmp_path / "r"), TrainOptions(epochs=1, image_size=16), verbose=0)
    assert 1 <= len(reads) <= 2, reads


def test_precision_follows_the_hardware_unless_asked() -> None:
    """'auto' is float16 compute on a GPU (not testable here beyond this rule), float32 without."""
    from shardfeed.errors import OptionError
    from shardfeed.training import TrainOptions

    assert TrainOptions().compute_precision(gpu=True) == "mixed"
    assert TrainOptions().compute_precision(gpu=False) == "float32"
    assert TrainOptions(precision="float32").compute_precision(gpu=True) == "float32"
    assert TrainOptions(precision="mixed").compute_precision(gpu=False) == "mixed"
    assert TrainOptions(mixed_precision=True).compute_precision(gpu=False) == "mixed"  # the former switch
    with pytest.raises(OptionError, match="contradict"):
        TrainOptions(mixed_precision=True, precision="float32")


def test_prediction_grid_shows_the_csvs_first_files_with_their_names() -> None:
    """Records arrive in shard order; the grid keeps the images whose names sort first (the CSV's
    first rows), captioned with the file name and the prediction."""
    import random

    import tensorflow as tf

    from shardfeed.tools.preview import keep_first
    from shardfeed.training.tasks.classification import caption

    names = [f"photos/img_{i:03d}.jpg" for i in range(40)]
    random.Random(0).shuffle(names)
    shown: list = []
    for i, name in enumerate(names):
        keep_first(shown, (name, tf.fill([2, 2, 3], i), caption({"file": name, "class": "cat", "probability": 0.5})), 6)
    kept = sorted(shown, key=lambda t: t[0])
    assert [t[0] for t in kept] == [f"photos/img_{i:03d}.jpg" for i in range(6)]
    assert kept[0][2] == "photos/img_000.jpg\ncat (0.50)"
    assert int(kept[0][1][0, 0, 0]) == names.index("photos/img_000.jpg")  # each image with its own name
