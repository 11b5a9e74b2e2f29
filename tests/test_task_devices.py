"""`train --devices` and mixed precision for labels beyond one class: multi-label, segmentation
masks and detection boxes trained on two logical CPU devices (MirroredStrategy) in a real
process, their closing figures equal to `evaluate` of the saved model on one device; and the
detector's detections read under mixed precision."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import zygote

from bench.corpus import TAGS, build_segmentation_corpus, build_shapes_coco_corpus, build_tagged_corpus
from shardfeed import ConvertOptions, CsvSource, convert
from shardfeed.training import evaluate

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`

TWO_DEVICES = """
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from shardfeed.training import TrainOptions, train

data, out, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
print(json.dumps(train(data, out, TrainOptions(epochs=1, batch_size=16, image_size=size, devices=2), verbose=0)))
"""


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A multi-label, a segmentation and a detection folder of 64 px photo crops with shapes."""
    root = tmp_path_factory.mktemp("tasks")
    split = ConvertOptions(split="train=0.75,validation=0.25")
    listing = build_tagged_corpus(str(root / "tag_source"), 128, size=64)
    convert(CsvSource(listing, multi_label=True), str(root / "tags"), split, progress=False)
    convert(
        build_segmentation_corpus(str(root / "seg_source"), 128, size=64), str(root / "masks"), split, progress=False
    )
    coco = build_shapes_coco_corpus(str(root / "det_source"), 128, size=64)
    convert(coco, str(root / "boxes"), split, progress=False)
    return {"tags": root / "tags", "masks": root / "masks", "boxes": root / "boxes"}


def test_two_devices_train_every_task_and_its_figures_are_the_saved_models(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    runs = {name: tmp_path / name for name in folders}
    sizes = {"tags": 32, "masks": 32, "boxes": 64}  # boxes: 64 px, where the anchors reach the shapes
    # oneDNN's CPU kernels fail on a replica's empty slice of a partial batch (test_devices.py)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="0")
    metrics = {}
    for name, data in folders.items():  # a process each, as the CLI runs: one strategy a process
        argv = [str(data), str(runs[name]), str(sizes[name])]
        done = zygote.run(
            [sys.executable, "-c", TWO_DEVICES, *argv], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-3000:]
        metrics[name] = json.loads(done.stdout.strip().splitlines()[-1])
        assert metrics[name]["strategy"] == "MirroredStrategy", name
        assert json.loads((runs[name] / "run.json").read_text())["devices"] == 2
    # figures made in the training process (its model's variables mirrored on two devices) are
    # those of the saved model evaluated on one: each image scored once (Keras' predict_on_batch
    # under the strategy returned every image twice, and the thresholds' search failed on that)
    tags = evaluate(str(runs["tags"]), split="validation")
    assert metrics["tags"]["val_mAP"] == pytest.approx(tags["mAP"], abs=1e-6)
    assert metrics["tags"]["val_micro_f1"] == pytest.approx(tags["micro_f1"], abs=1e-6)
    boxes = evaluate(str(runs["boxes"]), split="validation")
    assert metrics["boxes"]["val_mAP@0.5"] == pytest.approx(boxes["mAP@0.5"], abs=1e-6)
    assert metrics["boxes"]["val_objects"] == boxes["objects"] > 32
    masks = evaluate(str(runs["masks"]), split="validation")
    assert masks["examples"] == 32 and masks["mean_iou"] is not None


def test_detections_under_mixed_precision_are_read_as_in_float32() -> None:
    """Under mixed_float16 the detector's heads give float16, which KerasHub's decoder multiplied
    with its float32 anchors (TensorFlow refused: `train --precision mixed` failed at its
    closing COCO scores); the boxes now come out as the float32 model's, within float16's
    rounding of the same weights."""
    pytest.importorskip("keras_hub", reason="the detection extra (make install puts it in .venv)")
    import keras

    from shardfeed.training.detector import build_detector, detections

    images = np.random.default_rng(0).integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
    keras.utils.set_random_seed(0)
    single = build_detector(list(TAGS), (64, 64))
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        mixed = build_detector(list(TAGS), (64, 64))
        mixed.set_weights(single.get_weights())
        found = detections(mixed, images)
    finally:
        keras.config.set_dtype_policy(before)
    assert mixed.compute_dtype == "float16"
    assert [f.boxes.dtype for f in found] == [np.float64, np.float64] and len(found) == 2
    expected = detections(single, images)
    assert [len(f.boxes) for f in found] == [len(e.boxes) for e in expected]
