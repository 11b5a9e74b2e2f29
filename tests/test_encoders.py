"""Masks and boxes on a keras.applications backbone: the feature maps are each stage's end (the
TensorFlow segmentation tutorial's layers for MobileNetV2, the stage outputs for ResNet50); the
U-Net and the detector start from the backbone's weights and save and load whole; the head
phase freezes the backbone alone; `--model auto` picks MobileNetV2 where Keras' cache holds its
ImageNet weights (a weights file under Keras' own name in KERAS_HOME, offline) and the small
models where it does not; `train` then `evaluate` run in real processes (on TensorFlow, and on JAX
for boxes: the KerasHub detector); the models build, save and load on any backend (run this file
with KERAS_BACKEND=jax or torch for the in-process ones)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import zygote

from bench.corpus import TAGS, build_segmentation_corpus, build_shapes_coco_corpus
from shardfeed import OptionError
from shardfeed.format.schema import DETECTION, SEGMENTATION
from shardfeed.training import build_model
from shardfeed.training.fine_tune import backbone_of, schedule, set_phase
from shardfeed.training.model_choice import choose_image_size, choose_model
from shardfeed.training.models import load_model

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`

keras_hub = pytest.importorskip("keras_hub", reason="the detection extra (make install puts it in .venv)")

NAMES = ["background", *TAGS]
# the file keras.applications.MobileNetV2 reads for ImageNet weights without its top, at an input
# size it has no own file for (it then takes the 224 one, as Keras says in a warning)
CACHED_FILE = "mobilenet_v2_weights_tf_dim_ordering_tf_kernels_1.0_224_no_top.h5"


def _save_backbone_weights(path: Path, seed: int) -> list[np.ndarray]:
    """MobileNetV2 weights (seeded random: no ImageNet ones can be downloaded here) written as
    Keras' own ImageNet files are, in the legacy HDF5 layout; returns them."""
    import h5py
    import keras
    from keras.src.legacy.saving import legacy_h5_format

    keras.utils.set_random_seed(seed)
    app = keras.applications.MobileNetV2(weights=None, include_top=False, input_shape=(224, 224, 3))
    for variable in app.weights:  # BatchNorm's statistics too, so every array differs from a fresh one
        variable.assign(np.random.default_rng(seed).normal(0.5, 0.1, variable.shape).astype("float32"))
    with h5py.File(path, "w") as f:
        legacy_h5_format.save_weights_to_hdf5_group(f, app)
    return [np.asarray(w) for w in app.get_weights()]


@pytest.fixture(scope="module")
def keras_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[np.ndarray]]:
    home = tmp_path_factory.mktemp("keras_home")
    (home / "models").mkdir()
    return home, _save_backbone_weights(home / "models" / CACHED_FILE, seed=3)


# few_converted: 64 images, 48 to train and 16 to validate, whole batches of 8 (a last partial batch
# would be traced, and on JAX compiled, once more: the MobileNetV2 detector's train step is the
# run's costliest)
@pytest.fixture(scope="module")
def seg_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conftest import few_converted

    return few_converted(tmp_path_factory, build_segmentation_corpus)


@pytest.fixture(scope="module")
def det_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conftest import few_converted

    return few_converted(tmp_path_factory, build_shapes_coco_corpus)


def test_the_feature_maps_are_each_stages_end() -> None:
    import keras

    from shardfeed.training.encoders import stride_layers

    mobilenet = keras.applications.MobileNetV2(weights=None, include_top=False, input_shape=(96, 96, 3))
    assert stride_layers(mobilenet, (96, 96)) == {  # the TF segmentation tutorial's, and the last map
        2: "block_1_expand_relu",
        4: "block_3_expand_relu",
        8: "block_6_expand_relu",
        16: "block_13_expand_relu",
        32: "out_relu",
    }
    resnet = keras.applications.ResNet50(weights=None, include_top=False, input_shape=(64, 128, 3))
    assert stride_layers(resnet, (64, 128)) == {
        2: "conv1_relu",
        4: "conv2_block3_out",
        8: "conv3_block4_out",
        16: "conv4_block6_out",
        32: "conv5_block3_out",
    }
    with pytest.raises(OptionError, match="multiples of 32"):
        stride_layers(mobilenet, (72, 72))
    with pytest.raises(OptionError, match="small_cnn is a classifier; segmentation is learned by"):
        build_model("small_cnn", NAMES, (64, 64), task=SEGMENTATION)


def _same(ours: list[np.ndarray], theirs: list[np.ndarray]) -> bool:
    return len(ours) == len(theirs) and all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))


def _photos(count: int, side: int) -> np.ndarray:
    from tests.conftest import crops, photos

    return np.stack([crop[:side, :side] for crop in crops(photos()["astronaut"], count, seed=1)])


