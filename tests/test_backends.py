"""Keras 3 on JAX and on PyTorch (CPU builds), each in its own process with KERAS_BACKEND set:
the CLI's train, evaluate and predict, the README's `load` + `model.fit`, and `fit_resumable`
(a run of one epoch, then resumed for a second: the optimizer's state comes back)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zygote

from shardfeed import ConvertOptions, convert

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`

BACKENDS = ["jax", "torch"]


@pytest.fixture(scope="module")
def digits_data(digits_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("backends") / "data"
    convert(str(digits_tree), str(out), ConvertOptions(shards=2), workers=1, progress=False)
    return out


def _run(backend: str, args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed")
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = zygote.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    assert done.returncode == 0, (backend, args[:4], done.stderr[-3000:])
    return done


@pytest.mark.parametrize("backend", BACKENDS)
def test_train_evaluate_predict_on_the_backend(backend: str, digits_data: Path, tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "shardfeed"]
    run = tmp_path / "run"
    trained = _run(
        backend, [*cli, "train", str(digits_data), "--out", str(run), "--epochs", "1", "--image-size", "16"], tmp_path
    )
    assert f"no GPU for Keras' {backend} backend" in trained.stderr
    assert "libtpu" not in trained.stderr and "Unable to initialize backend" not in trained.stderr  # start-up noise
    record = json.loads((run / "run.json").read_text())
    assert record["path"] == str(digits_data)
    evaluated = _run(backend, [*cli, "evaluate", str(run), str(digits_data)], tmp_path)
    assert "accuracy" in evaluated.stdout + evaluated.stderr
    images = tmp_path / "unlabeled"
    images.mkdir()
    from shardfeed.read.indexed import IndexedRecords

    records = IndexedRecords(str(digits_data), split="validation")
    for i in range(5):
        (images / f"{i}.png").write_bytes(records.example(i)["image/encoded"])
    _run(backend, [*cli, "predict", str(run), str(images), "--out", str(tmp_path / "p.csv")], tmp_path)
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 1 + 5


README_FIT = """import sys, keras, shardfeed
data = sys.argv[1]
train = shardfeed.load(data, split="train", batch_size=32, image_size=16, seed=0)
val = shardfeed.load(data, split="validation", batch_size=32, image_size=16)
model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Rescaling(1 / 255), keras.layers.Flatten(),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(train, validation_data=val, epochs=10, verbose=0)
train = shardfeed.load(data, split="train", batch_size=32, image_size=16, repeat=True)
model.fit(train, steps_per_epoch=shardfeed.steps_per_epoch(data, "train", 32), epochs=1, verbose=0)
print(keras.backend.backend(), history.history["val_accuracy"][-1])
"""

RESUMABLE = """import sys, keras
from shardfeed.training import fit_resumable
data, run, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
def build():
    model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Rescaling(1 / 255), keras.layers.Flatten(),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy")
    return model
model = fit_resumable(build, data, run, epochs=epochs, batch_size=32, seed=0, save_every=10, image_size=16,
                      verbose=0)
print(keras.backend.backend(), int(keras.ops.convert_to_numpy(model.optimizer.iterations)))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_readme_fit_and_fit_resumable_on_the_backend(backend: str, digits_data: Path, tmp_path: Path) -> None:
    done = _run(backend, [sys.executable, "-c", README_FIT, str(digits_data)], tmp_path)
    name, accuracy = done.stdout.split()
    assert name == backend and float(accuracy) > 0.3  # 10 digit classes: chance is 0.1 (TensorFlow's backend: 0.5)
    one = _run(backend, [sys.executable, "-c", RESUMABLE, str(digits_data), str(tmp_path / "a"), "1"], tmp_path)
    again = _run(backend, [sys.executable, "-c", RESUMABLE, str(digits_data), str(tmp_path / "a"), "2"], tmp_path)
    whole = _run(backend, [sys.executable, "-c", RESUMABLE, str(digits_data), str(tmp_path / "b"), "2"], tmp_path)
    assert one.stdout.split()[0] == backend
    resume = json.loads((tmp_path / "a" / "resume.json").read_text())
    assert resume["epoch"] == 2
    # the resumed run restored the snapshot's optimizer state: its step count is the whole run's
    steps = int(one.stdout.split()[1])
    assert steps > 0 and int(again.stdout.split()[1]) == int(whole.stdout.split()[1]) == 2 * steps
