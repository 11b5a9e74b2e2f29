"""Exact mid-epoch resume: a real training process killed with SIGKILL during fit, then restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardfeed import ConvertOptions, IndexedRecords, convert
from shardfeed.training import read_resume_point

TRAIN = """
import sys, time
import keras, shardfeed, shardfeed.training
data, run_dir, log = sys.argv[1], sys.argv[2], sys.argv[3]

@keras.saving.register_keras_serializable(package="test")
class Logged(keras.Model):
    '''Logs the file names of every batch it trains on (eagerly), slowly enough to be killed.'''
    def train_step(self, data):
        x, y, files = data
        with open(log, "a") as f:
            f.write(",".join(v.decode() for v in files.numpy()) + "\\n")
        time.sleep(0.15)
        return super().train_step((x, y))

def build():
    inputs = keras.Input((16, 16, 3), dtype="uint8")
    x = keras.layers.Rescaling(1 / 255.0)(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = Logged(inputs, keras.layers.Dense(4, activation="softmax")(x))
    model.compile("adam", "sparse_categorical_crossentropy", run_eagerly=True)
    return model

shardfeed.training.fit_resumable(build, data, run_dir, epochs=2, batch_size=4, seed=7, save_every=2,
                                 image_size=16, read=shardfeed.ReadOptions(with_filenames=True), verbose=0)
"""


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_sees_each_record_once(photo_tree: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    convert(str(photo_tree), str(data), ConvertOptions(split="train=1", shards=3), workers=1, progress=False)
    run_dir, log = tmp_path / "run", tmp_path / "steps.log"
    cmd = [sys.executable, "-c", TRAIN, str(data), str(run_dir), str(log)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 16):
        if proc.poll() is not None:
            pytest.fail(f"training ended before it could be killed: {proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    first_run = log.read_text().splitlines()
    point = read_resume_point(str(run_dir))
    assert point is not None and (point.epoch, point.step) != (2, 0), "killed too late"
    assert point.epoch == 1 and 0 < point.step < 11, point  # mid-way through the second epoch
    log.unlink()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    consumed = first_run[: point.epoch * 11 + point.step] + log.read_text().splitlines()
    records = IndexedRecords(str(data), "train")
    names = [records.example(i)["image/filename"].decode() for i in range(len(records))]
    expected = []
    for epoch in range(2):
        order = [names[i] for i in records.order(seed=7, epoch=epoch)]
        expected += [",".join(order[s : s + 4]) for s in range(0, 44, 4)]
    assert consumed == expected  # every batch of both epochs exactly once, in order