def test_a_backbone_unet_starts_from_the_backbones_weights_and_saves_whole(
    keras_home: tuple[Path, list[np.ndarray]], tmp_path: Path
) -> None:
    file, weights = keras_home[0] / "models" / CACHED_FILE, keras_home[1]
    net = build_model("mobilenet_v2", NAMES, (64, 64), weights=str(file), task=SEGMENTATION)
    assert _same(backbone_of(net).get_weights(), weights)
    images = _photos(4, 64)
    scores = np.asarray(net.predict_on_batch(images))
    assert scores.shape == (4, 64, 64, len(NAMES))
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-4)
    net.save(tmp_path / "unet.keras")
    again = load_model(str(tmp_path / "unet.keras"))
    np.testing.assert_array_equal(np.asarray(again.predict_on_batch(images)), scores)

    head = schedule("mobilenet_v2", pretrained=True, epochs=2, learning_rate=1e-3).phases[0]
    set_phase(net, head)
    backbone = backbone_of(net)
    frozen = {id(v) for v in backbone.weights}
    assert not backbone.trainable and backbone.trainable_weights == []
    decoder = [v for v in net.trainable_weights if id(v) not in frozen]
    assert len(decoder) == len(net.trainable_weights) > 0  # the decoder alone learns


def test_a_backbone_detector_starts_from_the_backbones_weights_and_saves_whole(
    keras_home: tuple[Path, list[np.ndarray]], tmp_path: Path
) -> None:
    file, weights = keras_home[0] / "models" / CACHED_FILE, keras_home[1]
    net = build_model("mobilenet_v2", TAGS, (64, 64), weights=str(file), task=DETECTION)
    assert _same(backbone_of(net).get_weights(), weights)
    from keras.ops import convert_to_numpy

    images = _photos(2, 64).astype("float32")
    outputs = {k: convert_to_numpy(v) for k, v in net(images).items()}
    # anchors: 9 per cell of the 8x8, 4x4 and 2x2 maps (strides 8, 16, 32 of 64 px)
    assert outputs["bbox_regression"].shape == (2, 9 * (64 + 16 + 4), 4)
    net.save(tmp_path / "detector.keras")
    again = load_model(str(tmp_path / "detector.keras"))
    for key, value in again(images).items():
        np.testing.assert_array_equal(convert_to_numpy(value), outputs[key])

    set_phase(net, schedule("mobilenet_v2", pretrained=True, epochs=2, learning_rate=1e-3).phases[0])
    learning = {v.path for v in net.trainable_weights}
    assert not any(v.path in learning for v in backbone_of(net).weights)
    assert any("fpn" in p for p in learning) and any("head" in p for p in learning), sorted(learning)[:5]


def test_auto_picks_mobilenet_v2_for_masks_and_boxes_where_its_weights_can_be_had(
    seg_shards: Path, det_shards: Path
) -> None:
    def cached(name: str) -> str:
        return "cache"

    def nowhere(name: str) -> None:
        return None

    for shards, own in ((seg_shards, "small_unet"), (det_shards, "retinanet")):
        choice = choose_model(str(shards), "train", source=cached)
        assert choice.model == "mobilenet_v2" and "in Keras' cache" in choice.reason
        assert choose_model(str(shards), "train", source=nowhere).model == own
        assert choose_model(str(shards), "train", weights="none", source=cached).model == own
        assert choose_model(str(shards), "train", weights="imagenet", source=nowhere).model == "mobilenet_v2"
    # the backbone's U-Net takes multiples of 32 (64 px photos: 64 either way); the small one of 8
    assert choose_image_size(str(seg_shards), "train", model="mobilenet_v2").side == 64
    assert choose_image_size(str(seg_shards), "train", model="small_unet").side == 64


def _train_and_evaluate(shards: Path, run: Path, home: Path, backend: str) -> tuple[str, str]:
    env = dict(os.environ, KERAS_HOME=str(home), KERAS_BACKEND=backend)
    command = [sys.executable, "-m", "shardfeed"]
    trained = zygote.run(
        [*command, "train", str(shards), "--out", str(run), "--model", "auto", "--epochs", "2", "--batch-size", "8"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    scored = zygote.run([*command, "evaluate", str(run)], capture_output=True, text=True, env=env, timeout=600)
    assert scored.returncode == 0, scored.stderr[-3000:]
    return trained.stdout + trained.stderr, scored.stdout


@pytest.mark.parametrize(
    ("task", "backend"),
    [(SEGMENTATION, "tensorflow"), (DETECTION, "tensorflow"), (DETECTION, "jax")],  # PyTorch: build, save, load
)
def test_train_auto_on_masks_and_boxes_starts_from_cached_imagenet_weights(
    task: str,
    backend: str,
    seg_shards: Path,
    det_shards: Path,
    keras_home: tuple[Path, list[np.ndarray]],
    tmp_path: Path,
) -> None:
    shards = seg_shards if task == SEGMENTATION else det_shards
    said, scores = _train_and_evaluate(shards, tmp_path / "run", keras_home[0], backend)
    what = "masks" if task == SEGMENTATION else "boxes"
    assert f"model: mobilenet_v2, chosen for {what}, and ImageNet weights for mobilenet_v2 (in Keras' cache)" in said
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (record["task"], record["model"], record["weights"]) == (task, "mobilenet_v2", "imagenet")
    assert [p["name"] for p in record["phases"]] == ["head", "fine-tune"]
    assert ("mean IoU 0." if task == SEGMENTATION else "mAP@0.5 0.") in scores
