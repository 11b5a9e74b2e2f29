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

LOGGED_MODEL = """
import os, sys, time
import keras, shardfeed, shardfeed.training
data, run_dir, log = sys.argv[1], sys.argv[2], sys.argv[3]

@keras.saving.register_keras_serializable(package="test")
class Logged(keras.Model):
    '''Logs the file names of every batch it trains on (eagerly), slowly enough to be killed.'''
    def train_step(self, data):
        x, y, files = data
        with open(log, "a") as f:
            f.write(",".join(v.decode() for v in files.numpy()) + "\\n")
        time.sleep(float(os.environ.get("STEP_SECONDS", "0.15")))
        return super().train_step((x, y))

def build():
    inputs = keras.Input((16, 16, 3), dtype="uint8")
    x = keras.layers.Rescaling(1 / 255.0)(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = Logged(inputs, keras.layers.Dense(4, activation="softmax")(x))
    model.compile("adam", "sparse_categorical_crossentropy", run_eagerly=True)
    return model
"""
TRAIN = (
    LOGGED_MODEL
    + """
shardfeed.training.fit_resumable(build, data, run_dir, epochs=2, batch_size=4, seed=7, save_every=2,
                                 image_size=16, read=shardfeed.ReadOptions(with_filenames=True), verbose=0)
"""
)


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


@pytest.mark.parametrize(
    ("before", "after", "steps", "batch"), [(2, 3, 5, 2), (4, 1, 3, 3), (3, 2, 1, 5), (1, 4, 7, 2)]
)
def test_positions_left_after_n_workers_are_shared_by_m(before: int, after: int, steps: int, batch: int) -> None:
    """N workers that each read `steps` batches read a prefix of the epoch's order; M workers
    started at that prefix (start_record) read the rest: every position once (but the 'drop'
    remainder of fewer than M positions at the very end)."""
    from shardfeed.read.order import WorkerShare

    n = 103
    read_before = [WorkerShare(before, i, "drop").positions(n)[: steps * batch] for i in range(before)]
    consumed = before * steps * batch
    read_after = [WorkerShare(after, i, "drop").positions(n, consumed) for i in range(after)]
    seen = sorted(int(p) for part in read_before + read_after for p in part)
    assert seen == list(range(n - (n - consumed) % after))


ELASTIC = (
    LOGGED_MODEL
    + """
workers, index = int(sys.argv[4]), int(sys.argv[5])
read = shardfeed.ReadOptions(with_filenames=True, num_workers=workers, worker_index=index)
shardfeed.training.fit_resumable(build, data, run_dir, epochs=1, batch_size=2, seed=5, save_every=5,
                                 image_size=16, read=read, verbose=0)
"""
)


@pytest.mark.slow
def test_two_workers_killed_mid_epoch_resume_as_three(photo_tree: Path, tmp_path: Path) -> None:
    """Two input workers (2 records a step each) are SIGKILLed after the step-5 snapshot; three
    workers resume from its resume.json: the epoch's 44 records are each trained on once."""
    import json
    import shutil

    data = tmp_path / "data"
    convert(str(photo_tree), str(data), ConvertOptions(split="train=1", shards=3), workers=1, progress=False)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", STEP_SECONDS="0.3")  # slow enough to stop both before step 10

    def start(workers: int, index: int, run_dir: Path) -> subprocess.Popen[str]:
        log = tmp_path / f"log-{workers}-{index}"
        cmd = [sys.executable, "-c", ELASTIC, str(data), str(run_dir), str(log), str(workers), str(index)]
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def lines(workers: int, index: int) -> list[str]:
        log = tmp_path / f"log-{workers}-{index}"
        return log.read_text().splitlines() if log.exists() else []

    first = [start(2, i, tmp_path / f"run-{i}") for i in range(2)]
    deadline = time.monotonic() + 240
    state = tmp_path / "run-0" / "resume.json"
    while not (state.exists() and all(len(lines(2, i)) >= 6 for i in range(2))):
        assert time.monotonic() < deadline, "the first workers did not get to step 6"
        for proc in first:
            if proc.poll() is not None:
                pytest.fail(f"a worker ended before it was killed: {proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        time.sleep(0.02)
    for proc in first:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    saved = json.loads(state.read_text())
    assert saved["epoch"] == 0 and saved["step"] == 5 and saved["num_workers"] == 2, saved
    assert saved["records_consumed"] == 20 and saved["global_batch"] == 4  # a document a person can read
    before = [batch for i in range(2) for batch in lines(2, i)[: saved["step"]]]
    for i in range(3):  # each new worker starts from the saved point
        shutil.copytree(tmp_path / "run-0", tmp_path / f"resumed-{i}")
    second = [start(3, i, tmp_path / f"resumed-{i}") for i in range(3)]
    for proc in second:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
    after = [batch for i in range(3) for batch in lines(3, i)]
    assert [len(lines(3, i)) for i in range(3)] == [4, 4, 4]  # (44 - 20) / 3 workers / 2 per batch
    names = [name for batch in before + after for name in batch.split(",")]
    records = IndexedRecords(str(data), "train")
    assert sorted(names) == sorted(records.example(i)["image/filename"].decode() for i in range(len(records)))
