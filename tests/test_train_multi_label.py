"""train, evaluate, predict and report on a multi-label folder: photos with coloured shapes
pasted at random places, each image tagged with the shapes it shows. The sigmoid head learns
them; evaluate's mAP and F1 are scikit-learn's on the same scores; the thresholds are chosen on
validation; predict writes label sets."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import zygote

from bench.corpus import TAGS, build_tagged_corpus
from shardfeed import ConvertOptions, OptionError, convert
from shardfeed.training import evaluate, load_model, predict, read_resume_point, train
from shardfeed.training.models import predicted
from shardfeed.training.options import TrainOptions
from shardfeed.training.run_folder import RunFolder
from shardfeed.write.sources import CsvSource

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`

OPTIONS = TrainOptions(model="small_cnn", epochs=8, batch_size=16, image_size=48, augment="none", crop_fraction=1.0)


# 256 images: 192 to train and 64 to validate, whole batches of 16 (a last partial batch is traced
# once more, and on JAX compiled once more)
IMAGES = 256
TRAINING = IMAGES * 3 // 4


@pytest.fixture(scope="module")
def tagged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tagged")
    listing = build_tagged_corpus(str(root / "source"), IMAGES, size=64)
    out = root / "shards"
    convert(CsvSource(listing, multi_label=True), str(out), ConvertOptions(split="train=0.75,validation=0.25"))
    return out


@pytest.fixture(scope="module")
def run_dir(tagged: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "run"
    train(str(tagged), str(out), OPTIONS, verbose=0)
    return out


def test_the_sigmoid_head_learns_the_tags(run_dir: Path) -> None:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    record = json.loads((run_dir / "run.json").read_text())
    assert record["task"] == "multi_label" and record["class_names"] == sorted(TAGS)
    assert metrics["val_mAP"] > 0.6, metrics  # chance: the share of each shape, about 0.4
    assert "val_auc_pr" in metrics and "train_auc_pr_inference" in metrics
    net = load_model(str(run_dir / "model.keras"))
    assert net.get_layer("probabilities").get_config()["activation"] == "sigmoid"
    thresholds = json.loads((run_dir / "thresholds.json").read_text())
    assert thresholds["chosen_on"] == "validation" and len(thresholds["values"]) == 4
    assert all(0 < t < 1 for t in thresholds["values"])


def test_evaluate_is_scikit_learns_map_and_f1_on_the_same_scores(run_dir: Path, tagged: Path) -> None:
    from sklearn.metrics import average_precision_score, f1_score

    result = evaluate(str(run_dir))
    record = RunFolder(str(run_dir)).read_record()
    net = load_model(str(run_dir / "model.keras"))
    scores, truth = [], []
    for images, k_hot in record.inputs().evaluation("validation"):
        scores.append(predicted(net, images))
        truth.append(k_hot.numpy())
    s, y = np.concatenate(scores), np.concatenate(truth).astype(int)
    thresholds = np.array(json.loads((run_dir / "thresholds.json").read_text())["values"])
    assert result["examples"] == len(y) == IMAGES - TRAINING
    assert result["mAP"] == pytest.approx(average_precision_score(y, s, average="macro"), abs=1e-9)
    for k, name in enumerate(result["class_names"]):
        assert result["per_class"][name]["ap"] == pytest.approx(average_precision_score(y[:, k], s[:, k]), abs=1e-9)
    assert result["micro_f1"] == pytest.approx(f1_score(y, s >= thresholds, average="micro"), abs=1e-9)
    assert result["macro_f1"] == pytest.approx(f1_score(y, s >= thresholds, average="macro"), abs=1e-9)
    for k in range(4):  # each threshold is validation's best F1 for its class
        best = max(f1_score(y[:, k], s[:, k] >= t) for t in np.unique(s[:, k]))
        assert f1_score(y[:, k], s[:, k] >= thresholds[k]) == pytest.approx(best)
    assert (Path(result["output_dir"]) / "average_precision.png").stat().st_size > 0


def test_the_cli_prints_map_predict_writes_label_sets_and_report_renders(run_dir: Path, tmp_path: Path) -> None:
    done = zygote.run(
        [sys.executable, "-m", "shardfeed", "evaluate", str(run_dir)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mAP 0." in done.stdout and "micro F1" in done.stdout and "red square" in done.stdout
    images = Path(json.loads((run_dir / "run.json").read_text())["path"]).parent / "source" / "images"
    rows = predict(str(run_dir), str(images), str(tmp_path / "p.csv"), grid=str(tmp_path / "grid.png"))
    with open(tmp_path / "p.csv") as f:
        header = next(csv.reader(f))
    assert header == ["file", "labels", *(f"score:{n}" for n in sorted(TAGS)), "error"]
    assert len(rows) == IMAGES and (tmp_path / "grid.png").exists()
    with open(images.parent / "tags.csv") as f:
        truth = {r["path"].split("/")[-1]: set(r["label"].split(";")) for r in csv.DictReader(f)}
    right = sum(set(filter(None, r["labels"].split(";"))) == truth[r["file"]] for r in rows)
    assert right > 0.5 * len(rows)  # exact label sets, over training and validation images
    report = zygote.run(
        [sys.executable, "-m", "shardfeed", "report", str(run_dir)], capture_output=True, text=True, timeout=300
    )
    assert report.returncode == 0, report.stderr[-2000:]
    page = (run_dir / "report.html").read_text()
    assert "mAP" in page and "threshold" in page and "auc_pr" in page


def test_what_multi_label_cannot_train_with_is_refused(tagged: Path, tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="class_weight weighs each image by its one class"):
        train(str(tagged), str(tmp_path / "run"), TrainOptions(class_weight="balanced"))


def test_a_killed_multi_label_run_resumes_on_the_uninterrupted_runs_batches(tagged: Path, tmp_path: Path) -> None:
    """fit_resumable on k-hot labels (a sigmoid head, binary cross-entropy), SIGKILLed mid-epoch
    and restarted: the batches (records and pixels) are the uninterrupted run's."""
    from test_resume import FINGERPRINTED, _fingerprints

    script = FINGERPRINTED.replace('Dense(16, activation="softmax")', 'Dense(4, activation="sigmoid")')
    script = script.replace('"sparse_categorical_crossentropy"', '"binary_crossentropy"')
    assert script.count("sigmoid") == 1 and script.count("binary_crossentropy") == 1
    data = str(tagged)
    ref = _fingerprints(data, tmp_path / "ref", tmp_path / "log", 1, 0, "global", 16, None, script)
    assert len(ref) == 3 * (TRAINING // 16)
    first = _fingerprints(data, tmp_path / "run", tmp_path / "log", 1, 0, "global", 16, 17, script)
    assert len(first) == 17
    point = read_resume_point(str(tmp_path / "run"))
    assert point is not None
    resumed_from = point.epoch * (TRAINING // 16) + point.step
    second = _fingerprints(data, tmp_path / "run", tmp_path / "log", 1, 0, "global", 16, None, script)
    assert first[:resumed_from] + second == ref


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_train_and_evaluate_on_the_backend(backend: str, tagged: Path, tmp_path: Path) -> None:
    trained_on(backend, tagged, tmp_path / "run", "mAP 0.")


def trained_on(backend: str, data: Path, run: Path, figure: str, image_size: int = 32) -> None:
    """`shardfeed train` (one epoch) and `evaluate` on Keras' `backend` ('jax', 'torch'), in
    fresh processes: both print `figure` (the task's score)."""
    import importlib.util
    import os

    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed")
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    cli = [sys.executable, "-m", "shardfeed"]
    args = ["train", str(data), "--out", str(run), "--epochs", "1", "--image-size", str(image_size)]
    trained = zygote.run([*cli, *args, "--batch-size", "16"], capture_output=True, text=True, env=env, timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert f"validation: {figure}" in trained.stdout + trained.stderr
    evaluated = zygote.run([*cli, "evaluate", str(run)], capture_output=True, text=True, env=env, timeout=600)
    assert evaluated.returncode == 0 and figure in evaluated.stdout, evaluated.stderr[-3000:]
