"""The model zoo: each keras.applications backbone builds with its own preprocessing inside,
trains a step on real images and round-trips through model.keras; weights from files and the
offline ImageNet message."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import crops, photos

from shardfeed.errors import OptionError
from shardfeed.training import build_model
from shardfeed.training.backbones import BACKBONES
from shardfeed.training.models import load_model

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`


def _images(count: int, size: int) -> np.ndarray:
    return np.stack([c[:size, :size] for c in crops(photos()["chelsea"], count, seed=3)]).astype(np.uint8)


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_backbone_trains_a_step_and_round_trips(name: str, tmp_path: Path) -> None:
    net = build_model(name, ["a", "b"], (32, 32))
    net.compile("adam", "sparse_categorical_crossentropy", run_eagerly=True)  # no graph tracing: seconds, not minutes
    x, y = _images(4, 32), np.array([0, 1, 0, 1])
    before = [w.copy() for w in net.get_weights()]
    loss = net.train_on_batch(x, y)
    assert np.isfinite(loss) and any(not np.array_equal(a, b) for a, b in zip(before, net.get_weights(), strict=True))
    net.save(tmp_path / "model.keras")
    again = load_model(str(tmp_path / "model.keras"))
    assert np.allclose(net(x, training=False), again(x, training=False), atol=1e-5)


@pytest.mark.parametrize(("name", "family"), [("mobilenet_v2", "mobilenet_v2"), ("resnet50", "resnet50")])
def test_the_backbones_own_preprocessing_is_inside_the_model(name: str, family: str) -> None:
    """The layer in front of the backbone computes what keras.applications.<family>.preprocess_input does."""
    import keras

    net = build_model(name, ["a", "b"], (32, 32))
    backbone = next(layer for layer in net.layers if isinstance(layer, keras.Model))
    front = keras.Model(net.input, net.layers[net.layers.index(backbone) - 1].output)
    x = _images(2, 32)
    expected = getattr(keras.applications, family).preprocess_input(x.astype("float32"))
    assert np.allclose(front(x), expected, atol=1e-4)


def test_weight_files_whole_or_backbone_and_a_file_that_does_not_fit(tmp_path: Path) -> None:
    whole = build_model("mobilenet_v3_small", ["a", "b", "c"], (32, 32))
    whole.save_weights(str(tmp_path / "whole.weights.h5"))
    copy = build_model("mobilenet_v3_small", ["a", "b", "c"], (32, 32), weights=str(tmp_path / "whole.weights.h5"))
    x = _images(2, 32)
    assert np.allclose(whole(x, training=False), copy(x, training=False), atol=1e-6)
    with pytest.raises(OptionError, match="does not fit the mobilenet_v3_small model for 4 classes"):
        build_model("mobilenet_v3_small", ["a", "b", "c", "d"], (32, 32), weights=str(tmp_path / "whole.weights.h5"))
    with pytest.raises(OptionError, match="small_cnn has no ImageNet weights"):
        build_model("small_cnn", ["a", "b"], (32, 32), weights="imagenet")


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare for a process without a network")
def test_imagenet_weights_without_a_network_fail_in_one_line(photo_shards: Path, tmp_path: Path) -> None:
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -rn is not allowed here: {probe.stderr.decode()[-200:]}")
    cmd = [
        "unshare",
        "-rn",
        sys.executable,
        "-m",
        "shardfeed",
        "train",
        str(photo_shards),
        "--out",
        str(tmp_path / "r"),
    ]
    cmd += ["--model", "mobilenet_v3_small", "--weights", "imagenet", "--epochs", "1", "--image-size", "32"]
    cmd += ["--batch-size", "8"]
    env = dict(os.environ, KERAS_HOME=str(tmp_path / "keras"))  # an empty cache
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    line = next(li for li in done.stderr.splitlines() if li.startswith("error:"))
    assert "Keras wanted weights_mobilenet_v3_small" in line and "_no_top" in line
    assert f"put that file in {tmp_path / 'keras' / 'models'}" in line and "--weights FILE" in line
