"""`train --devices`: MirroredStrategy over several devices (training/devices.py), tested on CPU
with two logical devices in a real process."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import zygote

from shardfeed import ConvertOptions, convert
from shardfeed.errors import OptionError
from shardfeed.training import TrainOptions
from shardfeed.training.devices import parse

TWO_DEVICES = """
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import shardfeed
from shardfeed.training import TrainOptions, train
from shardfeed.training.devices import place
from shardfeed.training.inputs import RunInputs

data, out = sys.argv[1], sys.argv[2]
# the stream train reads, distributed as Keras distributes it: each replica's slice of each batch
placement = place(2)
inputs = RunInputs(data, 10, 16, seed=0)
read = shardfeed.ReadOptions(with_filenames=True, drop_remainder=True)  # as train reads for several devices
steps = inputs.steps_per_epoch("train", read=read)
stream = placement.strategy.experimental_distribute_dataset(inputs.training("train", read=read))
slices = []
for _, (_, _, files) in zip(range(2 * steps), stream):
    slices.append([[f.decode() for f in part.numpy()] for part in placement.strategy.experimental_local_results(files)])
metrics = {}
for devices in (1, 2):
    options = TrainOptions(epochs=4, batch_size=10, image_size=32, devices=devices, augment="none")
    metrics[devices] = train(data, f"{out}-{devices}", options, verbose=0)
print(json.dumps({"steps": steps, "slices": slices, "metrics": metrics}))
"""


@pytest.mark.slow
def test_two_devices_split_each_batch_and_learn_as_one(photo_tree: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    convert(str(photo_tree), str(data), ConvertOptions(split="train=0.75,validation=0.25"), workers=1, progress=False)
    # oneDNN's CPU kernels fail on a replica's empty slice of the last partial evaluation batch
    # (a batch of 1 across 2 replicas); GPUs do not use them, so only logical CPU devices need this
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="0")
    done = zygote.run(
        [sys.executable, "-c", TWO_DEVICES, str(data), str(tmp_path / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    steps, slices = result["steps"], result["slices"]
    train_count = json.loads((data / "manifest.json").read_text())["splits"]["train"]["num_records"]
    assert steps == train_count // 10  # several devices: whole batches (an empty replica slice breaks BatchNorm)
    for epoch in range(2):
        batches = slices[epoch * steps : (epoch + 1) * steps]
        names = [n for batch in batches for part in batch for n in part]
        assert len(names) == len(set(names)) == steps * 10  # no record twice in an epoch, none lost but the rest
        assert all(len(batch) == 2 and len(batch[0]) == len(batch[1]) == 5 for batch in batches)
    one, two = result["metrics"]["1"], result["metrics"]["2"]
    assert one["devices"] == ["/device:CPU:0"] and two["devices"] == ["/device:CPU:0", "/device:CPU:1"]
    assert two["strategy"] == "MirroredStrategy" and one["strategy"] is None
    assert two["val_accuracy"] > 0.6 and abs(two["val_accuracy"] - one["val_accuracy"]) <= 0.2, (one, two)
    record = json.loads((tmp_path / "run-2" / "run.json").read_text())
    assert record["devices"] == 2 and record["device_names"] == two["devices"]


def test_devices_option_is_checked() -> None:
    with pytest.raises(OptionError, match="devices must be a positive number or 'all', got 0"):
        TrainOptions(devices=0)
    assert parse("all") == "all" and parse("2") == 2


def test_more_devices_than_the_host_has_is_one_line() -> None:
    from shardfeed.training.devices import place

    with pytest.raises(OptionError, match=r"--devices 64 asks for 64 devices but this host has 1 CPU"):
        place(64)
