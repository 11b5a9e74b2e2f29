"""The fine-tuning schedule: phase 1 trains the head on a frozen backbone, phase 2 its top at a
lower rate with BatchNorm frozen; the phases in the log, run.json and metrics.json; --resume in the
right phase. Offline: the starting weights are a file saved here from the same keras.applications
constructor."""

from __future__ import annotations

import csv
import json
import logging
import sys
from pathlib import Path

import numpy as np
import pytest
import zygote

from shardfeed.errors import OptionError
from shardfeed.training import TrainOptions, build_model, load_model, read_resume_point, train
from shardfeed.training.backbones import BACKBONES
from shardfeed.training.fine_tune import FINE_TUNE, HEAD, backbone_of, schedule, trainable_flags
from shardfeed.training.model_choice import choose_model

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`

SIZE = 32
BATCH = 11  # photo_shards: 33 to train and 11 to validate, whole batches (a partial one is traced again)


@pytest.fixture(scope="module")
def notop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MobileNetV3Small backbone weights (no top) saved locally: a stand-in for ImageNet's."""
    import keras

    path = tmp_path_factory.mktemp("weights") / "mobilenet_v3_small_notop.weights.h5"
    backbone = keras.applications.MobileNetV3Small(
        include_top=False, weights=None, input_shape=(SIZE, SIZE, 3), pooling="avg", include_preprocessing=True
    )
    backbone.save_weights(str(path))
    return path


def test_schedule_defaults_and_refusals(photo_shards: Path, digit_shards: Path) -> None:
    head, tune = schedule("mobilenet_v2", pretrained=True, epochs=10, learning_rate=1e-3).phases
    assert (head.name, head.start, head.end, head.learning_rate, head.unfreeze_from) == (HEAD, 0, 5, 1e-3, None)
    assert (tune.name, tune.start, tune.end, tune.unfreeze_from) == (FINE_TUNE, 5, 10, "block_11_")
    assert tune.learning_rate == pytest.approx(1e-4)
    (tune,) = schedule("efficientnet_v2_b0", pretrained=True, epochs=4, learning_rate=1e-3, head_epochs=0).phases
    assert tune.learning_rate == pytest.approx(1e-5) and tune.start == 0
    (whole,) = schedule("mobilenet_v2", pretrained=False, epochs=3, learning_rate=1e-3).phases
    assert (whole.name, whole.unfreeze_from) == ("all", "all")
    with pytest.raises(OptionError, match="the backbone starts from random weights"):
        schedule("mobilenet_v2", pretrained=False, epochs=3, learning_rate=1e-3, head_epochs=1)
    with pytest.raises(OptionError, match="head_epochs must be between 0 and epochs=2"):
        TrainOptions(epochs=2, head_epochs=3)
    assert TrainOptions(model="resnet50").weights_for("resnet50") == "imagenet"  # keras.applications' own default
    assert TrainOptions().weights_for("small_cnn") is None
    assert TrainOptions(weights="none").weights_for("resnet50") is None
    assert choose_model(str(digit_shards), "train").model == "small_cnn"  # 8 px digits
    cached = lambda name: "cache"  # noqa: E731
    assert choose_model(str(photo_shards), "train", source=cached).model == "mobilenet_v3_small"  # a few dozen photos


def test_auto_model_offline_picks_a_network_that_learns_from_random_weights(photo_shards: Path, tmp_path: Path) -> None:
    """Without ImageNet weights (nothing in Keras' cache, no network) or with --weights none, a few
    dozen photos get small_cnn, and the reason says so; asked-for ImageNet weights keep the backbone."""
    offline = choose_model(str(photo_shards), "train", source=lambda name: None)
    assert offline.model == "small_cnn" and "no ImageNet weights for mobilenet_v3_small" in offline.reason
    assert choose_model(str(photo_shards), "train", weights="none", source=lambda name: "cache").model == "small_cnn"
    assert choose_model(str(photo_shards), "train", weights="imagenet", source=lambda n: None).model != "small_cnn"


def test_imagenet_source_finds_keras_cached_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A notop weights file in KERAS_HOME/models counts as available without a network."""
    from shardfeed.training import backbones

    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.setattr(backbones, "WEIGHTS_HOST", ("127.0.0.1", _closed_port()))  # nothing listens: offline
    assert backbones.imagenet_source("mobilenet_v3_small") is None
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "weights_mobilenet_v3_small_224_1.0_float_no_top_v2.h5").write_bytes(b"x")
    assert backbones.imagenet_source("mobilenet_v3_small") == "cache"
    assert backbones.imagenet_source("efficientnet_v2_b0") is None


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_each_backbone_fine_tunes_its_last_stage_with_batchnorm_frozen(name: str) -> None:
    import keras

    net = build_model(name, ["a", "b"], (SIZE, SIZE))
    tune = schedule(name, pretrained=True, epochs=2, learning_rate=1e-3).phases[1]
    flags = trainable_flags(net, tune)
    layers = backbone_of(net).layers
    learning = [layer for layer in layers if flags[layer.name]]
    assert 0.05 < len(learning) / len(layers) < 0.6, f"{name}: {len(learning)} of {len(layers)} layers learn"
    assert not any(isinstance(layer, keras.layers.BatchNormalization) for layer in learning)
    first = next(i for i, layer in enumerate(layers) if flags[layer.name])
    assert not any(flags[layer.name] for layer in layers[:first])  # one contiguous top


def _log(run: Path) -> list[dict[str, str]]:
    return list(csv.DictReader((run / "log.csv").open()))


def test_two_phases_through_the_cli(photo_shards: Path, notop: Path, tmp_path: Path) -> None:
    """Phase 1 changes only the head, phase 2 the backbone's top; BatchNorm statistics never move;
    the phases are in the log lines, log.csv, run.json and metrics.json."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "shardfeed", "train", str(photo_shards), "--out", str(run), "--epochs", "2"]
    cmd += ["--model", "mobilenet_v3_small", "--weights", str(notop), "--head-epochs", "1"]
    cmd += ["--image-size", str(SIZE), "--batch-size", str(BATCH), "--augment", "none"]
    done = zygote.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "phase 1 of 2, head (epochs 1-1): backbone frozen (BatchNorm in inference mode)" in done.stderr
    assert "phase 2 of 2, fine-tune (epochs 2-2): fine-tuning the backbone from 'expanded_conv_8_' up" in done.stderr
    assert f"from weights {notop}: head epochs 1-1 at 0.001; fine-tune epochs 2-2 at 0.0001" in done.stderr
    rows = _log(run)
    assert [r["phase"] for r in rows] == ["1", "2"] and all("learning_rate" in r for r in rows)
    progress = [line for line in (done.stdout + done.stderr).splitlines() if " - loss: " in line]
    assert len(progress) == 2 and not any(" - phase: " in line or " - learning_rate: " in line for line in progress)
    record, metrics = json.loads((run / "run.json").read_text()), json.loads((run / "metrics.json").read_text())
    assert record["weights"] == str(notop) and [p["name"] for p in record["phases"]] == ["head", "fine-tune"]
    assert metrics["phases"] == record["phases"]

    import keras

    start = keras.applications.MobileNetV3Small(
        include_top=False, weights=None, input_shape=(SIZE, SIZE, 3), pooling="avg", include_preprocessing=True
    )
    start.load_weights(str(notop))
    trained = backbone_of(load_model(str(run / "model.keras")))
    split = next(i for i, layer in enumerate(trained.layers) if layer.name.startswith("expanded_conv_8_"))
    for i, (before, after) in enumerate(zip(start.layers, trained.layers, strict=True)):
        same = all(np.array_equal(a, b) for a, b in zip(before.get_weights(), after.get_weights(), strict=True))
        if i < split or isinstance(after, keras.layers.BatchNormalization):
            assert same, f"{after.name} (frozen) changed"
    top = [layer for layer in trained.layers[split:] if isinstance(layer, keras.layers.Conv2D)]
    assert any(
        not np.array_equal(layer.get_weights()[0], start.get_layer(layer.name).get_weights()[0]) for layer in top
    )


def test_resume_continues_in_the_right_phase(
    photo_shards: Path, notop: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopped at the end of phase 1, --resume starts phase 2; stopped mid-phase 2 (an exact
    snapshot), it continues phase 2 with the optimizer it had."""
    small = {"model": "mobilenet_v3_small", "image_size": SIZE, "batch_size": BATCH, "augment": "none"}
    run = tmp_path / "a"
    train(str(photo_shards), str(run), TrainOptions(epochs=1, head_epochs=1, **small), weights=str(notop), verbose=0)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="shardfeed"):
        options = TrainOptions(epochs=2, head_epochs=1, **small)
        metrics = train(str(photo_shards), str(run), options, weights=str(notop), resume=True, verbose=0)
    assert metrics["initial_epoch"] == 1 and "phase 2 of 2, fine-tune" in caplog.text and "phase 1" not in caplog.text
    assert [r["phase"] for r in _log(run)] == ["1", "2"]

    run = tmp_path / "b"
    exact = TrainOptions(epochs=2, head_epochs=1, shuffle="global", save_every=2, **small)
    train(str(photo_shards), str(run), exact, weights=str(notop), verbose=0)
    point = read_resume_point(str(run / "checkpoints"))
    assert point is not None and (point.epoch, point.step) == (2, 0)
    # as if killed after step 2 of epoch 1 (phase 2): the snapshot's model is phase 2's
    state = {**point.__dict__, "epoch": 1, "step": 2, "records_consumed": 2 * BATCH}
    (run / "checkpoints" / "resume.json").write_text(json.dumps(state))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="shardfeed"):
        metrics = train(str(photo_shards), str(run), exact, weights=str(notop), resume=True, verbose=0)
    assert (metrics["initial_epoch"], metrics["initial_step"]) == (1, 2)
    assert "phase 2 of 2, fine-tune" in caplog.text and "phase 1" not in caplog.text
    resumed = load_model(str(run / "model.keras"))
    steps = metrics["steps_per_epoch"]  # the snapshot's optimizer did a whole phase-2 epoch; 2 steps were redone
    assert int(resumed.optimizer.iterations.numpy()) == steps + steps - 2  # kept, not a new optimizer
